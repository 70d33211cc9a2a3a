package view_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/view"
	"github.com/keeppeek/coordination/reconciler"
)

// The intent is rewritten to name another variant while the media server has just gone silent (the
// viewer's snapshot not yet stale): the unsubscribe of the old variant's subscription reaches
// nobody. Back with the same session, the media server still has that subscription. The viewer
// forgot it all the same and subscribed to the new variant beside it: the old one stayed on the
// media server for good, named by no status. It keeps it, and ends it once the media server answers.
func TestViewerChangeWhileTheMediaServerIsSilentLeavesNoSubscription(t *testing.T) {
	e := simtest.Start(t, sim.Sources(src), "transcoder-a", user)
	g := &simtest.Gate{}
	s := simtest.ReplaceSim(t, e, sim.Sources(src), g)
	f := &fixture{Env: e}
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	const other = "browser-h264-480p"
	sess, _, _ := s.SessionID(src)
	for _, vid := range []string{variant, other} {
		if _, err := pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
			VariantID: vid, OutputProfile: vid, RecordingMode: "disabled"}); err != nil {
			t.Fatal(err)
		}
	}
	simtest.WaitFor(t, 5*time.Second, "both variants READY", func() bool {
		a, ok1 := s.Capabilities().Variant(src, "video", variant)
		b, ok2 := s.Capabilities().Variant(src, "video", other)
		return ok1 && ok2 && a.State == capabilities.StateReady && b.State == capabilities.StateReady
	})
	// The default tracker: a silence reads as stale only after StaleAfter (30 s), long after the
	// change below is acted on.
	v, err := view.New(view.Config{Conn: e.Connect(t, user), Principal: user, WorkerID: "viewer-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, v.Run)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed to "+variant, func() bool {
		subs := f.viewerSubs()
		return len(subs) == 1 && subs[0].VariantID == variant && f.status(t, key).State == reconciler.StateActive
	})
	first, _ := v.Subscription(key)

	g.SetCut(true)
	co, err := coordinator.New(e.Admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := co.UpdateIntent(t.Context(), ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		cur.VariantID = other
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Acted on: the unsubscribe was sent (and reached nobody).
	simtest.WaitFor(t, 10*time.Second, "the change acted on", func() bool {
		id, ok := v.Subscription(key)
		return !ok || id != first || f.status(t, key).State != reconciler.StateActive
	})
	g.SetCut(false)
	simtest.WaitFor(t, 20*time.Second, "subscribed to "+other, func() bool {
		for _, sub := range f.viewerSubs() {
			if sub.VariantID == other {
				return true
			}
		}
		return false
	})
	simtest.WaitFor(t, 10*time.Second, "only the subscription to "+other+" left", func() bool {
		subs := f.viewerSubs()
		return len(subs) == 1 && subs[0].VariantID == other
	})
	simtest.WaitFor(t, 10*time.Second, "the status names it", func() bool {
		st := f.status(t, key)
		subs := f.viewerSubs()
		return len(subs) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	})
}
