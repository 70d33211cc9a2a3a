package reconciler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A Reconcile that ignores its context must not hold Stop forever (controller-runtime's manager
// bounds its graceful shutdown the same way): once StopTimeout has passed, Stop closes the cache and
// returns; the abandoned Reconcile's outcome schedules nothing when it finally returns.
func TestControllerStopIsBoundedByStopTimeout(t *testing.T) {
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	var (
		started  = make(chan struct{})
		release  = make(chan struct{})
		returned = make(chan struct{})
		calls    atomic.Int64
	)
	p := newProbe(t)
	p.behave = func(ctx context.Context, cl call, n int) (Result, error) {
		calls.Add(1)
		if cl.key != "intents/a" || n != 1 {
			return Result{}, nil
		}
		defer close(returned)
		close(started)
		<-release // ignores ctx: a Reconcile stuck in a call without a context
		return Result{Requeue: true}, nil
	}
	ctrl := p.start(t, c, Options{StopTimeout: 100 * time.Millisecond})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	recv(t, started, "the first Reconcile")

	stopped := make(chan struct{})
	go func() {
		ctrl.Stop()
		close(stopped)
	}()
	recv(t, stopped, "Stop to return past a stuck Reconcile")
	select {
	case <-ctrl.Cache().Done():
	default:
		t.Fatal("Stop returned without closing the cache")
	}
	close(release)
	recv(t, returned, "the stuck Reconcile to return")
	ctrl.Enqueue("intents/b")
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d Reconciles, want 1: the abandoned one's Requeue or a later Enqueue ran", n)
	}
}
