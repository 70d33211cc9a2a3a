package capabilities_test

import (
	"errors"
	"testing"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// A subscribe sent against a variant the snapshot still shows READY, though its publication was just
// stopped (the announcement lost, or not yet fetched), is refused with VARIANT_NOT_READY, makes
// nothing, and the Refresh that Tracker.Refresh's doc asks for then shows the variant gone.
func TestSubscribeToAVariantJustWithdrawn(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{ResyncInterval: -1}, nil)
	alice, bob := e.commands("alice"), e.commands("bob")
	pub := e.publish(alice, "browser-h264-720p")
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p"); err != nil {
		t.Fatal(err)
	}
	e.sim.SuppressChanged(true)
	if err := alice.StopPublication(ctxT(t), pub.PublicationID); err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.Current().Variant("front-door", "video", "browser-h264-720p"); !ok {
		t.Fatal("the tracker saw the withdrawal without an announcement or a fetch")
	}
	session, online, _ := tr.Resolve("front-door")
	_, err := bob.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: session, StreamID: "video", VariantID: "browser-h264-720p"})
	if !online || !errors.Is(err, capabilities.ErrVariantNotReady) {
		t.Fatalf("subscribe to the withdrawn variant (session online %v) = %v, want ErrVariantNotReady", online, err)
	}
	if subs := e.sim.Subscriptions(); len(subs) != 0 {
		t.Errorf("subscriptions %+v after a refused subscribe", subs)
	}
	tr.Refresh()
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		_, ok := c.Variant("front-door", "video", "browser-h264-720p")
		return !ok
	}); err != nil {
		t.Fatalf("after Refresh: %v", err)
	}
}
