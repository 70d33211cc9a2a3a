package capabilities_test

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// Announcements that are not one (empty, not JSON, a generation of the wrong type or sign, null, no
// generation, unknown fields only, a large body) leave the snapshot held as it was, current, make no
// notification, are logged when they do not decode, and the tracker follows the next real change.
func TestTrackerMalformedAnnouncements(t *testing.T) {
	e := newEnv(t, sim.Options{})
	logs := make(logTap, 1024)
	type seen struct {
		gen   uint64
		err   error
		caps  capabilities.ServerCapabilities
		stale bool
	}
	fetches := make(chan seen, 1024)
	tr := capabilities.NewTracker(connect(t, e.url), capabilities.TrackerOptions{Logger: slog.New(logs), ResyncInterval: -1})
	capabilities.SetFetchHook(tr, func(gen uint64, err error) {
		caps, stale := tr.Snapshot() // on the tracker's goroutine: what this fetch left
		fetches <- seen{gen, err, caps, stale}
	})
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	held := (<-fetches).caps
	notes, cancel := tr.Subscribe()
	defer cancel()
	pub := connect(t, e.url)
	big := `{"generation":1,"vendor":"` + strings.Repeat("x", 512<<10) + `"}`
	malformed := []string{"", "not json", `{"generation":"9"}`, `{"generation":-1}`, `{"generation":1.5}`, `[9]`, `{"generation":9`}
	for _, m := range append(malformed, `null`, `{}`, `{"gen":9}`, `{"generation":null}`, big, `{"generation":1,"extra":{"generation":9}}`) {
		if err := pub.Publish(capabilities.ChangedSubject(capabilities.DefaultPrefix), []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every one that does not decode is logged; each makes the tracker fetch (it could announce
	// anything), and every fetch answers the generation held.
	for warned := 0; warned < len(malformed); {
		select {
		case r := <-logs:
			if r.Level == slog.LevelWarn && strings.Contains(r.Message, "malformed changed") {
				warned++
			}
		case <-time.After(testTimeout):
			t.Fatalf("%d of %d malformed announcements logged", warned, len(malformed))
		}
	}
	if err := e.sim.SetOnline("back-yard", false); err != nil { // generation 2: the next real change
		t.Fatal(err)
	}
	for {
		var f seen
		select {
		case f = <-fetches:
		case <-time.After(testTimeout):
			t.Fatal("generation 2 not fetched")
		}
		if f.err == nil && f.gen == 2 {
			break
		}
		if f.err != nil || f.gen != 1 || f.stale || !reflect.DeepEqual(f.caps, held) {
			t.Fatalf("fetch after malformed announcements: generation %d, error %v, left %+v stale %v; want the snapshot held, current", f.gen, f.err, f.caps, f.stale)
		}
	}
	if len(notes) != 1 {
		t.Errorf("%d notifications; want the one of generation 2", len(notes))
	}
	if _, online, _ := tr.Resolve("back-yard"); online || tr.Generation() != 2 || tr.Stale() {
		t.Errorf("after the next real change: generation %d, back-yard online %v, stale %v", tr.Generation(), online, tr.Stale())
	}
}

// An announcement of a generation the media server never reaches (a stray, or one sent as -1 by a
// media server that has no generation yet, 2^64-1 on the wire) leaves the tracker behind it for good:
// it retries with backoff, as for a lagging media server. The media server's next real announcements
// are above the generation held: each must still be fetched when it comes, not when the retry for the
// stray one is due (up to MaxRefetchBackoff later, for ever).
func TestTrackerFollowsRealAnnouncementsAfterAStrayHighOne(t *testing.T) {
	e := newEnv(t, sim.Options{})
	log := newFetchLog()
	// The retry of a fetch behind the announcement is due MaxRefetchBackoff after it.
	tr, _ := e.tracker(capabilities.TrackerOptions{RefetchBackoff: capabilities.MaxRefetchBackoff, ResyncInterval: -1}, log.hook)
	log.drain()
	pub := connect(t, e.url)
	if err := pub.Publish(capabilities.ChangedSubject(capabilities.DefaultPrefix), []byte(`{"generation":18446744073709551615}`)); err != nil {
		t.Fatal(err)
	}
	if f := log.next(t); f.err != nil || f.gen != 1 {
		t.Fatalf("fetch after the stray announcement: %+v", f)
	}
	for gen := uint64(2); gen <= 3; gen++ {
		if err := e.sim.SetOnline("back-yard", gen%2 == 1); err != nil {
			t.Fatal(err)
		}
		// Well within the retry's MaxRefetchBackoff: the announcement makes it fetch at once.
		ctx, cancel := context.WithTimeout(ctxT(t), capabilities.MaxRefetchBackoff/2)
		err := tr.WaitGeneration(ctx, gen)
		cancel()
		if err != nil {
			t.Fatalf("generation %d, announced, not fetched within %v after a stray announcement of 2^64-1: %v", gen, capabilities.MaxRefetchBackoff/2, err)
		}
	}
}
