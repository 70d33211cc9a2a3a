package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// WaitForRevision asks the store for its epoch once the cache reached the revision, and retries that
// question while the store does not answer. A lost info reply must not use up the caller's whole
// context: each try is bounded by the client's request timeout, so the next try, answered, ends the
// wait well within a context that would have outlived the first.
func TestWaitForRevisionRetriesALostInfoReply(t *testing.T) {
	env := startEnv(t)
	const ns = "user/alice"
	var dropInfo atomic.Bool
	var dropped atomic.Int32
	startRelay(t, env.URL, relayHooks{after: func(op wire.Op, _ int, _ []byte) bool {
		if op == wire.OpInfo && dropInfo.CompareAndSwap(true, false) {
			dropped.Add(1)
			return false
		}
		return true
	}})
	c := newClient(t, env, alice.ID, WithPrefix(relayPrefix), WithRequestTimeout(200*time.Millisecond))
	k := newCache(t, c, CacheOptions{Namespace: ns, CheckInterval: -1})
	e, err := newClient(t, env, alice.ID).Put(ctxT(t), preference(ns, "k", "x"))
	if err != nil {
		t.Fatal(err)
	}
	dropInfo.Store(true)
	// A deadline far beyond the request timeout: the caller gives the wait time to retry.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatalf("WaitForRevision(%d) with one info reply lost: %v (cache at %d)", e.Revision, err, k.Revision())
	}
	if dropped.Load() != 1 {
		t.Fatalf("%d info replies dropped, want 1: the test did not test the lost reply", dropped.Load())
	}
}
