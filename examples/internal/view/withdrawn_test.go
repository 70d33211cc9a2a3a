package view_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// The variant the intent names is withdrawn while the viewer holds a subscription to it (its
// publication stopped, which ends the subscriptions to it), unannounced for a while, then comes back
// under the same id with other parameters: the status says pending meanwhile, not active, and then
// exactly one subscription runs, named by the status.
func TestViewerVariantWithdrawnAndBackWithOtherParameters(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "active", func() bool {
		return len(f.viewerSubs()) == 1 && f.status(t, key).State == reconciler.StateActive
	})
	pubs := f.Sim.Publications()
	if len(pubs) != 1 {
		t.Fatalf("publications %+v", pubs)
	}
	f.Sim.SetCommandDelay(time.Second)
	if err := f.pub.StopPublication(t.Context(), pubs[0].ID); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "pending", func() bool { return f.status(t, key).State == reconciler.StatePending })
	f.Sim.SuppressChanged(true)
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: variant, OutputProfile: "browser-vp9-1080p", RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 5*time.Second, "variant READY again", func() bool {
		v, ok := f.Sim.Capabilities().Variant(src, "video", variant)
		return ok && v.State == capabilities.StateReady && v.Codec == "vp9"
	})
	f.Sim.SuppressChanged(false)
	if err := f.Sim.Announce(); err != nil {
		t.Fatal(err)
	}
	f.awaitSettled(t, key, 20*time.Second)
}

// The source goes offline and comes back (a new session) on a slow media server: the status says
// pending while there is no subscription, and then exactly one subscription runs, named by the status.
func TestViewerSourceOfflineAndBackOnASlowMediaServer(t *testing.T) {
	f := setup(t)
	f.viewer(t)
	key, _ := f.wantOriginal(t)
	f.Sim.SetCommandDelay(1500 * time.Millisecond)
	if err := f.Sim.SetOnline(src, false); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "pending", func() bool { return f.status(t, key).State == reconciler.StatePending })
	if err := f.Sim.SetOnline(src, true); err != nil {
		t.Fatal(err)
	}
	f.awaitSettled(t, key, 20*time.Second)
}
