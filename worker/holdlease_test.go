package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// The server drops a heartbeat that lists a lease key breaking the key rule (SPEC section 11), so one
// bad HoldLease would silence every heartbeat and the worker's entry would expire while it runs. The
// worker refuses such a key; its heartbeats go on listing the valid ones.
func TestHoldLeaseRefusesAnInvalidKey(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	updates := statusUpdates(t, env)
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-9",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.Status == wire.StatusReady })
	w.HoldLease("leases/front door") // a space: not a key
	w.HoldLease("")
	w.HoldLease("leases/front-door-video-720p")
	waitStatus(t, updates, func(s wire.WorkerStatus) bool {
		return slices.Equal(s.Leases, []string{"leases/front-door-video-720p"})
	})
	if got := w.Leases(); !slices.Equal(got, []string{"leases/front-door-video-720p"}) {
		t.Fatalf("Leases() = %q", got)
	}
}
