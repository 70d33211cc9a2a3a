package view_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// A viewer that runs for months sees intents created and deleted, their keys never seen again: what
// it remembers per intent must go with the intent, or it grows with every intent ever seen.
func TestViewerForgetsDeletedIntents(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	const n = 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("intents/churn-%03d", i)
		in := coordinator.SubscribeIntent(src, "video")
		in.VariantID = variant
		if i%2 == 1 {
			in.VariantID = "browser-h264-1080p" // never READY: the viewer waits, pending
		}
		if _, err := f.Coord.PutIntent(t.Context(), ns, keys[i], in); err != nil {
			t.Fatal(err)
		}
	}
	simtest.WaitFor(t, 20*time.Second, "every intent subscribed and active, or pending", func() bool {
		for i, k := range keys {
			if want := []reconciler.ObservedState{reconciler.StateActive, reconciler.StatePending}[i%2]; f.status(t, k).State != want {
				return false
			}
		}
		return len(f.viewerSubs()) == n/2
	})
	for _, k := range keys {
		if _, err := f.Coord.DeleteIntent(t.Context(), ns, k, 0); err != nil {
			t.Fatal(err)
		}
	}
	simtest.WaitFor(t, 20*time.Second, "every intent unsubscribed and stopped", func() bool {
		for _, k := range keys {
			if f.status(t, k).State != reconciler.StateStopped {
				return false
			}
		}
		return len(f.viewerSubs()) == 0
	})
	if !simtest.Within(5*time.Second, func() bool {
		subs, last, looked := v.Tracked()
		return subs == 0 && last == 0 && looked == 0
	}) {
		subs, last, looked := v.Tracked()
		t.Fatalf("after %d intents were created and deleted, the viewer still tracks subs=%d lastStatus=%d looked=%d", n, subs, last, looked)
	}
	// Forgotten is safe: a key that comes back is subscribed again, once, and reported active.
	in := coordinator.SubscribeIntent(src, "video")
	in.VariantID = variant
	if _, err := f.Coord.PutIntent(t.Context(), ns, keys[0], in); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the key back, subscribed once and active", func() bool {
		return len(f.viewerSubs()) == 1 && f.status(t, keys[0]).State == reconciler.StateActive
	})
}
