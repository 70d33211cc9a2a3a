package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// splitEnv is a state server on the near node of a two-node cluster with a route that parts.
type splitEnv struct{ *splittest.Env }

// startSplit starts the cluster and the state server (admin, alice, bob) on its near node; bounds,
// when set, replace the default bounds.
func startSplit(t *testing.T, bounds *wire.Bounds) *splitEnv {
	return &splitEnv{splittest.Start(t, splittest.Options{Principals: []policy.Principal{admin, alice, bob}, Bounds: bounds})}
}

// The tests of this file run the state server on node 1 of a two-node NATS cluster whose route a
// test can cut (or freeze) and mend, and clients on either node: a client on node 0 (the far side)
// keeps a healthy connection to its own node through a partition, and reaches nothing of the state
// server: its requests fail at once with no responders (a cut route: node 0 knows of no subscriber)
// or time out (a frozen one), and watch updates stop arriving, with no status change to tell it.

// client connects principal to node only (Connect, no other node learnt of) and returns its client.
func (e *splitEnv) client(t *testing.T, principal string, node int, opts ...Option) *Client {
	t.Helper()
	c, err := New(e.Connect(t, node, principal, Connect), principal, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stayedConnected fails the test unless c's connection is connected and never changed status since
// statuses was made.
func stayedConnected(t *testing.T, c *Client, statuses chan nats.Status) {
	t.Helper()
	select {
	case s := <-statuses:
		t.Fatalf("the far client's connection went %v: the partition is not one", s)
	default:
	}
	if s := c.Conn().Status(); s != nats.CONNECTED {
		t.Fatalf("the far client's connection is %v", s)
	}
}

// Plain requests from the far side of a cut route fail at once, within their context, with
// UNAVAILABLE (nothing was sent to any state server), and work again on the same connection once the
// route is mended.
func TestRequestsAcrossACutRoute(t *testing.T) {
	e := startSplit(t, nil)
	far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(2*time.Second))
	near := e.client(t, admin.ID, splittest.Near)
	const ns = "service/tx"
	if _, err := far.Put(ctxT(t), lease(ns, "a", "w", 1)); err != nil {
		t.Fatal(err)
	}
	statuses := far.Conn().StatusChanged()
	defer far.Conn().RemoveStatusListener(statuses)
	e.Cut(t)
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := far.Get(ctx, ns, "a")
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("get across a cut route: %v, want UNAVAILABLE", err)
	}
	_, err = far.Put(ctx, lease(ns, "b", "w", 1))
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("put across a cut route: %v, want UNAVAILABLE", err)
	}
	calls := 0
	_, err = far.Update(ctx, ns, "a", func(cur *wire.Entry) (*wire.PutRequest, error) {
		calls++
		p := lease(ns, "a", "u", 2)
		return &p, nil
	})
	if !errors.Is(err, wire.ErrUnavailable) || calls != 0 {
		t.Fatalf("update across a cut route: %v after %d merges, want UNAVAILABLE before any", err, calls)
	}
	if d := time.Since(start); d > far.RequestTimeout() {
		t.Fatalf("requests that no state server could answer took %v", d)
	}
	if _, err := near.Get(ctxT(t), ns, "b"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("a put answered UNAVAILABLE: the store has %v", err)
	}
	e.Mend(t)
	if _, err := far.Get(ctxT(t), ns, "a"); err != nil {
		t.Fatalf("get once the route is mended: %v", err)
	}
	stayedConnected(t, far, statuses)
}

// An Update whose put is sent across a route that freezes right after its read: the put's reply
// never comes, and Update returns the unknown outcome (no *wire.Error) within its context, having
// merged once: it does not read and write again blindly. The same client works once the route is
// back.
func TestUpdateAcrossAFrozenRoute(t *testing.T) {
	e := startSplit(t, nil)
	far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(time.Second))
	const ns = "service/tx"
	if _, err := far.Put(ctxT(t), lease(ns, "a", "w", 1)); err != nil {
		t.Fatal(err)
	}
	statuses := far.Conn().StatusChanged()
	defer far.Conn().RemoveStatusListener(statuses)
	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	calls := 0
	start := time.Now()
	_, err := far.Update(ctx, ns, "a", func(cur *wire.Entry) (*wire.PutRequest, error) {
		calls++
		e.Cluster.RouteLink().Freeze()
		p := lease(ns, "a", "u", 2)
		return &p, nil
	})
	if err == nil || wire.CodeOf(err) != "" || calls != 1 {
		t.Fatalf("update whose put got no reply: %v (code %q) after %d merges, want an unknown outcome after 1", err, wire.CodeOf(err), calls)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("update took %v, its context 3 s", d)
	}
	t.Logf("update across a frozen route: %v", err)
	stayedConnected(t, far, statuses)
	e.Mend(t)
	if _, err := far.Get(ctxT(t), ns, "a"); err != nil {
		t.Fatalf("get once the route is back: %v", err)
	}
}

// A Cache on the far side of a route partition, while a writer on the state server's side writes on:
// it notices by its liveness check that it follows nothing (Following turns false, though its
// connection never changed status), its waits end within their context, and once the route is back
// it snapshots again (OnResync) and holds exactly the store's entries, every change applied once.
func TestCacheAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			e := startSplit(t, nil)
			far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(time.Second))
			near := e.client(t, admin.ID, splittest.Near)
			const ns = "service/tx"
			for i := range 5 {
				if _, err := near.Put(ctxT(t), lease(ns, fmt.Sprintf("k/%d", i), "w", 1)); err != nil {
					t.Fatal(err)
				}
			}
			r := newRecorder()
			k := newCache(t, far, CacheOptions{Namespace: ns, KeyPrefix: "k/", Handlers: r.handlers(),
				CheckInterval: 100 * time.Millisecond})
			r.awaitResync(t)
			before := k.Revision()
			statuses := far.Conn().StatusChanged()
			defer far.Conn().RemoveStatusListener(statuses)

			p.Apart(e.Env, t)
			var last wire.Entry
			for i := range 5 {
				var err error
				if last, err = near.Put(ctxT(t), lease(ns, fmt.Sprintf("k/%d", i), "w", int64(i+2))); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := near.Delete(ctxT(t), wire.DeleteRequest{Namespace: ns, Key: "k/0"}); err != nil {
				t.Fatal(err)
			}
			natstest.Poll(t, testTimeout, "the far cache notices it follows nothing", func() (bool, string) {
				return !k.Following(), "following"
			})
			// Waits end within their context: one for a write the cache cannot see, one for a
			// revision it has (whose epoch the store cannot confirm now).
			for _, rev := range []uint64{last.Revision, before} {
				wctx, cancel := context.WithTimeout(ctxT(t), 500*time.Millisecond)
				start := time.Now()
				err := k.WaitForRevision(wctx, rev)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("WaitForRevision(%d) across the partition: %v, want its context's deadline", rev, err)
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Fatalf("WaitForRevision(%d) with a context of 500 ms took %v", rev, d)
				}
				t.Logf("WaitForRevision(%d) across the partition: %v", rev, err)
			}
			resyncs := k.Resyncs()
			e.Mend(t)
			if err := k.WaitForRevision(ctxT(t), last.Revision); err != nil {
				t.Fatalf("the cache never caught up once the route was back: %v (at %d)", err, k.Revision())
			}
			if k.Resyncs() <= resyncs {
				t.Fatalf("the cache caught up without a new snapshot")
			}
			if !k.Following() {
				t.Fatal("the cache does not follow once caught up")
			}
			assertMatchesServer(t, k, near, ns, "k/", r)
			stayedConnected(t, far, statuses)
		})
	}
}

// A Cache on the far side whose watch the state server closes while the route is parted (an update
// it sent went unacknowledged past ack_deadline_ms; the CLOSED message is lost with it): once the
// route is back, with no further update to show a gap, the cache finds the watch gone and snapshots
// again, ending with exactly the store's entries.
func TestCacheWatchDroppedWhileRouteParted(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			b := wire.DefaultBounds()
			b.AckDeadlineMs = 300
			e := startSplit(t, &b)
			far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(time.Second))
			near := e.client(t, admin.ID, splittest.Near)
			const ns = "service/tx"
			if _, err := near.Put(ctxT(t), lease(ns, "k/a", "w", 1)); err != nil {
				t.Fatal(err)
			}
			r := newRecorder()
			k := newCache(t, far, CacheOptions{Namespace: ns, KeyPrefix: "k/", WatchID: "dropped", Handlers: r.handlers(),
				CheckInterval: time.Second})
			r.awaitResync(t)
			statuses := far.Conn().StatusChanged()
			defer far.Conn().RemoveStatusListener(statuses)

			p.Apart(e.Env, t)
			put, err := near.Put(ctxT(t), lease(ns, "k/b", "w", 2))
			if err != nil {
				t.Fatal(err)
			}
			natstest.Poll(t, testTimeout, "the state server to close the unacknowledged watch", func() (bool, string) {
				for _, w := range e.Store.LiveWatches() {
					if w.WatchID == "dropped" {
						return false, "watch live"
					}
				}
				return true, ""
			})
			e.Mend(t)
			if err := k.WaitForRevision(ctxT(t), put.Revision); err != nil {
				t.Fatalf("the cache never learned of the write lost with its watch: %v (at %d)", err, k.Revision())
			}
			if k.Resyncs() == 0 {
				t.Fatal("the cache caught up without a new snapshot")
			}
			assertMatchesServer(t, k, near, ns, "k/", r)
			stayedConnected(t, far, statuses)
		})
	}
}

// A Cache that checks its watch every CheckInterval, cut off from the state server by a route
// partition that lasts: once the route is back it follows again within about a CheckInterval, as it
// does at once after its own connection reconnects. Before, its re-watch attempts backed off up to
// MaxResyncBackoff (5 s) whatever the interval, and nothing woke it when the route came back (its
// connection never changed status): a lease standby (Campaign checks every RenewEvery) saw a lease
// released during the partition up to 5 s after the route was back, longer than a TTL.
func TestCacheFollowsSoonAfterALongRoutePartition(t *testing.T) {
	e := startSplit(t, nil)
	const check = 200 * time.Millisecond
	far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(time.Second))
	near := e.client(t, admin.ID, splittest.Near)
	const ns = "service/tx"
	log := splittest.NewRetryLog()
	r := newRecorder()
	k := newCache(t, far, CacheOptions{Namespace: ns, KeyPrefix: "k/", Handlers: r.handlers(), CheckInterval: check,
		Logger: slog.New(log)})
	r.awaitResync(t)
	e.Cut(t)
	put, err := near.Put(ctxT(t), lease(ns, "k/a", "w", 1))
	if err != nil {
		t.Fatal(err)
	}
	// Seven failed attempts: a backoff doubling from 100 ms up to MaxResyncBackoff, as it did
	// whatever the CheckInterval, would have the last one wait all of MaxResyncBackoff.
	for i := range 7 {
		select {
		case <-log.Retries:
		case <-time.After(testTimeout):
			t.Fatalf("re-watch attempt %d never failed", i+1)
		}
	}
	e.Mend(t)
	mended := time.Now()
	if err := k.WaitForRevision(ctxT(t), put.Revision); err != nil {
		t.Fatal(err)
	}
	// A bound with room for a loaded machine (a try sent as the route mends may wait out a request
	// timeout), and below what MaxResyncBackoff less the mend takes.
	if d := time.Since(mended); d > 3*time.Second {
		t.Fatalf("the cache followed again %v after the route was back (CheckInterval %v)", d, check)
	}
	assertMatchesServer(t, k, near, ns, "k/", r)
}

// A Cache whose liveness check finds its watch silent across a frozen route gives the watch up, and
// says so at once: Following is false from the moment it decides to resync, not only once its unwatch
// (which the frozen route leaves unanswered for a whole request timeout) has ended. A reader that
// checks Following would otherwise take the last entries for current that long.
func TestCacheStopsFollowingAsItGivesUpItsWatch(t *testing.T) {
	e := startSplit(t, nil)
	far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(3*time.Second))
	log := splittest.NewRetryLog()
	r := newRecorder()
	k := newCache(t, far, CacheOptions{Namespace: "service/tx", KeyPrefix: "k/", Handlers: r.handlers(),
		CheckInterval: 100 * time.Millisecond, Logger: slog.New(log)})
	r.awaitResync(t)
	defer e.Mend(t) // before the cleanups close the cache
	e.Freeze(t)
	select {
	case <-log.Resyncs:
	case <-time.After(testTimeout):
		t.Fatal("the cache never noticed the frozen route")
	}
	if k.Following() {
		t.Fatal("the cache gave up its watch and still says it follows")
	}
}

// NewCache's context bounds its wait for the first snapshot, even when the state server answers
// nothing (a frozen route): the info request that starts the first attempt ends with the context, and
// closing the cache then sends no unwatch, as no watch was ever requested; before, that unwatch held
// NewCache a whole request timeout past its context.
func TestNewCacheEndsWithItsContextAcrossAFrozenRoute(t *testing.T) {
	e := startSplit(t, nil)
	const timeout = 20 * time.Second
	far := e.client(t, admin.ID, splittest.Far, WithRequestTimeout(timeout))
	defer e.Mend(t)
	e.Freeze(t)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	k, err := far.NewCache(ctx, CacheOptions{Namespace: "service/tx"})
	took := time.Since(start)
	if k != nil {
		_ = k.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NewCache: %v, want its context's deadline", err)
	}
	if took > timeout/2 {
		t.Fatalf("NewCache with a context of 300 ms returned after %v (request timeout %v)", took, timeout)
	}
}
