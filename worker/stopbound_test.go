package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/worker"
)

// StopTimeout bounds the graceful stop, also when NATS is unreachable: the last heartbeat cannot be
// flushed then, and waiting for it must not hold Run past the bound (nats.go's Flush alone waits 10 s
// for a connection that is reconnecting). The bound checked here, 8 s for a StopTimeout of 200 ms
// with nothing to stop, is far from any machine's speed and below that 10 s.
func TestWorkerStopIsBoundedWhileNATSIsDown(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-10",
		HeartbeatInterval: 100 * time.Millisecond, StopTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	w.Go("job", func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-running

	reconnecting := nc.StatusChanged(nats.RECONNECTING)
	defer nc.RemoveStatusListener(reconnecting)
	ns.Shutdown()
	ns.WaitForShutdown()
	select {
	case <-reconnecting:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not notice that NATS went down")
	}
	if err := w.Healthy(); err == nil {
		t.Fatal("a worker cut off from NATS is healthy")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil (nothing took long to stop)", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("Run did not return within 8 s of its context ending while NATS was down (StopTimeout 200 ms)")
	}
}

// A negative StopTimeout would make every stop "take longer than" it at once: Run would stop the
// components without waiting for the owned goroutines and always return an error. New refuses it, as
// it refuses every other option out of range.
func TestWorkerRefusesANegativeStopTimeout(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "w", StopTimeout: -time.Second}); err == nil {
		t.Fatal("New accepted a negative StopTimeout")
	}
}
