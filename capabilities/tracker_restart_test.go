package capabilities_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// The media server restarts (a new process, its sources with new sessions), counting its generations on
// from where it was (SPEC 12: generations only grow): the tracker follows the new server.
func TestTrackerFollowsARestartedMediaServer(t *testing.T) {
	e := newEnv(t, sim.Options{Sources: sim.Sources("front-door")})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	for range 3 { // a few changes: generation 7
		_ = e.sim.SetOnline("front-door", false)
		_ = e.sim.SetOnline("front-door", true)
	}
	if err := tr.WaitGeneration(ctxT(t), e.sim.Generation()); err != nil {
		t.Fatal(err)
	}
	oldSess, _, _ := e.sim.SessionID("front-door")
	e.sim.Stop()
	restarted := sim.New(connect(t, e.url), sim.Options{Sources: sim.Sources("front-door", "back-yard"), After: e.sim.Generation()})
	if err := restarted.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Stop)
	_ = restarted.AddSource(sim.SourceConfig{SourceID: "garage"}) // generation 2: announced
	newSess, _, _ := restarted.SessionID("front-door")
	deadline := time.Now().Add(10 * time.Second)
	for {
		sess, _, _ := tr.Resolve("front-door")
		if _, garage := tr.Current().Source("garage"); sess == newSess && garage {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the tracker's state has no event for "this source appeared"
	}
	sess, online, _ := tr.Resolve("front-door")
	_, garage := tr.Current().Source("garage")
	{
		t.Fatalf("after the media server restarted (generation %d), the tracker still holds generation %d: front-door session %s online=%v (old %s, current %s), garage known=%v",
			restarted.Generation(), tr.Generation(), sess, online, oldSess, newSess, garage)
	}
}
