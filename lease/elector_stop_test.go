package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Run stopped while a standby's claim is on the wire returns only once that claim is settled: if it
// committed, it is deleted. Run returned at once and left the delete to a goroutine of its own, so a
// worker that closed its NATS connection after Run (a graceful stop) left the key held, by a process
// gone, for a whole TTL: every standby waited it out.
func TestElectorStoppedWhileItsClaimIsOnTheWire(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	observer := env.Connect(t, "coordinator")
	const k = "leaders/stopping"
	for round := range 5 {
		holder := claim(t, newClient(t, env), opts(k, "w0", time.Minute))
		nc := env.Connect(t, "coordinator")
		c, err := client.New(nc, "coordinator")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctxT(t))
		waiting, onWait := notifier[struct{}]()
		subs := make(chan *nats.Subscription, 1)
		e, err := lease.NewElector(c, lease.ElectorOptions{
			Options: lease.WithHooks(opts(k, "w1", time.Minute), lease.TestHooks{
				Wait: func() { onWait(struct{}{}) },
				Claim: func() { // the key looks free: stop Run as soon as the claim's put is sent
					sub, err := observer.Subscribe(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), func(*nats.Msg) { cancel() })
					if err == nil {
						err = observer.Flush()
					}
					if err != nil {
						t.Error(err)
					}
					subs <- sub
				}}),
			OnStarted: func(ctx context.Context, _ *lease.Lease) { <-ctx.Done() }})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		recv(t, waiting, "the standby to wait behind the holder")
		releaseNow(t, holder)
		if err := recv(t, done, "Run"); err != nil {
			t.Fatalf("Run: %v", err)
		}
		nc.Close() // the worker stops
		if sub := recv(t, subs, "the claim"); sub != nil {
			_ = sub.Unsubscribe()
		}
		if e, ok := get(t, admin, k); ok {
			t.Fatalf("round %d: after Run returned, the key is held by the stopped elector: %s", round, e.Document)
		}
		cancel()
	}
}
