package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
)

// A leader whose machine is suspended for longer than its lease (a standby, on another machine,
// may lead meanwhile) resumes with Held false at once; OnStarted's ctx, "cancelled when the lease is
// lost (as Held turns false ...)", must end soon after: a job that checks its ctx, as the Elector
// tells it to, acts as the leader otherwise. It stayed live until the renewal loop's timer, which
// runs on Go's monotonic clock and stood still through the suspend, next fired: up to RenewEvery.
func TestElectorJobStopsOnceHeldTurnsFalseAfterASuspend(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	const ttl, renewEvery = 9 * time.Second, 3 * time.Second
	o := opts("leaders/suspended", "w1", ttl)
	o.RenewEvery = renewEvery
	armed, onSleep := notifier[time.Duration]()
	o = lease.WithHooks(o, lease.TestHooks{Sleep: onSleep})
	o, suspend := lease.WithSuspendableClock(o)
	type term struct {
		ctx context.Context
		l   *lease.Lease
	}
	terms := make(chan term, 1)
	e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{Options: o,
		OnStarted: func(ctx context.Context, l *lease.Lease) {
			terms <- term{ctx, l}
			<-ctx.Done()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); recv(t, done, "Run") }()
	tm := recv(t, terms, "the first term")
	for len(armed) > 0 {
		<-armed
	}
	recv(t, armed, "the renewal loop asleep") // its timer armed on the clock before the suspend
	suspend(ttl)                              // the machine slept through the lease's whole TTL
	resumed := time.Now()
	if tm.l.Held() {
		t.Fatal("Held after a suspend longer than the lease's validity")
	}
	select {
	case <-tm.ctx.Done():
	case <-time.After(renewEvery / 2):
		t.Fatalf("OnStarted's ctx still live %v after Held turned false (the suspend); RenewEvery is %v", time.Since(resumed).Round(time.Millisecond), renewEvery)
	}
}
