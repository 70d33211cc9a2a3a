package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

// The leader's side: a lease whose NATS connection is closed for good can never renew again, nor send
// a write. Its Lost closes at once, with an error wrapping ErrLost and nats.ErrConnectionClosed, and
// an Elector's job is stopped and Run returns, instead of leading on until the lease's safety margin
// runs out (here 50 s after the last renewal) while nothing it does can reach the store.
func TestLeaderRunEndsWhenItsConnectionCloses(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	c, err := client.New(nc, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	leases := make(chan *lease.Lease, 1)
	e, err := lease.NewElector(c, lease.ElectorOptions{
		Options: opts("leaders/x", "w1", time.Minute),
		OnStarted: func(ctx context.Context, l *lease.Lease) {
			leases <- l
			<-ctx.Done()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	l := recv(t, leases, "the leader's term")
	nc.Close()
	closed(t, l.Lost(), "Lost once the connection is closed")
	if !errors.Is(l.Err(), lease.ErrLost) || !errors.Is(l.Err(), nats.ErrConnectionClosed) || l.Held() {
		t.Fatalf("after the connection closed: err %v, held %v; want ErrLost with nats.ErrConnectionClosed", l.Err(), l.Held())
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("leader Run returned nil, want the closed connection's error")
		}
	case <-time.After(testTimeout):
		cancel()
		err := <-done
		t.Fatalf("leader Run did not return after its NATS connection closed (returned %v only after cancel)", err)
	}
}
