package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

func TestTrackerFirstFetch(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)

	got, want := wireView(tr.Current()), e.sim.Capabilities()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Current() = %+v\nwant %+v", got, want)
	}
	if got.Generation != 1 || tr.Generation() != 1 {
		t.Errorf("generation %d / %d, want 1", got.Generation, tr.Generation())
	}
	fd, ok := got.Source("front-door")
	if !ok || len(fd.Streams) != 2 {
		t.Fatalf("front-door: %+v, %v", fd, ok)
	}
	v, ok := got.Variant("front-door", "video", sim.OriginalVariantID)
	if !ok || v.State != capabilities.StateReady || v.Publisher != "" || v.Codec != "h264" {
		t.Errorf("original video variant: %+v, %v", v, ok)
	}
	session, online, ok := tr.Resolve("front-door")
	if !ok || !online || session != e.session("front-door") {
		t.Errorf("Resolve(front-door) = %q, %v, %v; sim session %q", session, online, ok, e.session("front-door"))
	}
	if _, _, ok := tr.Resolve("garage"); ok {
		t.Error("Resolve(garage) found an unknown source")
	}

	// Current is a copy: changing it changes nothing in the tracker.
	got.Sources[0].Streams[0].Variants[0].State = capabilities.StateFailed
	if v, _ := tr.Current().Variant("front-door", "video", sim.OriginalVariantID); v.State != capabilities.StateReady {
		t.Error("modifying Current's result changed the tracker")
	}
}

func TestTrackerStartWaitsForMediaServer(t *testing.T) {
	url := startNATS(t)
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{RefetchBackoff: 5 * time.Millisecond})
	t.Cleanup(tr.Stop)
	started := make(chan error, 1)
	go func() { started <- tr.Start(ctxT(t)) }()

	s := sim.New(connect(t, url), sim.Options{Sources: sim.Sources("front-door")})
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Start did not return after the media server came up")
	}
	if _, _, ok := tr.Resolve("front-door"); !ok {
		t.Error("front-door not resolved")
	}
}

func TestTrackerStartHonoursContext(t *testing.T) {
	url := startNATS(t)
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{RefetchBackoff: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tr.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start without a media server = %v, want DeadlineExceeded", err)
	}
	// Start stopped the tracker: waits and a second Start say so.
	if err := tr.WaitGeneration(ctxT(t), 1); !errors.Is(err, capabilities.ErrTrackerStopped) {
		t.Errorf("WaitGeneration after failed Start = %v", err)
	}
	if err := tr.Start(ctxT(t)); !errors.Is(err, capabilities.ErrTrackerStopped) {
		t.Errorf("second Start after the failed one stopped the tracker = %v, want ErrTrackerStopped", err)
	}
	tr.Stop() // idempotent
}

func TestTrackerFollowsGenerations(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	notes, cancel := tr.Subscribe()
	defer cancel()

	for i, step := range []struct {
		source string
		online bool
	}{{"back-yard", false}, {"back-yard", true}, {"front-door", false}} {
		if err := e.sim.SetOnline(step.source, step.online); err != nil {
			t.Fatal(err)
		}
		want := uint64(2 + i)
		select {
		case <-notes:
		case <-time.After(testTimeout):
			t.Fatalf("step %d: no notification", i)
		}
		if err := tr.WaitGeneration(ctxT(t), want); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, online, _ := tr.Resolve(step.source); online != step.online {
			t.Errorf("step %d: %s online %v, want %v", i, step.source, online, step.online)
		}
		if !reflect.DeepEqual(wireView(tr.Current()), e.sim.Capabilities()) {
			t.Errorf("step %d: tracker and simulator differ", i)
		}
	}
}

func TestTrackerRefetchesAfterAGap(t *testing.T) {
	e := newEnv(t, sim.Options{})
	log := newFetchLog()
	tr, _ := e.tracker(capabilities.TrackerOptions{}, log.hook)
	log.drain()

	// Generation 2 is never announced (lost); generation 3 is.
	e.sim.SuppressChanged(true)
	if err := e.sim.SetOnline("back-yard", false); err != nil {
		t.Fatal(err)
	}
	e.sim.SuppressChanged(false)
	if err := e.sim.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 3); err != nil {
		t.Fatal(err)
	}
	c := tr.Current()
	if c.Generation != 3 {
		t.Fatalf("generation %d, want 3", c.Generation)
	}
	// The missed change is in the fetched snapshot.
	if s, _ := c.Source("back-yard"); s.Online {
		t.Error("back-yard still online: the change of the missed generation is missing")
	}
	if f := log.next(t); f.gen != 3 || f.err != nil {
		t.Errorf("fetch after the gap: %+v, want generation 3", f)
	}
}

func TestTrackerRefetchesWhileBehindTheAnnouncement(t *testing.T) {
	e := newEnv(t, sim.Options{})
	log := newFetchLog()
	tr, _ := e.tracker(capabilities.TrackerOptions{RefetchBackoff: 5 * time.Millisecond}, log.hook)
	log.drain()

	// Announce generation 2 while the media server still answers 1 (a lagging replica, say).
	e.sim.SuppressChanged(true)
	pub := connect(t, e.url)
	if err := pub.Publish(capabilities.ChangedSubject(capabilities.DefaultPrefix), []byte(`{"generation":2}`)); err != nil {
		t.Fatal(err)
	}
	// The tracker fetches generation 1 and, still behind, fetches it again.
	for i := range 2 {
		if f := log.next(t); f.gen != 1 || f.err != nil {
			t.Fatalf("fetch %d: %+v, want generation 1", i, f)
		}
	}
	if tr.Generation() != 1 {
		t.Fatalf("generation %d, want 1", tr.Generation())
	}
	// Generation 2 appears, unannounced: a retry picks it up.
	if err := e.sim.SetOnline("back-yard", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 2); err != nil {
		t.Fatal(err)
	}
	if _, online, _ := tr.Resolve("back-yard"); online {
		t.Error("back-yard online after generation 2")
	}
}

func TestTrackerIgnoresStaleAnnouncements(t *testing.T) {
	e := newEnv(t, sim.Options{})
	log := newFetchLog()
	tr, _ := e.tracker(capabilities.TrackerOptions{}, log.hook)
	if err := e.sim.SetOnline("back-yard", false); err != nil { // generation 2
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 2); err != nil {
		t.Fatal(err)
	}
	for log.next(t).gen != 2 { // the hook runs just after the install
	}

	pub := connect(t, e.url)
	for _, g := range []uint64{1, 2} { // old and current: nothing to fetch
		data, _ := json.Marshal(capabilities.Changed{Generation: g})
		if err := pub.Publish(capabilities.ChangedSubject(capabilities.DefaultPrefix), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetOnline("back-yard", true); err != nil { // generation 3
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 3); err != nil {
		t.Fatal(err)
	}
	if f := log.next(t); f.gen != 3 {
		t.Errorf("first fetch after stale announcements returned generation %d, want 3 (a stale announcement was fetched)", f.gen)
	}
}

func TestTrackerRefetchesOnReconnect(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, nc := e.tracker(capabilities.TrackerOptions{}, nil)

	e.sim.SuppressChanged(true) // nobody is told: only the reconnect makes the tracker fetch
	if err := e.sim.SetOnline("back-yard", false); err != nil {
		t.Fatal(err)
	}
	if tr.Generation() != 1 {
		t.Fatalf("tracker moved to %d without an announcement", tr.Generation())
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 2); err != nil {
		t.Fatalf("no refetch after reconnect: %v", err)
	}
}

func TestTrackerResolveAcrossSourceReconnect(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	before, online, ok := tr.Resolve("front-door")
	if !ok || !online || before == "" {
		t.Fatalf("Resolve before: %q %v %v", before, online, ok)
	}

	if err := e.sim.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		s, _ := c.Source("front-door")
		return !s.Online
	}); err != nil {
		t.Fatal(err)
	}
	if s, online, ok := tr.Resolve("front-door"); !ok || online || s != before {
		t.Errorf("Resolve while offline: %q %v %v (stale session %q expected, offline)", s, online, ok, before)
	}

	if err := e.sim.SetOnline("front-door", true); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		s, _ := c.Source("front-door")
		return s.Online
	}); err != nil {
		t.Fatal(err)
	}
	after, online, ok := tr.Resolve("front-door")
	if !ok || !online || after == before || after != e.session("front-door") {
		t.Errorf("Resolve after reconnect: %q %v %v; before %q, sim %q", after, online, ok, before, e.session("front-door"))
	}
}

func TestWaitReady(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	r := e.publish(e.commands("alice"), "browser-h264-720p")

	v, err := tr.WaitReady(ctxT(t), "front-door", "video", r.VariantID)
	if err != nil {
		t.Fatal(err)
	}
	want := capabilities.Variant{VariantID: "browser-h264-720p", Codec: "h264", Width: 1280, Height: 720,
		State: capabilities.StateReady, Publisher: "alice", ReadySince: tr.Generation()} // READY at the last change
	if v != want {
		t.Errorf("WaitReady = %+v, want %+v", v, want)
	}
}

func TestWaitVariantSeesPendingThenReady(t *testing.T) {
	e := newEnv(t, sim.Options{ReadyDelay: time.Hour})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	e.publish(e.commands("alice"), "browser-h264-720p")

	v, err := tr.WaitVariant(ctxT(t), "front-door", "video", "browser-h264-720p", capabilities.StatePending)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != capabilities.StatePending || v.Publisher != "alice" {
		t.Errorf("variant %+v, want PENDING published by alice", v)
	}
}

func TestWaitReadyFailed(t *testing.T) {
	ref := sim.VariantRef{SourceID: "front-door", StreamID: "video", VariantID: "browser-h264-720p"}
	e := newEnv(t, sim.Options{Failing: []sim.VariantRef{ref}})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	e.publish(e.commands("alice"), ref.VariantID)

	_, err := tr.WaitReady(ctxT(t), ref.SourceID, ref.StreamID, ref.VariantID)
	if !errors.Is(err, capabilities.ErrVariantFailed) {
		t.Fatalf("WaitReady = %v, want ErrVariantFailed", err)
	}
	var vf *capabilities.VariantFailedError
	if !errors.As(err, &vf) || vf.Variant.State != capabilities.StateFailed || vf.Variant.Publisher != "alice" {
		t.Errorf("error %#v", err)
	}
	// Waiting for FAILED itself succeeds.
	if v, err := tr.WaitVariant(ctxT(t), ref.SourceID, ref.StreamID, ref.VariantID, capabilities.StateFailed); err != nil || v.State != capabilities.StateFailed {
		t.Errorf("WaitVariant(FAILED) = %+v, %v", v, err)
	}
}

func TestWaitReadyHonoursContextAndStop(t *testing.T) {
	e := newEnv(t, sim.Options{ReadyDelay: time.Hour})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	e.publish(e.commands("alice"), "browser-h264-720p")
	if _, err := tr.WaitVariant(ctxT(t), "front-door", "video", "browser-h264-720p", capabilities.StatePending); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := tr.WaitReady(ctx, "front-door", "video", "browser-h264-720p"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady with an expiring context = %v", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := tr.WaitReady(cctx, "front-door", "video", "browser-h264-720p"); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitReady with a cancelled context = %v", err)
	}

	res := make(chan error, 1)
	go func() {
		_, err := tr.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p")
		res <- err
	}()
	tr.Stop()
	select {
	case err := <-res:
		if !errors.Is(err, capabilities.ErrTrackerStopped) {
			t.Errorf("WaitReady across Stop = %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("WaitReady did not return after Stop")
	}
}

func TestTrackerNotificationsCoalesceAndNeverBlock(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	notes, cancel := tr.Subscribe()
	defer cancel()
	idle, cancelIdle := tr.Subscribe() // never read
	defer cancelIdle()

	for i := range 10 {
		if err := e.sim.SetOnline("back-yard", i%2 == 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.WaitGeneration(ctxT(t), 11); err != nil {
		t.Fatalf("a subscriber that never reads blocked the tracker: %v", err)
	}
	if len(idle) != 1 || len(notes) != 1 {
		t.Errorf("pending notifications: idle %d, notes %d; want 1 each (coalesced)", len(idle), len(notes))
	}
	<-notes
	cancel()
	if err := e.sim.SetOnline("back-yard", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 12); err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 {
		t.Error("a cancelled subscription was notified")
	}
}

// Announcements are delivered at most once: when the last one is lost, the tracker stays behind until
// Refresh fetches what the media server has now.
func TestTrackerRefreshCatchesUpAfterALostAnnouncement(t *testing.T) {
	e := newEnv(t, sim.Options{})
	log := newFetchLog()
	tr, _ := e.tracker(capabilities.TrackerOptions{}, log.hook)
	log.drain()
	before, _, _ := tr.Resolve("front-door")
	e.sim.SuppressChanged(true) // the new session's announcements are lost
	if err := e.sim.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetOnline("front-door", true); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := tr.Resolve("front-door"); s != before {
		t.Fatalf("session %q changed without an announcement or a fetch", s)
	}
	tr.Refresh()
	if f := log.next(t); f.err != nil || f.gen != e.sim.Generation() {
		t.Fatalf("fetch after Refresh: %+v, want generation %d", f, e.sim.Generation())
	}
	if s, online, _ := tr.Resolve("front-door"); !online || s != e.session("front-door") || s == before {
		t.Fatalf("after Refresh: session %q online %v; want the new session %q", s, online, e.session("front-door"))
	}
}
