package view_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// The intent is rewritten to name another variant of the source (both READY on the same session):
// the viewer ends its subscription to the old variant and subscribes to the new one, and its status
// names the new one. It kept the old subscription and reported it active, since it compared only
// the session and the variant's readiness.
func TestViewerFollowsAVariantChange(t *testing.T) {
	f := setup(t)
	const other = "browser-h264-480p"
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: other, OutputProfile: other, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 5*time.Second, other+" READY", func() bool {
		v, ok := f.Sim.Capabilities().Variant(src, "video", other)
		return ok && v.State == capabilities.StateReady
	})
	v, _ := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed to "+variant, func() bool {
		subs := f.viewerSubs()
		return len(subs) == 1 && subs[0].VariantID == variant
	})
	userCo, err := coordinator.New(f.Env.Admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := userCo.UpdateIntent(t.Context(), ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		cur.VariantID = other
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed to "+other+" only", func() bool {
		subs := f.viewerSubs()
		return len(subs) == 1 && subs[0].VariantID == other
	})
	simtest.WaitFor(t, 10*time.Second, "the status names "+other, func() bool {
		st := f.status(t, key)
		return st.State == reconciler.StateActive && st.VariantID == other && st.SubscriptionID == f.viewerSubs()[0].ID
	})
}
