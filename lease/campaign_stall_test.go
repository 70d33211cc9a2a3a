package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// A standby whose watch cannot be made again (here the store refuses it as WATCH_TOO_BROAD once keys
// extending the lease key appeared, after a reconnect made the cache watch anew) follows nothing
// more: its cached entries go stale, and an expiry or release of the lease would never reach it.
// Campaign must not wait on such a cache for ever: it claims the key if it is free, and otherwise
// returns the store's refusal to watch again, as its doc says.
func TestCampaignDoesNotWaitOnAStalledWatch(t *testing.T) {
	bounds := wire.DefaultBounds()
	bounds.MaxSnapshotEntries = 2
	env := testenv.Start(t, testenv.Options{Bounds: &bounds})
	admin := newClient(t, env)
	ctx := ctxT(t)
	const k = "leaders/x"
	holder := claim(t, newClient(t, env), opts(k, "w1", time.Minute))

	nc := env.Connect(t, "coordinator")
	c, err := client.New(nc, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	waiting, onWait := notifier[struct{}]()
	res := make(chan campaignResult, 1)
	cctx, cancel := context.WithCancel(context.Background()) // the test's bound is below
	defer cancel()
	go func() {
		l, err := lease.Campaign(cctx, c, lease.WithHooks(opts(k, "w2", time.Minute), lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		res <- campaignResult{l, err}
	}()
	recv(t, waiting, "the standby to wait")

	// Three keys that extend the lease key: under the standby's prefix, over the snapshot bound of two
	// even without the lease entry. The running watch delivers them; a new one is refused.
	for _, x := range []string{"leaders/x1", "leaders/x2", "leaders/x3"} {
		if _, err := admin.Put(ctx, wire.PutRequest{Namespace: ns, Key: x, Schema: "keeppeek.observed-status.v1",
			Document: statusPut(x, "active").Document}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	// The holder goes away: its entry is deleted, the key is free.
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}

	select {
	case r := <-res:
		if r.err == nil {
			t.Cleanup(func() { releaseNow(t, r.l) })
			if !r.l.Held() {
				t.Fatal("Campaign returned a lease that is not held")
			}
			return
		}
		if !errors.Is(r.err, wire.ErrWatchTooBroad) {
			t.Fatalf("Campaign: %v, want a lease or the watch's WATCH_TOO_BROAD", r.err)
		}
	case <-time.After(testTimeout):
		cancel()
		r := <-res
		t.Fatalf("the standby waited on a stalled watch while the key was free (returned %v after cancel)", r.err)
	}
}
