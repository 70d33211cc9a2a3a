package capabilities_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// replaceSim starts a media server that counts its generations on from after (a restart that starts
// them over when after is below the generations the one it replaces announced), then stops old: the
// two overlap, so that no fetch finds nobody answering in between (which would make the snapshot
// stale for another reason). It returns the new simulator, stopped at cleanup.
func replaceSim(t *testing.T, e *env, old *sim.Sim, after uint64) *sim.Sim {
	t.Helper()
	s := sim.New(connect(t, e.url), sim.Options{Sources: sim.Sources("front-door"), After: after})
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	old.Stop()
	return s
}

// fetchAfter returns the second fetch logged from now on: the first may have been sent before the
// caller's last step, the second (the periodic one, sent once the first completed) was sent after.
func fetchAfter(t *testing.T, log fetchLog) fetch {
	t.Helper()
	log.drain()
	log.next(t)
	return log.next(t)
}

// A media server restarted with its generations started over (SPEC 12 wants them to keep growing; a
// restart that forgets them is an operator's mistake) answers the tracker's fetches with a generation
// below the one it holds, or with the one it holds but other sessions. The snapshot held is the old
// instance's: its sessions are gone, its publications with them. The tracker must not keep showing it
// as current (commands naming its sessions fail, and a Refresh would not help) nor take the new
// instance's answer for a confirmation of it; generations do not go backwards either: it marks the
// snapshot stale at the first such answer.
func TestTrackerNoticesAMediaServerThatStartedItsGenerationsOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(held uint64) uint64
	}{
		{"Below", func(uint64) uint64 { return 0 }},                      // generation 1
		{"SameGeneration", func(held uint64) uint64 { return held - 1 }}, // the held generation, other sessions
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sim.Options{Sources: sim.Sources("front-door")})
			log := newFetchLog()
			// StaleAfter 1h: only what the answers say can make the snapshot stale here.
			tr, _ := e.tracker(capabilities.TrackerOptions{ResyncInterval: 20 * time.Millisecond, StaleAfter: time.Hour}, log.hook)
			for range 2 { // generation 5
				_ = e.sim.SetOnline("front-door", false)
				_ = e.sim.SetOnline("front-door", true)
			}
			held := e.sim.Generation()
			if err := tr.WaitGeneration(ctxT(t), held); err != nil {
				t.Fatal(err)
			}
			oldSess, _, _ := e.sim.SessionID("front-door")
			restarted := replaceSim(t, e, e.sim, tc.after(held))
			newSess, _, _ := restarted.SessionID("front-door")
			f := fetchAfter(t, log)
			if f.err != nil || f.gen != restarted.Generation() {
				t.Fatalf("fetch after the restart: %+v, want generation %d", f, restarted.Generation())
			}
			caps, stale := tr.Snapshot()
			sess, online, _ := tr.Resolve("front-door")
			if !stale || online || caps.Generation != held {
				t.Errorf("after the restarted media server answered generation %d: generation %d, stale %v, front-door session %s online %v (old %s, new %s); want generation %d stale, offline",
					f.gen, caps.Generation, stale, sess, online, oldSess, newSess, held)
			}
			// A newer generation of the new instance is installed, current.
			if err := restarted.AddSource(sim.SourceConfig{SourceID: "garage"}); err != nil {
				t.Fatal(err)
			}
			for restarted.Generation() <= held {
				_ = restarted.SetOnline("garage", !restarted.Capabilities().Sources[1].Online)
			}
			if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
				s, ok := c.Source("front-door")
				return ok && s.Online && s.SessionID == newSess
			}); err != nil {
				t.Fatal(err)
			}
			if tr.Stale() {
				t.Error("stale once the new instance's newer generation is in")
			}
		})
	}
}

// Two media servers answering caps.v1.get at once (a misconfiguration: the SPEC knows one) answer each
// fetch in turn, whichever is first, and announce generations of their own. The tracker shows the
// snapshot of the one whose generations are ahead while it answers, and stale whenever the other
// answers (a generation below the one held): never a view of the one behind, never the other's as
// current. (Each command goes to both as well: see Commands.)
func TestTrackerWithTwoMediaServersAnswering(t *testing.T) {
	e := newEnv(t, sim.Options{Sources: sim.Sources("front-door"), After: 10})
	type seen struct {
		gen   uint64 // answered
		caps  capabilities.ServerCapabilities
		stale bool
	}
	seenc := make(chan seen, 1024)
	tr := capabilities.NewTracker(connect(t, e.url), capabilities.TrackerOptions{ResyncInterval: 5 * time.Millisecond, StaleAfter: time.Hour})
	capabilities.SetFetchHook(tr, func(gen uint64, err error) {
		if err != nil {
			t.Errorf("fetch: %v", err)
		}
		caps, stale := tr.Snapshot() // on the tracker's goroutine: what this answer left
		select {
		case seenc <- seen{gen, caps, stale}:
		default:
		}
	})
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	aheadSess, _, _ := e.sim.SessionID("front-door")
	behind := sim.New(connect(t, e.url), sim.Options{Sources: sim.Sources("front-door", "garage")})
	if err := behind.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(behind.Stop)
	var answers [2]int // by the one behind, the one ahead
	for answers[0] == 0 || answers[1] == 0 {
		var s seen
		select {
		case s = <-seenc:
		case <-time.After(testTimeout):
			t.Fatalf("answers by the one behind and the one ahead: %v; want both", answers)
		}
		if _, garage := s.caps.Source("garage"); garage || s.caps.Generation != e.sim.Generation() {
			t.Fatalf("after an answer of generation %d: the tracker shows generation %d with garage %v; want only the snapshot ahead (%d)",
				s.gen, s.caps.Generation, garage, e.sim.Generation())
		}
		if s.gen < s.caps.Generation {
			answers[0]++
			if !s.stale {
				t.Fatalf("the media server behind answered generation %d; the snapshot of generation %d is still current", s.gen, s.caps.Generation)
			}
		} else {
			answers[1]++
			if src, _ := s.caps.Source("front-door"); s.stale || !src.Online || src.SessionID != aheadSess {
				t.Fatalf("the media server ahead answered; stale %v, front-door %+v", s.stale, src)
			}
		}
	}
}
