package worker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// stuckStop is a component that starts at once and whose Stop returns only when release is closed
// (a controller waiting for a Reconcile that ignores its context).
type stuckStop struct {
	stopping, release chan struct{}
}

func (stuckStop) Start(context.Context) error { return nil }
func (s stuckStop) Stop() {
	close(s.stopping)
	<-s.release
}

// failStart is a component whose Start fails.
type failStart struct{ err error }

func (f failStart) Start(context.Context) error { return f.err }
func (failStart) Stop()                         {}

// ctxStart is a component whose Start waits for its context and returns its error, as
// reconciler.Controller.Start and capabilities.Tracker.Start do while the store or the media server
// does not answer yet.
type ctxStart struct{ entered chan struct{} }

func (s ctxStart) Start(ctx context.Context) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}
func (ctxStart) Stop() {}

// A component whose Start fails stops the worker: the components started before it are stopped
// within StopTimeout, as in every other stop (a Stop stuck on a Reconcile must not hold Run for ever),
// and the heartbeats say "draining" while they stop (SPEC section 11), then "stopping".
func TestWorkerStartFailureStopIsBoundedAndDrains(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-20")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-20",
		HeartbeatInterval: 100 * time.Millisecond, StopTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stuck := stuckStop{stopping: make(chan struct{}), release: make(chan struct{})}
	defer close(stuck.release)
	boom := errors.New("boom")
	w.Add(stuck)
	w.Add(failStart{boom})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "stop took longer") {
			t.Fatalf("Run = %v, want the start failure and the stop timeout", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("Run did not return within 8 s of a failed start (StopTimeout 200 ms)")
	}
	select {
	case <-stuck.stopping:
	default:
		t.Fatal("the component started before the failure was not stopped")
	}
	if got := statusesUntilStopping(t, beats); !slices.Equal(got, []string{wire.StatusStarting, wire.StatusDraining, wire.StatusStopping}) {
		t.Fatalf("statuses %q, want starting, draining, stopping", got)
	}
}

// A worker told to stop while a component's Start waits for the store (and returns its context's
// error when told to stop) stops as any worker told to stop does: Run returns nil, not the
// cancellation as a start failure (a SIGTERM during the start would otherwise exit non-zero).
func TestWorkerStoppedWhileStartingReturnsNil(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-21",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	comp := ctxStart{make(chan struct{})}
	w.Add(comp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runUntilStarting(t, ctx, w, comp.entered)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil for a worker told to stop while starting", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// A NATS connection closed for good while the components start ends the start: the worker cannot
// heartbeat or reach the store any more, and a Start that waits for the store (until its context
// ends) would otherwise hold Run for ever.
func TestWorkerConnectionClosedWhileStarting(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "alice")
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-22",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	comp := ctxStart{make(chan struct{})}
	w.Add(comp)
	ctx, cancel := context.WithCancel(context.Background()) // no deadline, as a process's
	defer cancel()
	done := runUntilStarting(t, ctx, w, comp.entered)
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Run = %v, want an error with nats.ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("Run did not return within 10 s of its connection closing during the start (returned %v after cancel)", <-done)
	}
}
