package capabilities_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
)

// A media server that stops with fetches in hand may still answer them once it is gone (nats.Conn.Drain
// unsubscribes first and then serves what it holds): a later fetch has already found nobody answering
// caps.v1.get and made the snapshot stale. Such an answer predates that finding and says nothing about
// the media server now: it must not make the snapshot current again (its sources online, its variants
// READY) while nothing serves them. A fetch sent after the finding that is answered does.
func TestTrackerAnEarlierAnswerDoesNotReviveAGoneMediaServer(t *testing.T) {
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	get := capabilities.GetSubject(capabilities.DefaultPrefix)
	for _, tc := range []struct {
		name string
		late uint64 // the generation of the late answer
	}{{"SameGeneration", 1}, {"NewerGeneration", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			url := startNATS(t)
			srvNC := connect(t, url)
			held := make(chan *nats.Msg, 8)
			first := true
			sub, err := srvNC.Subscribe(get, func(m *nats.Msg) {
				if first { // the tracker's first fetch: answered at once
					first = false
					_ = m.Respond([]byte(capsJSON(t, oneSource(1, "sess-1", true, v))))
					return
				}
				held <- m // held: the media server is about to stop
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := srvNC.Flush(); err != nil {
				t.Fatal(err)
			}

			type result struct {
				gen   uint64
				err   error
				stale bool
			}
			results := make(chan result, 16)
			tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{ResyncInterval: -1, FetchTimeout: time.Hour})
			capabilities.SetFetchHook(tr, func(gen uint64, err error) { results <- result{gen, err, tr.Stale()} })
			t.Cleanup(tr.Stop)
			if err := tr.Start(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			next := func() result {
				t.Helper()
				select {
				case r := <-results:
					return r
				case <-time.After(testTimeout):
					t.Fatal("no fetch completed")
					return result{}
				}
			}
			if r := next(); r.gen != 1 || r.stale {
				t.Fatalf("first fetch %+v", r)
			}

			tr.Refresh() // the media server receives this one and holds it
			var m *nats.Msg
			select {
			case m = <-held:
			case <-time.After(testTimeout):
				t.Fatal("the held fetch did not arrive")
			}
			if err := sub.Unsubscribe(); err != nil { // the media server stops serving caps.v1.get
				t.Fatal(err)
			}
			if err := srvNC.Flush(); err != nil {
				t.Fatal(err)
			}
			tr.Refresh() // finds nobody
			if r := next(); !errors.Is(r.err, nats.ErrNoResponders) || !r.stale {
				t.Fatalf("fetch with the media server gone: %+v; want no responders, stale", r)
			}
			// The gone media server answers the fetch it held.
			if err := m.Respond([]byte(capsJSON(t, oneSource(tc.late, "sess-1", true, v)))); err != nil {
				t.Fatal(err)
			}
			if r := next(); r.gen != tc.late || !r.stale {
				t.Fatalf("an answer to a fetch sent before the media server was found gone: %+v; want the snapshot still stale", r)
			}
			if _, online, _ := tr.Resolve("front-door"); online {
				t.Fatal("front-door reads online from an answer of a media server found gone since")
			}
			if tr.Generation() != tc.late {
				t.Errorf("generation %d, want %d: a newer snapshot is still installed (stale)", tr.Generation(), tc.late)
			}

			// The media server is back: a fetch sent now is answered, and the snapshot is current.
			if _, err := srvNC.Subscribe(get, func(m *nats.Msg) {
				_ = m.Respond([]byte(capsJSON(t, oneSource(tc.late, "sess-1", true, v))))
			}); err != nil {
				t.Fatal(err)
			}
			if err := srvNC.Flush(); err != nil {
				t.Fatal(err)
			}
			tr.Refresh()
			for {
				r := next()
				if r.err == nil && !r.stale {
					break
				}
			}
			if _, online, _ := tr.Resolve("front-door"); !online || tr.Stale() {
				t.Fatalf("media server back: online %v, stale %v", online, tr.Stale())
			}
		})
	}
}

// The same holds before the first snapshot: the first fetch is held by a media server that then
// stops, a later fetch finds nobody answering caps.v1.get, and the held fetch is answered after that.
// There was no snapshot to make stale when the media server was found gone, but the answer still
// predates that finding: it is installed (Start returns) stale, its sources offline, not current.
func TestTrackerAFirstAnswerFromAGoneMediaServerIsStale(t *testing.T) {
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	get := capabilities.GetSubject(capabilities.DefaultPrefix)
	url := startNATS(t)
	srvNC := connect(t, url)
	held := make(chan *nats.Msg, 8)
	sub, err := srvNC.Subscribe(get, func(m *nats.Msg) { held <- m })
	if err != nil {
		t.Fatal(err)
	}
	if err := srvNC.Flush(); err != nil {
		t.Fatal(err)
	}
	fetches := newFetchLog()
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{ResyncInterval: -1, FetchTimeout: time.Hour})
	capabilities.SetFetchHook(tr, fetches.hook)
	t.Cleanup(tr.Stop)
	started := make(chan error, 1)
	go func() { started <- tr.Start(ctxT(t)) }()
	var m *nats.Msg
	select {
	case m = <-held:
	case <-time.After(testTimeout):
		t.Fatal("the first fetch did not arrive")
	}
	if err := sub.Unsubscribe(); err != nil { // the media server stops serving caps.v1.get
		t.Fatal(err)
	}
	if err := srvNC.Flush(); err != nil {
		t.Fatal(err)
	}
	tr.Refresh() // finds nobody
	if f := fetches.next(t); !errors.Is(f.err, nats.ErrNoResponders) {
		t.Fatalf("fetch with the media server gone: %+v; want no responders", f)
	}
	if err := m.Respond([]byte(capsJSON(t, oneSource(1, "sess-1", true, v)))); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, online, ok := tr.Resolve("front-door"); !ok || online || !tr.Stale() {
		t.Fatalf("first snapshot answered by a media server found gone since: front-door known %v online %v, stale %v; want it known, offline, stale",
			ok, online, tr.Stale())
	}

	// The media server is back: a fetch sent now is answered, and the snapshot is current.
	if _, err := srvNC.Subscribe(get, func(m *nats.Msg) {
		_ = m.Respond([]byte(capsJSON(t, oneSource(1, "sess-1", true, v))))
	}); err != nil {
		t.Fatal(err)
	}
	if err := srvNC.Flush(); err != nil {
		t.Fatal(err)
	}
	tr.Refresh()
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", "original"); err != nil || tr.Stale() {
		t.Fatalf("media server back: WaitReady %v, stale %v", err, tr.Stale())
	}
}
