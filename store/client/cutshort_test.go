package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// cancelOnRequest returns a context that is cancelled as soon as a watch request of principal is on
// the wire (seen by a plain subscriber of its subject): the request is sent, its reply not yet come.
func cancelOnRequest(t *testing.T, env *testenv.Env, principal string) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nc := env.Connect(t, "coordinator")
	sub, err := nc.Subscribe(wire.StateSubject(wire.DefaultPrefix, principal, wire.OpWatch), func(*nats.Msg) { cancel() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// awaitNoWatches waits (bounded) until the server holds no live watch.
func awaitNoWatches(t *testing.T, env *testenv.Env) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for len(env.Store.LiveWatches()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("watches left registered on the server: %+v", env.Store.LiveWatches())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A watch request given up (its context ended after it was sent) may still register the watch: the
// client waits for the reply in the background and unwatches what it registered, so neither the id
// nor the principal's watch slot is left taken.
func TestWatchCutShortLeavesNoWatch(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	for i := range 20 {
		ctx := cancelOnRequest(t, env, alice.ID)
		w, err := c.Watch(ctx, wire.WatchRequest{WatchID: fmt.Sprintf("cut-%d", i), Namespace: "user/alice"})
		switch {
		case err == nil: // the reply won the race: an ordinary watch
			if err := w.Stop(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		case !errors.Is(err, context.Canceled):
			t.Fatalf("watch %d: %v, want context.Canceled", i, err)
		}
	}
	awaitNoWatches(t, env)
	// And an id given up can be watched again.
	w, err := c.Watch(ctxT(t), wire.WatchRequest{WatchID: "cut-0", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// A cache given up while its first watch request is out leaves no watch on the server either.
func TestNewCacheCutShortLeavesNoWatch(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	for range 10 {
		ctx := cancelOnRequest(t, env, alice.ID)
		k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice"})
		if err == nil {
			if err := k.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	awaitNoWatches(t, env)
}

// Stop whose unwatch fails (its context ended) can be called again, and then removes the watch.
func TestStopRetriesItsUnwatch(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	w, err := c.Watch(ctxT(t), wire.WatchRequest{WatchID: "w", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Stop(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with an ended context: %v", err)
	}
	waitClosed(t, w.Messages())
	if n := len(env.Store.LiveWatches()); n != 1 {
		t.Fatalf("%d live watches after a failed unwatch, want 1", n)
	}
	if err := w.Stop(ctxT(t)); err != nil {
		t.Fatalf("Stop again: %v", err)
	}
	if n := len(env.Store.LiveWatches()); n != 0 {
		t.Fatalf("%d live watches after Stop succeeded", n)
	}
	if err := w.Stop(ctxT(t)); err != nil {
		t.Fatalf("Stop after success: %v", err)
	}
}

// A cache whose NATS connection is closed stops for good: a writer waiting on it learns so at once
// (ErrCacheClosed) instead of waiting for its context, and the entries it had stay readable.
func TestCacheStopsWhenItsConnectionCloses(t *testing.T) {
	env := startEnv(t)
	nc := env.Connect(t, alice.ID)
	c, err := New(nc, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	e, k := aliceCache(t, c)
	waited := make(chan error, 1)
	go func() { waited <- k.WaitForRevision(ctxT(t), e.Revision+100) }()
	nc.Close()
	select {
	case err := <-waited:
		if !errors.Is(err, ErrCacheClosed) {
			t.Fatalf("a wait on a cache whose connection closed: %v, want ErrCacheClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("a wait on a cache whose connection closed did not end")
	}
	if _, ok := k.Get("p/a"); !ok {
		t.Fatal("the cache's entries are gone")
	}
}

// A cache whose principal lost read permission cannot watch again: it says so (Err, and a
// WaitForRevision it cannot satisfy returns the store's PERMISSION_DENIED at once), keeps retrying,
// and follows again once the permission is back.
func TestCacheSaysWhenItCannotWatchAgain(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	e, k := aliceCache(t, c)
	if err := env.Server.SetPrincipals([]policy.Principal{admin, bob}); err != nil { // alice is removed
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctxT(t), e.Revision+1); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("a wait on a cache that lost its permission: %v, want PERMISSION_DENIED", err)
	}
	if !errors.Is(k.Err(), wire.ErrPermissionDenied) {
		t.Fatalf("Err() = %v", k.Err())
	}
	if err := env.Server.SetPrincipals([]policy.Principal{admin, alice, bob}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for k.Err() != nil { // the cache retries with backoff: no event to await
		if time.Now().After(deadline) {
			t.Fatalf("the cache did not follow again once the permission was back: %v", k.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.Put(ctxT(t), preference("user/alice", "p/b", "1")); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctxT(t), e.Revision+1); err != nil {
		t.Fatal(err)
	}
}

// aliceCache writes user/alice p/a through c and returns that entry and a Cache of user/alice holding
// it, closed at cleanup.
func aliceCache(t *testing.T, c *Client) (wire.Entry, *Cache) {
	t.Helper()
	e, err := c.Put(ctxT(t), preference("user/alice", "p/a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.NewCache(ctxT(t), CacheOptions{Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return e, k
}
