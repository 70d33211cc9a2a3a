package client

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// TestCacheUnderClockSkew: a state server whose clock is minutes off the client's changes nothing of
// what a Cache holds. The cache keeps an entry with a TTL from its PUT (or snapshot) to its EXPIRE, as
// the server says, and never judges expires_at_ms, a time of the server's clock, against its own:
// with the server behind, that deadline is minutes past by the client's clock for an entry that is
// live; with the server ahead, it is minutes ahead for an entry that expired.
func TestCacheUnderClockSkew(t *testing.T) {
	for _, sk := range []struct {
		name   string
		offset time.Duration
	}{{"store-ahead-10m", 10 * time.Minute}, {"store-behind-10m", -10 * time.Minute}} {
		t.Run(sk.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{admin}, ClockOffset: sk.offset})
			c := newClient(t, env, admin.ID)
			ctx := ctxT(t)
			const ns = "service/transcoder-a"
			r := newRecorder()
			k := newCache(t, c, CacheOptions{Namespace: ns, KeyPrefix: "leases/", Handlers: r.handlers()})
			r.awaitResync(t)

			const ttl = 2 * time.Second
			req := lease(ns, "leases/a", "w1", time.Now().UnixMilli())
			req.TTLMs = ptr(ttl.Milliseconds())
			sent := time.Now()
			e, err := c.Put(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if off := time.Until(time.UnixMilli(e.ExpiresAtMs)); off < sk.offset-testTimeout || off > sk.offset+testTimeout {
				t.Fatalf("expires_at_ms %d is %v from the test's clock, want about %v", e.ExpiresAtMs, off, sk.offset)
			}
			if err := k.WaitForRevision(ctx, e.Revision); err != nil {
				t.Fatal(err)
			}
			if got, ok := k.Get("leases/a"); !ok || got.Revision != e.Revision {
				t.Fatalf("the cache after the put: %+v, %v", got, ok)
			}
			// A second cache's snapshot holds the live entry too.
			k2 := newCache(t, c, CacheOptions{Namespace: ns, KeyPrefix: "leases/"})
			if got, ok := k2.Get("leases/a"); !ok || got.Revision != e.Revision {
				t.Fatalf("a new cache's snapshot: %+v, %v", got, ok)
			}

			select {
			case key := <-r.expires:
				if key != "leases/a" {
					t.Fatalf("EXPIRE of %q", key)
				}
			case <-time.After(testTimeout):
				t.Fatal("no EXPIRE")
			}
			// The server counts the TTL from its commit, which comes after the send (its clock keeps
			// whole milliseconds, so it may count one short).
			if elapsed := time.Since(sent); elapsed < ttl-time.Millisecond {
				t.Fatalf("expired %v after the put was sent, before its TTL of %v", elapsed, ttl)
			}
			if got, ok := k.Get("leases/a"); ok {
				t.Fatalf("the cache after the EXPIRE still holds %+v", got)
			}
			if _, err := c.Get(ctx, ns, "leases/a"); wire.CodeOf(err) != wire.CodeNotFound {
				t.Fatalf("get after the expiry: %v, want NOT_FOUND", err)
			}
		})
	}
}
