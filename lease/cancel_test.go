package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// A claim given up (its context ended once the put was on the wire) may still commit: the lease
// follows it to its reply and deletes what it committed, so the key is not left held by nobody for a
// whole TTL, and another holder can claim it at once.
func TestClaimGivenUpLeavesNoLease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	c := newClient(t, env)
	observer := env.Connect(t, "coordinator")
	const key = "leaders/given-up"
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		sub, err := observer.Subscribe(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), func(*nats.Msg) { cancel() })
		if err != nil {
			t.Fatal(err)
		}
		if err := observer.Flush(); err != nil {
			t.Fatal(err)
		}
		l, err := lease.Claim(ctx, c, opts(key, "w1", time.Minute))
		_ = sub.Unsubscribe()
		cancel()
		if err == nil { // the reply won the race
			releaseNow(t, l)
		}
	}
	// Every claim given up that committed is deleted: another holder gets the key long before the
	// minute's TTL of one that was left behind.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := lease.Campaign(ctx, c, opts(key, "w2", time.Minute))
	if err != nil {
		e, _ := get(t, admin, key)
		t.Fatalf("another holder could not get the key: %v (entry %s)", err, e.Document)
	}
	releaseNow(t, l)
}
