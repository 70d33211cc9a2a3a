package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
)

// A closed NATS connection ends Elector.Run with an error, also for a standby waiting in Campaign: its
// cache stops following, and Campaign learns it from the cache rather than waiting for its context.
func TestStandbyRunEndsWhenItsConnectionCloses(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	claim(t, newClient(t, env), opts("leaders/x", "w1", time.Minute))
	nc := env.Connect(t, "coordinator")
	c, err := client.New(nc, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	waiting, onWait := notifier[struct{}]()
	e, err := lease.NewElector(c, lease.ElectorOptions{
		Options:   lease.WithHooks(opts("leaders/x", "w2", time.Minute), lease.TestHooks{Wait: func() { onWait(struct{}{}) }}),
		OnStarted: func(ctx context.Context, _ *lease.Lease) { <-ctx.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	recv(t, waiting, "the standby to wait")
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrCacheClosed) {
			t.Fatalf("standby Run returned %v, want an error with ErrCacheClosed", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		err := <-done
		t.Fatalf("standby Run did not return within 10 s of its NATS connection closing (returned %v only after cancel)", err)
	}
}
