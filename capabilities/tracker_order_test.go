package capabilities_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
)

// heldGets receives caps.v1.get requests and hands them to the test, which answers them when and in
// the order it chooses: replies overtaken by announcements and by one another.
func heldGets(t *testing.T, url string) <-chan *nats.Msg {
	t.Helper()
	nc := connect(t, url)
	gets := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(capabilities.GetSubject(capabilities.DefaultPrefix), gets)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return gets
}

func nextGet(t *testing.T, gets <-chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-gets:
		return m
	case <-time.After(testTimeout):
		t.Fatal("no caps.v1.get request")
		return nil
	}
}

// A change announced while a fetch is unanswered makes the tracker fetch again at once; the answers
// then come in any order: the older (the first fetch's, answered before the change, or even before
// the one held) arrives after the newer. The tracker ends with the newest, current, whatever the order,
// and an older answer to a fetch sent before the newest was held is no sign of a media server that
// went back.
func TestTrackerKeepsTheNewestWhateverTheOrderOfAnswers(t *testing.T) {
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	for _, tc := range []struct {
		name        string
		firstAnswer uint64 // what the first fetch, sent for generation 2, is answered with
		newerFirst  bool   // the second fetch's answer (generation 3) comes in first
	}{
		{"OlderAfterNewer", 2, true},
		{"HeldAfterNewer", 1, true},
		{"InOrder", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, gets, srv, log := startHeldTracker(t, capabilities.TrackerOptions{ResyncInterval: -1}, v)
			t.Cleanup(tr.Stop)
			srv.announce(t, 2)
			first := nextGet(t, gets)
			srv.announce(t, 3) // while the first is unanswered: fetched at once
			second := nextGet(t, gets)
			answers := []func(){
				func() {
					_ = first.Respond([]byte(capsJSON(t, oneSource(tc.firstAnswer, "sess-"+string(rune('0'+tc.firstAnswer)), true, v))))
				},
				func() { _ = second.Respond([]byte(capsJSON(t, oneSource(3, "sess-3", true, v)))) },
			}
			if tc.newerFirst {
				answers[0], answers[1] = answers[1], answers[0]
			}
			for _, answer := range answers {
				answer()
				if f := log.next(t); f.err != nil {
					t.Fatal(f.err)
				}
			}
			caps, stale := tr.Snapshot()
			if s, _ := caps.Source("front-door"); caps.Generation != 3 || stale || s.SessionID != "sess-3" || !s.Online {
				t.Errorf("after both answers: generation %d stale %v, front-door %+v; want generation 3, sess-3 online, current", caps.Generation, stale, s)
			}
		})
	}
}

// Stop while a fetch is unanswered (FetchTimeout 1h) returns at once, and the answer that comes
// after it changes nothing: no install, no notification, no fetch reported; announcements after Stop
// send no fetch.
func TestTrackerStopDuringAFetch(t *testing.T) {
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	tr, gets, srv, log := startHeldTracker(t, capabilities.TrackerOptions{FetchTimeout: time.Hour, ResyncInterval: -1}, v)
	notes, cancel := tr.Subscribe()
	defer cancel()
	srv.announce(t, 2)
	inFlight := nextGet(t, gets)
	stopped := make(chan struct{})
	go func() { tr.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		t.Fatal("Stop waits for the unanswered fetch")
	}
	if err := inFlight.Respond([]byte(capsJSON(t, oneSource(2, "sess-2", true, v)))); err != nil {
		t.Fatal(err)
	}
	srv.announce(t, 3)
	// The answer and the announcement were delivered (the connection flushed both) to nobody.
	if err := srv.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-gets:
		t.Errorf("a fetch after Stop: %q", m.Subject)
	case f := <-log:
		t.Errorf("a fetch reported after Stop: %+v", f)
	case <-notes:
		t.Error("a notification after Stop")
	case <-time.After(50 * time.Millisecond): // nothing to await: a bounded look
	}
	if caps, stale := tr.Snapshot(); caps.Generation != 1 || stale {
		t.Errorf("after Stop: generation %d stale %v; want the last snapshot, 1, as it was", caps.Generation, stale)
	}
}

// startHeldTracker starts a tracker with opts on a fresh NATS server whose caps.v1.get requests the
// test answers by hand (gets), beside a canned media server that announces (srv); the first fetch is
// answered with generation 1 (front-door, session sess-1, online, variant v) and reported by log.
func startHeldTracker(t *testing.T, opts capabilities.TrackerOptions, v capabilities.Variant) (*capabilities.Tracker, <-chan *nats.Msg, *cannedServer, fetchLog) {
	t.Helper()
	url := startNATS(t)
	gets := heldGets(t, url)
	srv := newCannedServer(t, url)
	log := newFetchLog()
	tr := capabilities.NewTracker(connect(t, url), opts)
	capabilities.SetFetchHook(tr, log.hook)
	started := make(chan error, 1)
	go func() { started <- tr.Start(ctxT(t)) }()
	if err := nextGet(t, gets).Respond([]byte(capsJSON(t, oneSource(1, "sess-1", true, v)))); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	log.next(t)
	return tr, gets, srv, log
}
