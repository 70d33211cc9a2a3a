package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/worker"
)

// signalStop is a component whose Stop closes stopped.
type signalStop struct{ stopped chan struct{} }

func (signalStop) Start(context.Context) error { return nil }
func (s signalStop) Stop()                     { close(s.stopped) }

// An owned goroutine that ignores its context must not keep the components running after Run gave
// up on the stop: once StopTimeout has passed, Run returns with an error and the components are told
// to stop (a controller then starts no more Reconciles, leases are released), even though the
// goroutine still runs.
func TestWorkerStopsComponentsPastAStuckGoroutine(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-8",
		StopTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	comp := signalStop{make(chan struct{})}
	w.Add(comp)
	running, release := make(chan struct{}), make(chan struct{})
	goroutineDone := make(chan struct{})
	w.Go("stuck", func(context.Context) error {
		defer close(goroutineDone)
		close(running)
		<-release // ignores its context
		return nil
	})
	defer func() { close(release); <-goroutineDone }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-running
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stop took longer") {
			t.Fatalf("Run = %v, want the stop timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of its context ending (StopTimeout 200 ms)")
	}
	select {
	case <-comp.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the component was not stopped while a goroutine ignored its context")
	}
}
