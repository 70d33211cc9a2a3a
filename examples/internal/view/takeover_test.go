package view_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// The variant's publisher takes it over (a standby transcoder of the same principal starting it
// again): the media server ends the subscriptions to it, and the variant is PENDING, then READY
// under the new publication. The viewer's tracker never sees the PENDING generation (its
// announcements are lost; it learns only of the READY one after it, the variant as it was). The
// viewer still subscribes again. It went on reporting the ended subscription active, since the
// snapshots it read showed the variant READY on the same session throughout.
func TestViewerResubscribesAfterATakeoverItDidNotSee(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	simtest.WaitFor(t, 10*time.Second, "subscribed, and said so", func() bool {
		subs := f.viewerSubs()
		if len(subs) != 1 {
			return false
		}
		first = subs[0].ID
		st := f.status(t, key)
		return st.State == reconciler.StateActive && st.SubscriptionID == first
	})

	f.Sim.SuppressChanged(true)
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	if subs := f.viewerSubs(); len(subs) != 0 {
		t.Fatalf("the takeover left subscriptions: %+v", subs)
	}
	simtest.WaitFor(t, 5*time.Second, "the variant READY again", func() bool {
		v, ok := f.Sim.Capabilities().Variant(src, "video", variant)
		return ok && v.State == capabilities.StateReady
	})
	f.Sim.SuppressChanged(false)
	if err := f.Sim.Announce(); err != nil { // the generation after the gap
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed again, and said so", func() bool {
		subs := f.viewerSubs()
		if len(subs) != 1 || subs[0].ID == first {
			return false
		}
		st := f.status(t, key)
		return st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	})
}
