package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// A cache closed while its re-watch is out (a resync the server is slow to answer) leaves no watch
// behind, even when its user closes the NATS connection as soon as Close returns, as a program that
// shuts down does: Close waits for that watch request's outcome (and its unwatch) instead of leaving
// it to a background unwatch that the closed connection can no longer send.
func TestCacheCloseDuringAResyncLeavesNoWatch(t *testing.T) {
	env := startEnv(t)
	ncClosed := make(chan struct{})
	held, served := holdWatchRequest(t, env.URL, 2, ncClosed) // the re-watch
	c := newClient(t, env, alice.ID, WithPrefix(relayPrefix))
	nc := c.Conn()
	k, err := c.NewCache(ctxT(t), CacheOptions{Namespace: "user/alice", WatchID: "closing"})
	if err != nil {
		t.Fatal(err)
	}
	if !env.Store.CloseWatch(alice, "closing", wire.CloseOverflow, "test") {
		t.Fatal("the cache's watch is not live")
	}
	select {
	case <-held:
	case <-time.After(testTimeout):
		t.Fatal("the cache did not watch again after the close")
	}
	if err := k.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	nc.Close()
	close(ncClosed)
	select {
	case <-served:
	case <-time.After(testTimeout):
		t.Fatal("the re-watch never reached the server")
	}
	if ws := env.Store.LiveWatches(); len(ws) != 0 {
		t.Fatalf("watches left on the server after Close and the connection's close: %+v", ws)
	}
}

// Unwatch of a watch whose request was given up and is still unanswered waits for that request: sent
// at once, it could reach the server first and find nothing, and the watch registered next would stay
// once the caller closed its connection (statectl interrupted while its watch request is out does
// just that).
func TestUnwatchWaitsForAWatchRequestGivenUp(t *testing.T) {
	env := startEnv(t)
	ncClosed := make(chan struct{})
	held, served := holdWatchRequest(t, env.URL, 1, ncClosed)
	c := newClient(t, env, alice.ID, WithPrefix(relayPrefix))
	nc := c.Conn()
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() {
		<-held
		cancel()
	}()
	if _, err := c.Watch(ctx, wire.WatchRequest{WatchID: "given-up", Namespace: "user/alice"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch: %v, want context.Canceled", err)
	}
	if err := c.Unwatch(ctxT(t), "given-up"); err != nil && !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Unwatch: %v", err)
	}
	nc.Close()
	close(ncClosed)
	select {
	case <-served:
	case <-time.After(testTimeout):
		t.Fatal("the watch request never reached the server")
	}
	if ws := env.Store.LiveWatches(); len(ws) != 0 {
		t.Fatalf("watches left on the server after Unwatch and the connection's close: %+v", ws)
	}
}

// holdWatchRequest relays a client's requests (prefix relayPrefix) to the server at url, holding its
// nth watch request back as a slow server would: until release is closed, or for a second at most
// (when the client waits for the request, the event a test needs does not come). held is closed when
// the request is being held, served once the server has answered it.
func holdWatchRequest(t *testing.T, url string, nth int, release <-chan struct{}) (held, served <-chan struct{}) {
	t.Helper()
	h, s := make(chan struct{}), make(chan struct{})
	startRelay(t, url, relayHooks{
		before: func(op wire.Op, n int) bool {
			if op == wire.OpWatch && n == nth {
				close(h)
				select {
				case <-release:
				case <-time.After(time.Second):
				}
			}
			return true
		},
		after: func(op wire.Op, n int, _ []byte) bool {
			if op == wire.OpWatch && n == nth {
				close(s)
			}
			return true
		},
	})
	return h, s
}
