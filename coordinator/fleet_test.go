package coordinator

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// heartbeat publishes one heartbeat of workerID as the principal of nc.
func heartbeat(t testing.TB, nc *nats.Conn, principal string, hb wire.Heartbeat) {
	t.Helper()
	body, err := json.Marshal(&hb)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, principal, hb.WorkerID), body); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// awaitView waits, on the view's change notifications, until cond holds; bounded by testTimeout.
func awaitView(t testing.TB, v *FleetView, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case _, ok := <-v.Changes():
			if !ok {
				t.Fatalf("waiting for %s: Changes closed", what)
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; workers %+v", what, v.Workers())
		}
	}
}

func TestFleet(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	aliceNC := env.Connect(t, "alice")
	bobNC := env.Connect(t, "bob")
	ctx := ctxT(t)

	v, err := c.WatchFleet(ctx)
	if err != nil {
		t.Fatalf("WatchFleet: %v", err)
	}
	defer func() {
		if err := v.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if w := v.Workers(); len(w) != 0 {
		t.Fatalf("fleet before any heartbeat: %+v", w)
	}
	if fleet, err := c.Fleet(ctx); err != nil || len(fleet) != 0 {
		t.Fatalf("Fleet before any heartbeat: %+v, %v", fleet, err)
	}

	// Long intervals: neither worker can expire while the test looks at it.
	w1 := wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", Sequence: 1, SentAtMs: time.Now().UnixMilli(),
		IntervalMs: 60000, Status: wire.StatusStarting, Leases: []string{"leases/front-door-video"}}
	w2 := wire.Heartbeat{WorkerID: "w2", Service: "cv-worker", Sequence: 1, SentAtMs: time.Now().UnixMilli(),
		IntervalMs: 60000, Status: wire.StatusReady, Leases: []string{"leases/back-yard-people"}}
	heartbeat(t, aliceNC, "alice", w1)
	heartbeat(t, bobNC, "bob", w2)
	awaitView(t, v, "both workers", func() bool { return v.Alive("alice", "w1") && v.Alive("bob", "w2") })

	check := func(what string, ws []Worker) {
		t.Helper()
		if len(ws) != 2 {
			t.Fatalf("%s: %+v, want 2 workers", what, ws)
		}
		a, b := ws[0], ws[1]
		if a.Principal != "alice" || a.WorkerID != "w1" || a.Service != "transcoder-a" || a.Status != wire.StatusStarting ||
			a.IntervalMs != 60000 || !slices.Equal(a.Leases, w1.Leases) || a.FirstSeenMs == 0 || a.ExpiresAtMs == 0 || a.Revision == 0 {
			t.Fatalf("%s: first worker %+v", what, a)
		}
		if b.Principal != "bob" || b.WorkerID != "w2" || b.Service != "cv-worker" || b.Status != wire.StatusReady ||
			!slices.Equal(b.Leases, w2.Leases) {
			t.Fatalf("%s: second worker %+v", what, b)
		}
	}
	check("FleetView.Workers", v.Workers())
	fleet, err := c.Fleet(ctx)
	if err != nil {
		t.Fatalf("Fleet: %v", err)
	}
	check("Fleet", fleet)
	c.pageLimit = 1 // one worker per page: Fleet must follow next_after_key
	fleet, err = c.Fleet(ctx)
	c.pageLimit = wire.MaxListLimit
	if err != nil {
		t.Fatalf("Fleet, paged: %v", err)
	}
	check("Fleet, paged", fleet)

	if h, ok := v.Holder("leases/front-door-video"); !ok || h.Principal != "alice" || h.WorkerID != "w1" {
		t.Fatalf("Holder(front-door-video) = %+v, %v", h, ok)
	}
	if h, ok := v.Holder("leases/nobody"); ok {
		t.Fatalf("Holder of an unclaimed lease: %+v", h)
	}
	if v.Alive("alice", "w2") || v.Alive("carol", "w1") {
		t.Fatalf("Alive of unknown workers")
	}

	// A worker that takes another lease: the view follows.
	w1.Sequence, w1.Status = 2, wire.StatusReady
	w1.Leases = append(w1.Leases, "leases/side-gate-audio")
	heartbeat(t, aliceNC, "alice", w1)
	awaitView(t, v, "w1's new lease", func() bool {
		h, ok := v.Holder("leases/side-gate-audio")
		return ok && h.WorkerID == "w1" && h.Status == wire.StatusReady
	})

	// The lease moves to w2 (its heartbeat says so) before w1's heartbeat drops it: the later
	// claim wins.
	w2.Sequence = 2
	w2.Leases = append(w2.Leases, "leases/front-door-video")
	heartbeat(t, bobNC, "bob", w2)
	awaitView(t, v, "w2 claiming front-door-video", func() bool {
		w, ok := v.Worker("bob", "w2")
		return ok && len(w.Leases) == 2
	})
	if h, ok := v.Holder("leases/front-door-video"); !ok || h.WorkerID != "w2" {
		t.Fatalf("Holder after the move = %+v, %v; want w2", h, ok)
	}

	// w2 switches to a 300 ms interval (its entry's TTL becomes 1 s) and then stops heartbeating: it
	// expires and leaves the view, and Changes says so.
	w2.Sequence, w2.IntervalMs = 3, 300
	heartbeat(t, bobNC, "bob", w2)
	awaitView(t, v, "w2's new interval", func() bool {
		w, ok := v.Worker("bob", "w2")
		return !ok || w.IntervalMs == 300
	})
	awaitView(t, v, "w2 expiring", func() bool { return !v.Alive("bob", "w2") })
	if !v.Alive("alice", "w1") {
		t.Fatalf("w1 left with w2")
	}
	if h, ok := v.Holder("leases/back-yard-people"); ok {
		t.Fatalf("a stopped worker still holds a lease: %+v", h)
	}
	if h, ok := v.Holder("leases/front-door-video"); !ok || h.WorkerID != "w1" {
		t.Fatalf("Holder after w2 stopped = %+v, %v; want w1 (its heartbeat still lists it)", h, ok)
	}
	fleet, err = c.Fleet(ctx)
	if err != nil || len(fleet) != 1 || fleet[0].WorkerID != "w1" {
		t.Fatalf("Fleet after w2 stopped: %+v, %v", fleet, err)
	}
}

func TestFleetViewClose(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	aliceNC := env.Connect(t, "alice")
	ctx := ctxT(t)
	heartbeat(t, aliceNC, "alice", wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", IntervalMs: 60000,
		Status: wire.StatusReady, Leases: []string{}})

	// The snapshot holds the worker as soon as the server has it; a second view, started after the
	// first saw it, must hold it at once.
	v, err := c.WatchFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	awaitView(t, v, "w1", func() bool { return v.Alive("alice", "w1") })
	v2, err := c.WatchFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !v2.Alive("alice", "w1") || len(v2.Workers()) != 1 {
		t.Fatalf("the second view's snapshot: %+v", v2.Workers())
	}
	if err := v2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-v.Changes():
			if !ok {
				if !v.Alive("alice", "w1") {
					t.Fatalf("a closed view lost its contents")
				}
				return
			}
		case <-timer.C:
			t.Fatalf("Changes not closed by Close")
		}
	}
}
