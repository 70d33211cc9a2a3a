package cv_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/coordinator"
)

// The coordinator points the intent at another variant of the same source (both READY on the same
// session): the worker ends its subscription to the old variant and subscribes to the new one. It
// kept the old one, reporting nothing, since its job remembered only the session and the model.
func TestCVFollowsAVariantChange(t *testing.T) {
	f := setup(t)
	f.publish(t)
	const other = "browser-h264-480p"
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: other, OutputProfile: other, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, other+" READY", func() bool {
		v, ok := f.Sim.Capabilities().Variant(src, "video", other)
		return ok && v.State == capabilities.StateReady
	})
	f.cvWorker(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed to "+variant, func() bool {
		subs := cvSubs(f.Sim)
		return len(subs) == 1 && subs[0].VariantID == variant
	})
	if _, err := f.Coord.UpdateIntent(t.Context(), cvNS, intent, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		cur.VariantID = other
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv subscribed to "+other+" only", func() bool {
		subs := cvSubs(f.Sim)
		return len(subs) == 1 && subs[0].VariantID == other
	})
}

// The intent is pointed at another stream of its source that has the same variant: the worker
// subscribes on the new stream and ends the old subscription.
func TestCVFollowsAStreamChange(t *testing.T) {
	f := twoStreams(t)
	f.cvWorker(t, "cv-1")
	in := coordinator.SubscribeIntent(src, "video")
	in.StreamID, in.VariantID = "video", variant
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv subscribed on video", func() bool {
		subs := cvSubs(f.Sim)
		return len(subs) == 1 && subs[0].StreamID == "video"
	})
	in.StreamID = "cam2"
	if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv subscribed on cam2 only", func() bool {
		subs := cvSubs(f.Sim)
		return len(subs) == 1 && subs[0].StreamID == "cam2"
	})
}
