package worker_test

import (
	"context"
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
	env := testenv.Start(t, testenv.Options{})
	updates := statusUpdates(t, env)
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-big",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 240)
	for i := range 300 { // 300 keys of ~250 bytes: about 75 KB of lease keys
		w.HoldLease(fmt.Sprintf("leases/%03d-%s", i, long))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	st := waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.Status == wire.StatusReady })
	if len(st.Leases) == 0 || st.Leases[0] != fmt.Sprintf("leases/000-%s", long) {
		t.Fatalf("the worker's entry lists %d leases, want the first of them", len(st.Leases))
	}
	if got := len(w.Leases()); got != 300 {
		t.Fatalf("Leases() has %d keys, want all 300", got)
	}
}
