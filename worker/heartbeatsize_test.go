package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// A worker may hold more leases than one heartbeat can list: the server drops a heartbeat body over
// 64 KiB (SPEC section 11: a heartbeat that breaks a rule is dropped), so a worker that listed them
// all would never be seen alive. Its heartbeats list as many as fit, and it stays in the fleet.
func TestHeartbeatOfAWorkerWithManyLeasesStillArrives(t *testing.T) {
	long := strings.Repeat("x", 240)
	var leases []string
	for i := range 300 { // 300 keys of ~250 bytes: about 75 KB of lease keys
		leases = append(leases, fmt.Sprintf("leases/%03d-%s", i, long))
	}
	w, st := readyHolding(t, leases)
	if len(st.Leases) == 0 || st.Leases[0] != fmt.Sprintf("leases/000-%s", long) {
		t.Fatalf("the worker's entry lists %d leases, want the first of them", len(st.Leases))
	}
	if got := len(w.Leases()); got != 300 {
		t.Fatalf("Leases() has %d keys, want all 300", got)
	}
}

// The server's bound counts the whole message, its subject too, not only the body: a heartbeat whose
// body fits 64 KiB by fewer bytes than its subject has was dropped at every beat (its lease list is
// the same each time), and the worker, running, was never seen alive. The worker leaves the subject
// room: its body is cut to fit beside it.
func TestHeartbeatJustUnderTheBoundWithItsSubjectArrives(t *testing.T) {
	// Leases whose heartbeat body is 65,526 bytes: under 64 KiB by 10, fewer than the subject's 28.
	subject := wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-big")
	const target = 65536 - 10
	body := func(leases []string) int {
		b, _ := json.Marshal(wire.Heartbeat{WorkerID: "tx-big", Service: "alice", Sequence: 1, SentAtMs: time.Now().UnixMilli(),
			IntervalMs: 100, Status: wire.StatusReady, Leases: leases})
		return len(b)
	}
	var leases []string
	for i := 0; body(leases) < target-300; i++ {
		leases = append(leases, fmt.Sprintf("leases/%03d-%s", i, strings.Repeat("x", 240)))
	}
	last := fmt.Sprintf("leases/999-%s", strings.Repeat("y", target-body(leases)-3-len("leases/999-")))
	leases = append(leases, last)
	if n := body(leases); n != target || n+len(subject) <= 65536 {
		t.Fatalf("the heartbeat body is %d bytes with a %d-byte subject, want %d", n, len(subject), target)
	}
	_, st := readyHolding(t, leases)
	if len(st.Leases) == 0 || len(st.Leases) == len(leases) {
		t.Fatalf("the worker's entry lists %d of %d leases, want all but the last few", len(st.Leases), len(leases))
	}
}

// readyHolding runs alice's worker tx-big, heartbeating every 100 ms, holding leases, until the test
// ends, and returns it with the first worker status that says ready (failing the test if none comes).
func readyHolding(t *testing.T, leases []string) (*worker.Worker, wire.WorkerStatus) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	updates := statusUpdates(t, env)
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-big",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		w.HoldLease(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.Status == wire.StatusReady })
}
