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

// startUntilCancelled is a component whose Start returns (nil) only once its context ends: a cache or
// tracker waiting for its first snapshot.
type startUntilCancelled struct{ entered chan struct{} }

func (s startUntilCancelled) Start(ctx context.Context) error {
	close(s.entered)
	<-ctx.Done()
	return nil
}
func (startUntilCancelled) Stop() {}

// A worker told to stop while its components are still starting never became ready: its heartbeats
// (SPEC section 11) must not announce "ready" on the way down, or admin watchers would see a worker
// that was never serving report itself ready, and its owned goroutines would start after the stop.
func TestWorkerStoppedWhileStartingIsNeverReady(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-11")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-11",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	comp := startUntilCancelled{make(chan struct{})}
	w.Add(comp)
	goroutineRan := make(chan struct{}, 1)
	w.Go("job", func(context.Context) error { goroutineRan <- struct{}{}; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := runUntilStarting(t, ctx, w, comp.entered)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if statuses := statusesUntilStopping(t, beats); slices.Contains(statuses, wire.StatusReady) {
		t.Fatalf("heartbeats %q: a worker stopped while starting announced ready", statuses)
	}
	if len(goroutineRan) != 0 {
		t.Fatal("an owned goroutine was started after the worker was told to stop")
	}
}

// Run may be called again once it returned (a supervisor that restarts the worker after a failure):
// the new run announces "starting" while its components start, as the first did, not the "stopping"
// its predecessor ended with.
func TestWorkerRunAgainStartsAsStarting(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-12")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-12",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	next := func() wire.Heartbeat { t.Helper(); return nextBeat(t, beats) }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil { // a run that stops at once
		t.Fatal(err)
	}
	for hb := next(); hb.Status != wire.StatusStopping; hb = next() {
	}
	comp := startUntilCancelled{make(chan struct{})}
	w.Add(comp)
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-comp.entered
	if hb := next(); hb.Status != wire.StatusStarting {
		t.Fatalf("first heartbeat of the second run: %+v, want starting", hb)
	}
	if s := w.Status(); s != wire.StatusStarting {
		t.Fatalf("Status() while the second run starts: %s", s)
	}
}
