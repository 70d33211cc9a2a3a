package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/stated"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// TestWorkerUnhealthyWhenHeartbeatsAreDenied: a heartbeat NATS refuses (a Principal that is not the
// connection's user, so the subject is outside its publish permissions) is refused asynchronously:
// Publish returns nil. The worker's entry is never written, so /healthz must not say ok.
func TestWorkerUnhealthyWhenHeartbeatsAreDenied(t *testing.T) {
	users := []natsserver.User{}
	for _, id := range []string{"alice", "bob"} {
		users = append(users, natsserver.User{Name: id, Password: id + "-pw",
			Permissions: stated.Permissions(wire.DefaultPrefix, stated.PrincipalConfig{ID: id})})
	}
	env := testenv.Start(t, testenv.Options{NATSUsers: users})
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "bob", WorkerID: "tx-1",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, w)
	deadline := time.Now().Add(10 * time.Second)
	// Several heartbeats have been refused by now; poll until the worker says so (bounded).
	for {
		if err := w.Healthy(); err != nil {
			t.Logf("unhealthy as expected: %v", err)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a worker whose heartbeats are all refused is healthy (last error %v)", w.Conn().LastError())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runReady runs w until the test's end, and returns once it reports ready (Status; Healthy has no
// event to wait for, so both are polled, bounded).
func runReady(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for w.Status() != wire.StatusReady {
		if time.Now().After(deadline) {
			t.Fatalf("worker status %q after 10 s, want ready", w.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
