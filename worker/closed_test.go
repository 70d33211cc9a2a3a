package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/worker"
)

// A worker whose NATS connection is closed for good (its reconnect attempts ran out, say) can neither
// heartbeat nor reach the store or the media server any more: Run stops it gracefully and returns an
// error saying so, instead of running on, unseen, until its context ends.
func TestWorkerStopsWhenItsConnectionCloses(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "alice")
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-7", HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w.Add(component{"a", rec})
	running := make(chan struct{})
	w.Go("job", func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background()) // no deadline, as a process's
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-running
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Run = %v, want an error with nats.ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("Run did not return within 10 s of its connection closing (returned %v after cancel)", <-done)
	}
	if got := rec.list(); len(got) != 2 || got[1] != "stop a" {
		t.Fatalf("components: %v, want started and stopped", got)
	}
}
