package capabilities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// A fetch the media server never answers (its reply lost, the server stopping with the request in
// hand) is stale as soon as a newer generation is announced, or Refresh asks for a newer snapshot:
// the tracker fetches again at once instead of waiting out the unanswered fetch's FetchTimeout.
func TestTrackerDoesNotWaitBehindAnUnansweredFetch(t *testing.T) {
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	get := capabilities.GetSubject(capabilities.DefaultPrefix)
	for _, tc := range []struct {
		name string
		ask  func(*capabilities.Tracker, *cannedServer) // makes the tracker fetch again
	}{
		{"Announcement", func(_ *capabilities.Tracker, srv *cannedServer) { srv.announce(t, 3) }},
		{"Refresh", func(tr *capabilities.Tracker, _ *cannedServer) { tr.Refresh() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startNATS(t)
			srv := newCannedServer(t, url)
			srv.answer(t, get, capsJSON(t, oneSource(1, "sess-1", true, v)), noReply, capsJSON(t, oneSource(3, "sess-3", true, v)))
			tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{FetchTimeout: time.Hour})
			t.Cleanup(tr.Stop)
			if err := tr.Start(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			srv.announce(t, 2) // its fetch is never answered
			srv.await(t, get, 2)
			tc.ask(tr, srv)
			if err := tr.WaitGeneration(ctxT(t), 3); err != nil {
				t.Fatalf("generation 3 not fetched while an earlier fetch hangs (FetchTimeout 1h): %v", err)
			}
			if sess, _, _ := tr.Resolve("front-door"); sess != "sess-3" {
				t.Errorf("session %q, want sess-3", sess)
			}
		})
	}
}

// awaitNote waits for a notification of a Subscribe channel.
func awaitNote(t *testing.T, notes <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-notes:
	case <-time.After(testTimeout):
		t.Fatalf("no notification: %s", what)
	}
}

// A media server that stops (no responder on caps.v1.get any more) takes its sources with it: the
// tracker notices without an announcement, at its next periodic fetch, and shows them offline; a wait
// for READY waits. A media server that comes back makes the capabilities current again.
func TestTrackerNoticesAMediaServerGone(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{ResyncInterval: 20 * time.Millisecond}, nil)
	notes, cancel := tr.Subscribe()
	defer cancel()
	gen := e.sim.Generation()
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", sim.OriginalVariantID); err != nil || tr.Stale() {
		t.Fatalf("before the media server stops: WaitReady %v, stale %v", err, tr.Stale())
	}
	e.sim.Stop()
	awaitNote(t, notes, "the media server stopped")
	if !tr.Stale() {
		t.Fatal("the notification after the media server stopped is not that the capabilities are stale")
	}
	if _, online, ok := tr.Resolve("front-door"); !ok || online {
		t.Errorf("Resolve(front-door) with the media server gone: online %v, known %v; want offline", online, ok)
	}
	c := tr.Current()
	if c.Generation != gen || len(c.Sources) != 2 {
		t.Errorf("stale view: generation %d with %d sources; want the last snapshot's %d with 2", c.Generation, len(c.Sources), gen)
	}
	for _, s := range c.Sources {
		if s.Online {
			t.Errorf("stale view shows %s online", s.SourceID)
		}
	}
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if v, err := tr.WaitReady(cancelled, "front-door", "video", sim.OriginalVariantID); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitReady on stale capabilities = %+v, %v; want it to wait", v, err)
	}
	if err := tr.WaitGeneration(cancelled, gen); err != nil {
		t.Errorf("WaitGeneration(%d) of a stale snapshot of that generation = %v", gen, err)
	}

	back := sim.New(connect(t, e.url), sim.Options{Sources: sim.Sources("front-door", "back-yard"), After: gen})
	if err := back.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Stop)
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", sim.OriginalVariantID); err != nil {
		t.Fatalf("WaitReady once the media server is back: %v", err)
	}
	if sess, online, _ := tr.Resolve("front-door"); tr.Stale() || !online || sess != back.Capabilities().Sources[0].SessionID {
		t.Errorf("after the media server came back: stale %v, front-door session %s online %v", tr.Stale(), sess, online)
	}
}

// A media server that is still subscribed but answers nothing (hung, or unreachable) is found out by
// the StaleAfter bound; its first answer, at the same generation, makes the snapshot current again.
func TestTrackerMarksAHungMediaServerStale(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	get := capabilities.GetSubject(capabilities.DefaultPrefix)
	snapshot := capsJSON(t, oneSource(1, "sess-1", true, v))
	srv.answer(t, get, snapshot, noReply)
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{
		ResyncInterval: 20 * time.Millisecond, FetchTimeout: 50 * time.Millisecond, StaleAfter: 200 * time.Millisecond})
	t.Cleanup(tr.Stop)
	notes, cancel := tr.Subscribe()
	defer cancel()
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	awaitNote(t, notes, "first snapshot")
	awaitNote(t, notes, "the media server stopped answering")
	if _, online, _ := tr.Resolve("front-door"); !tr.Stale() || online {
		t.Fatalf("media server hung: stale %v, front-door online %v; want stale and offline", tr.Stale(), online)
	}
	srv.answer(t, get, snapshot)
	awaitNote(t, notes, "the media server answers again")
	if _, online, _ := tr.Resolve("front-door"); tr.Stale() || !online || tr.Generation() != 1 {
		t.Fatalf("media server answering again: stale %v, front-door online %v, generation %d", tr.Stale(), online, tr.Generation())
	}
}

// Announcements are delivered at most once: a periodic fetch catches up with one that was lost.
func TestTrackerResyncCatchesALostAnnouncement(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{ResyncInterval: 20 * time.Millisecond}, nil)
	e.sim.SuppressChanged(true)
	if err := e.sim.SetOnline("back-yard", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), 2); err != nil {
		t.Fatalf("a lost announcement left the tracker behind for good: %v", err)
	}
}

func TestTrackerLivenessOptions(t *testing.T) {
	nc := connect(t, startNATS(t))
	for _, o := range []capabilities.TrackerOptions{
		{ResyncInterval: time.Second, FetchTimeout: time.Second, StaleAfter: 1500 * time.Millisecond},
		{ResyncInterval: -1, StaleAfter: time.Minute},
	} {
		tr := capabilities.NewTracker(nc, o)
		if err := tr.Start(ctxT(t)); err == nil {
			t.Errorf("Start with %+v succeeded", o)
		}
		tr.Stop()
	}
}

// A tracker whose connection closes while a fetch is unanswered ends its waits at once, not after the
// fetch's FetchTimeout.
func TestTrackerEndsOnCloseDuringAnUnansweredFetch(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	get := capabilities.GetSubject(capabilities.DefaultPrefix)
	srv.answer(t, get, capsJSON(t, oneSource(1, "sess-1", true, v)), noReply)
	nc := connect(t, url)
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{FetchTimeout: time.Hour})
	t.Cleanup(tr.Stop)
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tr.Refresh()
	srv.await(t, get, 2)
	nc.Close()
	if err := tr.WaitGeneration(ctxT(t), 2); !errors.Is(err, capabilities.ErrTrackerStopped) || !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("WaitGeneration after the connection closed during a fetch = %v", err)
	}
}
