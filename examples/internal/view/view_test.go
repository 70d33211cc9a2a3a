package view_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/view"
	"github.com/keeppeek/coordination/reconciler"
)

const (
	src     = "front-door"
	variant = "browser-h264-720p"
	user    = "viewer-1"
	ns      = "user/" + user
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	*simtest.Env
	pub *capabilities.Commands
}

func setup(t *testing.T) *fixture {
	e := simtest.Start(t, sim.Sources(src), "transcoder-a", user)
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{Env: e, pub: pub}
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 5*time.Second, "variant READY", func() bool {
		v, ok := f.Sim.Capabilities().Variant(src, "video", variant)
		return ok && v.State == capabilities.StateReady
	})
	return f
}

// viewer starts a viewer; stop stops it gracefully and waits for it.
func (f *fixture) viewer(t *testing.T) (v *view.Viewer, stop func()) {
	t.Helper()
	v, err := view.New(view.Config{Conn: f.Connect(t, user), Principal: user, WorkerID: "viewer-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return v, simtest.Run(t, v.Run)
}

func (f *fixture) viewerSubs() []sim.SubscriptionInfo {
	var out []sim.SubscriptionInfo
	for _, s := range f.Sim.Subscriptions() {
		if s.Principal == user {
			out = append(out, s)
		}
	}
	return out
}

func (f *fixture) status(t *testing.T, key string) reconciler.ObservedStatus {
	t.Helper()
	e, err := f.Admin.Get(t.Context(), ns, "status/"+key[len("intents/"):])
	if err != nil {
		return reconciler.ObservedStatus{}
	}
	var st reconciler.ObservedStatus
	if err := json.Unmarshal(e.Document, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// A viewer that stops gracefully ends its subscriptions: left behind, each restart of a viewer would
// add one more on the media server. Its status no longer claims an active subscription.
func TestViewerStopEndsItsSubscriptions(t *testing.T) {
	f := setup(t)
	v, stop := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed", func() bool { return len(f.viewerSubs()) == 1 })
	stop()
	if subs := f.viewerSubs(); len(subs) != 0 {
		t.Fatalf("subscriptions left after the viewer stopped: %+v", subs)
	}
	if st := f.status(t, key); st.State == reconciler.StateActive {
		t.Fatalf("status after the viewer stopped: %+v", st)
	}
}

// A stop that comes while the subscribe is on its way to a slow media server still ends the
// subscription the media server makes: the viewer waits for the answer instead of abandoning a
// subscription it would never know of.
func TestViewerStopDuringASubscribeEndsIt(t *testing.T) {
	f := setup(t)
	v, stop := f.viewer(t)
	f.Sim.SetCommandDelay(2 * time.Second)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the subscribe under way", func() bool { return f.Sim.Pending() > 0 })
	stop()
	f.Sim.SetCommandDelay(0)
	simtest.WaitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if subs := f.viewerSubs(); len(subs) != 0 {
		t.Fatalf("subscriptions left after the viewer stopped: %+v", subs)
	}
	if st := f.status(t, key); st.State == reconciler.StateActive {
		t.Fatalf("status after the viewer stopped: %+v", st)
	}
}

// The intent turns undesired, or is deleted: the viewer unsubscribes, and its status says so instead
// of still naming the ended subscription as active.
func TestViewerStatusFollowsTheIntent(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed and active", func() bool {
		return len(f.viewerSubs()) == 1 && f.status(t, key).State == reconciler.StateActive
	})
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "unsubscribed and stopped", func() bool {
		return len(f.viewerSubs()) == 0 && f.status(t, key).State == reconciler.StateStopped
	})
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, true); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed and active again", func() bool {
		return len(f.viewerSubs()) == 1 && f.status(t, key).State == reconciler.StateActive
	})
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "unsubscribed and stopped after the delete", func() bool {
		return len(f.viewerSubs()) == 0 && f.status(t, key).State == reconciler.StateStopped
	})
}

// The source goes offline: the media server ends the subscription, and the viewer forgets it (it
// does not report a subscription that no longer exists), then subscribes on the new session.
func TestViewerFollowsTheSourceAcrossSessions(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed", func() bool { return len(f.viewerSubs()) == 1 })
	if err := f.Sim.SetOnline(src, false); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "pending, no subscription held", func() bool {
		_, held := v.Subscription(key)
		return !held && f.status(t, key).State == reconciler.StatePending
	})
	if err := f.Sim.SetOnline(src, true); err != nil {
		t.Fatal(err)
	}
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed on the new session", func() bool {
		subs := f.viewerSubs()
		id, held := v.Subscription(key)
		return len(subs) == 1 && subs[0].SessionID == sess && held && id == subs[0].ID
	})
}

// An intent the viewer waits for (its variant is not READY) and that is then deleted is reported
// stopped, not left pending.
func TestViewerPendingIntentDeleted(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	key, err := v.Want(t.Context(), src, "video", "browser-h264-1080p")
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "pending", func() bool { return f.status(t, key).State == reconciler.StatePending })
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "stopped", func() bool { return f.status(t, key).State == reconciler.StateStopped })
	if subs := f.viewerSubs(); len(subs) != 0 {
		t.Fatalf("subscriptions: %+v", subs)
	}
}

// A subscription intent without variant_id (optional in keeppeek.media-intent.v1) asks for the
// stream's own variant, which a subscribe without variant_id gets (SPEC section 12).
func TestViewerSubscribesToTheOriginalVariant(t *testing.T) {
	f := setup(t)
	f.viewer(t)
	const key = "intents/front-door-video"
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, coordinator.SubscribeIntent(src, "video")); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "subscribed to the original variant, active", func() bool {
		subs := f.viewerSubs()
		return len(subs) == 1 && subs[0].VariantID == sim.OriginalVariantID && f.status(t, key).State == reconciler.StateActive
	})
}

// A graceful stop on a slow media server ends every subscription the viewer holds and reports each
// stopped: every unsubscribe gets the time a command needs, instead of one deadline shared by them
// all that left the last ones unsent (and their statuses active).
func TestViewerStopEndsEverySubscriptionOnASlowMediaServer(t *testing.T) {
	f := setup(t)
	sess, _, _ := f.Sim.SessionID(src)
	const second = "browser-h264-480p"
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: second, OutputProfile: second, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	v, stop := f.viewer(t)
	var keys []string
	for _, vid := range []string{variant, second} {
		key, err := v.Want(t.Context(), src, "video", vid)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	const original = "intents/front-door-video"
	if _, err := f.Coord.PutIntent(t.Context(), ns, original, coordinator.SubscribeIntent(src, "video")); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, original)
	simtest.WaitFor(t, 10*time.Second, "three subscriptions, active", func() bool {
		for _, k := range keys {
			if f.status(t, k).State != reconciler.StateActive {
				return false
			}
		}
		return len(f.viewerSubs()) == len(keys)
	})
	f.Sim.SetCommandDelay(2500 * time.Millisecond)
	stop()
	f.Sim.SetCommandDelay(0)
	simtest.WaitFor(t, 20*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if subs := f.viewerSubs(); len(subs) != 0 {
		t.Errorf("subscriptions left after the viewer stopped: %+v", subs)
	}
	for _, k := range keys {
		if st := f.status(t, k); st.State != reconciler.StateStopped {
			t.Errorf("status of %s after the viewer stopped: %+v", k, st)
		}
	}
}

// A subscribe the media server answers only after the command's timeout still makes a subscription:
// the viewer, which retried, ends the one it gave up on when its late answer comes, instead of
// leaving it on the media server unknown to anyone.
func TestViewerEndsASubscriptionAnsweredTooLate(t *testing.T) {
	f := setup(t)
	v, _ := f.viewer(t)
	f.Sim.SetCommandDelay(capabilities.DefaultRequestTimeout + time.Second)
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the subscribe under way", func() bool { return f.Sim.Pending() > 0 })
	f.Sim.SetCommandDelay(0) // the first subscribe still waits out its delay; the retry does not
	simtest.WaitFor(t, 20*time.Second, "active", func() bool { return f.status(t, key).State == reconciler.StateActive })
	simtest.WaitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	id, _ := v.Subscription(key)
	simtest.WaitFor(t, 10*time.Second, "only the viewer's known subscription left", func() bool {
		subs := f.viewerSubs()
		return len(subs) == 1 && subs[0].ID == id
	})
}
