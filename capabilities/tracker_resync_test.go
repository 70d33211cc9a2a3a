package capabilities_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
)

// A fetch left unanswered (its reply lost) while a later one succeeds does not hold back the periodic
// fetch: caught up by the later answer, the tracker fetches again after ResyncInterval, not only once
// the unanswered fetch has timed out (FetchTimeout 1h here) and a ResyncInterval more has passed.
func TestTrackerResyncNotHeldBackByAnUnansweredEarlierFetch(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	get := capabilities.GetSubject(capabilities.DefaultPrefix)
	snapshot := capsJSON(t, oneSource(1, "sess-1", true, v))
	srv.answer(t, get, snapshot, noReply, snapshot)
	log := newFetchLog()
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{FetchTimeout: time.Hour, ResyncInterval: 50 * time.Millisecond})
	capabilities.SetFetchHook(tr, log.hook)
	t.Cleanup(tr.Stop)
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if f := log.next(t); f.err != nil || f.gen != 1 {
		t.Fatalf("first fetch: %+v", f)
	}
	tr.Refresh()
	srv.await(t, get, 2) // never answered
	tr.Refresh()
	srv.await(t, get, 3)
	if f := log.next(t); f.err != nil || f.gen != 1 {
		t.Fatalf("fetch sent after the unanswered one: %+v", f)
	}
	// Caught up at generation 1, with the second fetch still unanswered: the next fetch is the
	// periodic one, due 50 ms from now; without it a lost announcement goes unnoticed for an hour.
	srv.await(t, get, 4)
	if f := log.next(t); f.err != nil || f.gen != 1 {
		t.Fatalf("periodic fetch: %+v", f)
	}
	if tr.Stale() {
		t.Error("stale while the media server answers")
	}
}
