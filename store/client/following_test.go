package client

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// Following turns true with the snapshot that ends a resync, before OnResync runs: a handler that
// tells its own readers "changed" (a coordinator FleetView does) is the last word they get, and a
// reader that then asks Following must not be told that the fresh entries it reads are stale.
func TestFollowingWhileOnResyncRuns(t *testing.T) {
	env := startEnv(t)
	nc := env.Connect(t, admin.ID)
	c, err := New(nc, admin.ID)
	if err != nil {
		t.Fatal(err)
	}
	var cache atomic.Pointer[Cache]
	following := make(chan bool, 16)
	k, err := c.NewCache(ctxT(t), CacheOptions{Namespace: "service/tx", Handlers: Handlers{
		OnResync: func([]wire.Entry, uint64) {
			if k := cache.Load(); k != nil { // not the first snapshot's, which NewCache returns after
				following <- k.Following()
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	cache.Store(k)
	if !natstest.Kick(env.NATS, nc) {
		t.Fatal("no connection to cut")
	}
	select {
	case f := <-following:
		if !f {
			t.Fatal("Following is false while OnResync runs for the snapshot that ended the resync")
		}
	case <-time.After(testTimeout):
		t.Fatal("no resync after the connection was cut")
	}
	if !k.Following() {
		t.Fatal("Following is false after the resync")
	}
}
