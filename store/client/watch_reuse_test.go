package client

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// lateRegistration is a client (c) whose watch request req was given up and registered late: the
// client's unwatch of that registration is held at a relay until release is closed, and done is
// closed once the server answered it. waiting is told each time a watch request of req's id waits for
// that unwatch.
type lateRegistration struct {
	c             *Client
	req           wire.WatchRequest
	release, done chan struct{}
	waiting       chan struct{}
}

func startLateRegistration(t *testing.T, env *testenv.Env, req wire.WatchRequest) *lateRegistration {
	t.Helper()
	ctx := ctxT(t)
	l := &lateRegistration{req: req, release: make(chan struct{}), done: make(chan struct{}), waiting: make(chan struct{}, 1)}
	firstSent, releaseFirst, reapHeld := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var r *relay
	r = startRelay(t, env.URL, relayHooks{
		before: func(op wire.Op, n int) bool {
			switch {
			case op == wire.OpWatch && n == 1: // the request given up, held until its caller gave up
				close(firstSent)
				select {
				case <-releaseFirst:
				case <-r.stopped:
				}
			case op == wire.OpUnwatch && n == 1: // the unwatch of its late registration
				close(reapHeld)
				select {
				case <-l.release:
				case <-r.stopped:
				}
			}
			return true
		},
		after: func(op wire.Op, n int, _ []byte) bool {
			if op == wire.OpUnwatch && n == 1 {
				close(l.done)
			}
			return true
		},
	})
	l.c = newClient(t, env, alice.ID, WithPrefix(relayPrefix))
	l.c.watchWaits = func(string) {
		select {
		case l.waiting <- struct{}{}:
		default:
		}
	}
	gaveUp, cancel := context.WithCancel(ctx)
	go func() { <-firstSent; cancel() }()
	if w, err := l.c.Watch(gaveUp, req); !errors.Is(err, context.Canceled) {
		if w != nil {
			_ = w.Stop(ctx)
		}
		t.Fatalf("the watch given up returned %v", err)
	}
	close(releaseFirst) // it registers after all; the client's unwatch of it is held
	select {
	case <-reapHeld:
	case <-ctx.Done():
		t.Fatal("the late registration was never unwatched")
	}
	return l
}

// A watch request given up registers late, and the client unwatches that registration in the
// background. A new Watch of the same id, called meanwhile, waits for that unwatch before it
// subscribes to the delivery subject the two registrations share: the late registration's updates
// (watch_sequence 1, 2, ... of a change its snapshot already holds: SPEC 7.1, never both) and its
// close never reach the new watch. Before, the new Watch subscribed at once and took them as its own:
// it applied a delete its snapshot had overtaken, or ended on the other registration's CLOSED (and its
// Stop then left its own registration on the server).
func TestWatchSeesNothingOfTheRegistrationItWaitsFor(t *testing.T) {
	for _, closed := range []bool{false, true} {
		name := "updates"
		if closed {
			name = "close"
		}
		t.Run(name, func(t *testing.T) {
			env := startEnv(t)
			ctx := ctxT(t)
			const ns = "user/alice"
			writer := newClient(t, env, alice.ID) // straight to the server
			if _, err := writer.Put(ctx, preference(ns, "k", "1")); err != nil {
				t.Fatal(err)
			}
			late := startLateRegistration(t, env, wire.WatchRequest{WatchID: "same", Namespace: ns})
			c, req, waiting, releaseReap := late.c, late.req, late.waiting, late.release

			type result struct {
				w   *Watch
				err error
			}
			second := make(chan result, 1)
			go func() { w, err := c.Watch(ctx, req); second <- result{w, err} }()
			select {
			case <-waiting: // the second Watch waits for the unwatch
			case <-ctx.Done():
				t.Fatal("the second watch never waited for the first's unwatch")
			}
			// Meanwhile the late registration gets updates, or is closed by the server; a watcher of
			// the relayed subject sees the relay has passed them on before the unwatch goes on.
			seen, err := nats.Connect(env.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer seen.Close()
			relayed, err := seen.SubscribeSync(relayPrefix + ".watch.v1.alice.same")
			if err != nil {
				t.Fatal(err)
			}
			if err := seen.Flush(); err != nil {
				t.Fatal(err)
			}
			sent := 2
			if closed {
				sent = 1
				if !env.Store.CloseWatch(alice, "same", wire.CloseOverflow, "test") {
					t.Fatal("the late registration is not live")
				}
			} else {
				if _, err := writer.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "k"}); err != nil {
					t.Fatal(err)
				}
				if _, err := writer.Put(ctx, preference(ns, "k", "2")); err != nil {
					t.Fatal(err)
				}
			}
			for range sent {
				if _, err := relayed.NextMsg(testTimeout); err != nil {
					t.Fatalf("the relay never passed the late registration's message on: %v", err)
				}
			}
			close(releaseReap)
			res := <-second
			if res.err != nil {
				t.Fatalf("second watch: %v", res.err)
			}
			w := res.w
			snap := w.Snapshot()
			next, err := writer.Put(ctx, preference(ns, "other", "1")) // the new watch's first update
			if err != nil {
				t.Fatal(err)
			}
			if m := recv(t, w.Messages()); m.Kind != wire.UpdatePut || m.Key != "other" || m.WatchSequence != 1 || m.Revision != next.Revision {
				t.Fatalf("first message of the new watch (snapshot_revision %d): %s %s %s seq %d at revision %d; want its own PUT of other at %d",
					snap.SnapshotRevision, m.Kind, m.Reason, m.Key, m.WatchSequence, m.Revision, next.Revision)
			}
			if err := w.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if live := env.Store.LiveWatches(); len(live) != 0 {
				t.Fatalf("live watches after Stop: %+v", live)
			}
		})
	}
}

// Stop does not unwatch a watch whose id a newer Watch of the client has registered since, even when
// the server's CLOSED of the old one has not been decoded yet: with max_pending_updates above what
// Messages holds (32), a reader that is behind leaves the CLOSED queued behind updates. Before, Stop
// then unwatched the id, which named the newer watch.
func TestStopOfAClosedWatchLeavesTheNewerWatch(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxPendingUpdates = 64
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{admin, alice, bob}, Bounds: &b})
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	old, err := c.Watch(ctx, wire.WatchRequest{WatchID: "same", Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 { // within the server's bound; more than Messages holds
		if _, err := c.Put(ctx, preference(ns, "k", "x")); err != nil {
			t.Fatal(err)
		}
	}
	// The server closes the watch (as OVERFLOW, ACK_TIMEOUT, UNAUTHORIZED, RESTORED would); the reader,
	// behind, learns it from its ack.
	if !env.Store.CloseWatch(alice, "same", wire.CloseRestored, "test") {
		t.Fatal("the watch was not live")
	}
	if err := old.Ack(ctx, 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack of the closed watch: %v, want NOT_FOUND", err)
	}
	fresh, err := c.Watch(ctx, wire.WatchRequest{WatchID: "same", Namespace: ns})
	if err != nil {
		t.Fatalf("watch again with the freed id: %v", err)
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatalf("Stop of the closed watch: %v", err)
	}
	if err := c.Ack(ctx, "same", 0); err != nil {
		t.Fatalf("the newer watch is gone after the closed one's Stop: %v", err)
	}
	if err := fresh.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if live := env.Store.LiveWatches(); len(live) != 0 {
		t.Fatalf("live watches after both Stops: %+v", live)
	}
}
