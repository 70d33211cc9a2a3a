package capabilities_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// Snapshot reads the capabilities and whether they are stale together. Read one after the other,
// Current and Stale can straddle a change: a stale view (every source offline) with Stale false once a
// confirmation landed in between, and a reconciler would take its sources for gone and end what it
// holds on them; or the current view with Stale true. While a media server (always showing its sources
// online) stops and comes back over and over, every pair Snapshot returns is one of the tracker's own:
// stale with every source offline, or current with every source online.
func TestTrackerSnapshotPairsTheViewWithItsStaleness(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{ResyncInterval: 5 * time.Millisecond}, nil)
	media := e.sim
	simConn := connect(t, e.url)

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		mismatch atomic.Pointer[string]
		seen     [2]atomic.Int64 // pairs read current, stale
	)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				caps, stale := tr.Snapshot()
				for _, s := range caps.Sources {
					if s.Online == stale {
						msg := fmt.Sprintf("generation %d: source %s online %v with stale %v", caps.Generation, s.SourceID, s.Online, stale)
						mismatch.CompareAndSwap(nil, &msg)
					}
				}
				if stale {
					seen[1].Add(1)
				} else {
					seen[0].Add(1)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	notes, cancel := tr.Subscribe()
	defer cancel()
	waitStale := func(want bool) {
		t.Helper()
		timeout := time.After(testTimeout)
		for {
			if _, stale := tr.Snapshot(); stale == want {
				return
			}
			select {
			case <-notes:
			case <-timeout:
				t.Fatalf("the snapshot never became stale=%v", want)
			}
		}
	}
	for range 10 {
		media.Stop()
		waitStale(true)
		media = sim.New(simConn, sim.Options{Sources: sim.Sources("front-door", "back-yard"), ReadyDelay: 20 * time.Millisecond, After: media.Generation()})
		if err := media.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(media.Stop)
		waitStale(false)
		if m := mismatch.Load(); m != nil {
			break
		}
	}
	if m := mismatch.Load(); m != nil {
		t.Fatalf("Snapshot returned a view that is not the one of its staleness: %s", *m)
	}
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		t.Fatalf("the readers saw %d current and %d stale pairs; want both", seen[0].Load(), seen[1].Load())
	}
}
