package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// A fleet that outgrows the watch snapshot bound is followed by its watch, but a resync (after a
// reconnect, an OVERFLOW, ...) is refused with WATCH_TOO_BROAD, and the view stops following: a
// worker that stops then never leaves it. The view must say so (Err), as WatchFleet's doc promises,
// instead of reporting dead workers alive without a word.
func TestFleetViewSaysWhenItCannotFollow(t *testing.T) {
	bounds := wire.DefaultBounds()
	bounds.MaxSnapshotEntries = 2
	env := testenv.Start(t, testenv.Options{Bounds: &bounds})
	c := newCoordinator(t, env, "coordinator")
	aliceNC := env.Connect(t, "alice")
	ctx := ctxT(t)
	for _, id := range []string{"w1", "w2"} {
		heartbeat(t, aliceNC, "alice", wire.Heartbeat{WorkerID: id, Service: "transcoder-a", IntervalMs: 60000,
			Status: wire.StatusReady, Leases: []string{}})
	}
	v, err := c.WatchFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	awaitView(t, v, "w1 and w2", func() bool { return v.Alive("alice", "w1") && v.Alive("alice", "w2") })
	if err := v.Err(); err != nil {
		t.Fatalf("Err of a view that follows: %v", err)
	}
	// A third worker: the watch delivers it (the snapshot bound does not apply to updates).
	heartbeat(t, aliceNC, "alice", wire.Heartbeat{WorkerID: "w3", Service: "transcoder-a", IntervalMs: 60000,
		Status: wire.StatusReady, Leases: []string{}})
	awaitView(t, v, "w3", func() bool { return v.Alive("alice", "w3") })

	// The watch ends; its successor's snapshot would hold three workers.
	if !env.Store.CloseWatch(policy.Principal{ID: "coordinator", Admin: true}, v.cache.WatchID(), wire.CloseOverflow, "test") {
		t.Fatal("the view's watch is not live")
	}
	deadline := time.Now().Add(testTimeout)
	for v.Err() == nil { // no event tells a refused re-watch: poll, bounded
		if time.Now().After(deadline) {
			t.Fatalf("the view did not report that it cannot watch again; workers %+v", v.Workers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := v.Err(); !errors.Is(err, wire.ErrWatchTooBroad) {
		t.Fatalf("Err = %v, want WATCH_TOO_BROAD", err)
	}
	// Once the fleet fits again, the view follows again and says so.
	heartbeat(t, aliceNC, "alice", wire.Heartbeat{WorkerID: "w3", Service: "transcoder-a", IntervalMs: 300,
		Status: wire.StatusStopping, Leases: []string{}}) // its entry now expires within a second
	awaitView(t, v, "w3 expiring after the view follows again", func() bool { return !v.Alive("alice", "w3") && v.Err() == nil })
	if !v.Following() {
		t.Fatal("the view follows again but Following says it does not")
	}
}

// While stated is down (NATS up), the view cannot follow, though nothing refused it (Err stays nil):
// Following says so, so that a caller does not take its last contents for the fleet's.
func TestFleetViewSaysWhenStatedIsGone(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	heartbeat(t, env.Connect(t, "alice"), "alice", wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", IntervalMs: 60000,
		Status: wire.StatusReady, Leases: []string{}})
	v, err := c.WatchFleet(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	awaitView(t, v, "w1", func() bool { return v.Alive("alice", "w1") })
	if !v.Following() {
		t.Fatal("Following is false for a view that follows")
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := env.Server.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for v.Following() { // the SHUTDOWN close ends the watch; no event tells a failed re-watch: poll, bounded
		if time.Now().After(deadline) {
			t.Fatal("the view still says it follows with stated stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
