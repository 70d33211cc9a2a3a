package view_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/view"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// subscribedBehindAGate runs a viewer whose tracker notices a silence fast, subscribed to a variant
// published on a simulator whose network g can cut; publish publishes the variant on a simulator.
// The viewer logs to h, nil: nowhere.
func subscribedBehindAGate(t *testing.T, h slog.Handler) (f *fixture, g *simtest.Gate, s *sim.Sim, v *view.Viewer, key string, publish func(*sim.Sim)) {
	e := simtest.Start(t, sim.Sources(src), "transcoder-a", user)
	g = &simtest.Gate{}
	s = simtest.ReplaceSim(t, e, sim.Sources(src), g)
	f = &fixture{Env: e}
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	publish = func(s *sim.Sim) {
		sess, _, _ := s.SessionID(src)
		if _, err := pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
			VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
			t.Fatal(err)
		}
	}
	publish(s)
	if h == nil {
		h = slog.DiscardHandler
	}
	v, err = view.New(view.Config{Conn: e.Connect(t, user), Principal: user, WorkerID: "viewer-1", Logger: slog.New(h),
		Capabilities: simtest.FastTracker})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, v.Run)
	if key, err = v.Want(t.Context(), src, "video", variant); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed", func() bool { return f.status(t, key).State == reconciler.StateActive })
	return f, g, s, v, key, publish
}

// A media server that goes silent and comes back with the same sessions still has the viewer's
// subscription: the viewer keeps it (a stale snapshot says nothing of it) instead of forgetting it
// and subscribing a second time, which would leave the first one on the media server for good.
// Restarted (new sessions), it has ended the subscription: the viewer subscribes again, once.
func TestViewerKeepsItsSubscriptionAcrossASilentMediaServer(t *testing.T) {
	f, g, s, v, key, publish := subscribedBehindAGate(t, nil)
	e := f.Env
	first, _ := v.Subscription(key)

	g.SetCut(true)
	simtest.WaitFor(t, 10*time.Second, "the silence noticed", func() bool {
		st := f.status(t, key)
		_, held := v.Subscription(key)
		return st.State != reconciler.StateActive || !held
	})
	g.SetCut(false)
	simtest.WaitFor(t, 10*time.Second, "active again", func() bool {
		id, ok := v.Subscription(key)
		return ok && f.status(t, key).State == reconciler.StateActive && f.status(t, key).SubscriptionID == id
	})
	if id, _ := v.Subscription(key); id != first {
		t.Errorf("subscription %s replaced by %s although the media server kept it", first, id)
	}
	if subs := f.viewerSubs(); len(subs) != 1 {
		t.Errorf("viewer subscriptions on the media server after the silence: %+v", subs)
	}
	if n := simtest.CountCommands(s, user, "subscribe"); n > 2 {
		t.Errorf("%d subscribes for one silence", n)
	}

	// A restart: new sessions, the old subscription gone with the old media server.
	s = simtest.ReplaceSim(t, e, sim.Sources(src), nil)
	publish(s)
	simtest.WaitFor(t, 10*time.Second, "subscribed on the new session", func() bool {
		subs := f.viewerSubs()
		st := f.status(t, key)
		return len(subs) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	})
	if n := simtest.CountCommands(s, user, "subscribe"); n != 1 {
		t.Errorf("%d subscribes after the restart, want 1", n)
	}
	if subs := f.viewerSubs(); len(subs) != 1 {
		t.Errorf("viewer subscriptions after the restart: %+v", subs)
	}
}

// An intent deleted while the media server is silent: the unsubscribe reaches nobody, so the viewer
// keeps the subscription (its status not "stopped") and ends it once the media server answers again
// with the same session, which still has it.
func TestDeletedIntentEndsTheSubscriptionOnceTheMediaServerAnswers(t *testing.T) {
	f, g, _, v, key, _ := subscribedBehindAGate(t, nil)
	e := f.Env
	speak := g.Silence(t, e)
	if _, err := e.Admin.Delete(t.Context(), wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the deletion acted on", func() bool {
		st := f.status(t, key)
		return st.State == reconciler.StateStopped || strings.Contains(st.Message, "ending subscription")
	})
	if st := f.status(t, key); st.State == reconciler.StateStopped {
		t.Errorf("status %+v while the subscription is still on the media server", st)
	}
	speak()
	simtest.WaitFor(t, 10*time.Second, "the subscription ended once the media server answers", func() bool { return len(f.viewerSubs()) == 0 })
	simtest.WaitFor(t, 10*time.Second, "status stopped", func() bool { return f.status(t, key).State == reconciler.StateStopped })
	if _, ok := v.Subscription(key); ok {
		t.Error("the viewer still holds the ended subscription")
	}
}

// While a deleted intent's unsubscribe goes unanswered, the viewer sends it again every second, for
// as long as the media server stays silent. It warned at every one of them, burying the log under
// one line a second. It warns once per outage, logs the repeats at Debug, and tells at Info when the
// media server answers again.
func TestViewerWarnsOncePerUnansweredUnsubscribe(t *testing.T) {
	tap := &simtest.LogTap{}
	f, g, _, _, key, _ := subscribedBehindAGate(t, tap)
	speak := g.Silence(t, f.Env)
	if _, err := f.Admin.Delete(t.Context(), wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 15*time.Second, "three unanswered unsubscribes", func() bool { return tap.Count("unsubscribe", slog.LevelDebug) >= 3 })
	if n := tap.Count("unsubscribe", slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings for one unanswered unsubscribe, want 1", n)
	}
	speak()
	simtest.WaitFor(t, 10*time.Second, "status stopped", func() bool { return f.status(t, key).State == reconciler.StateStopped })
	if n := tap.Count("unsubscribe answered again", slog.LevelInfo); n != 1 {
		t.Errorf("the recovery told %d times at Info, want 1", n)
	}
}
