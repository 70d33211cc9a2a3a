package view_test

import (
	"context"
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

// killableViewer runs the viewer viewer-1; kill closes its NATS connection: nothing more of it reaches
// the servers (no unsubscribe, no "stopped"), as when its process is killed.
func (f *fixture) killableViewer(t *testing.T) (v *view.Viewer, kill func()) {
	t.Helper()
	nc := f.Connect(t, user)
	v, err := view.New(view.Config{Conn: nc, Principal: user, WorkerID: "viewer-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return v, func() { nc.Close(); cancel(); <-done }
}

// settledOn waits until the viewer has exactly one subscription on the media server, to variant
// vid, other than old (an earlier process's), and its status names it active; it returns its id.
func (f *fixture) settledOn(t *testing.T, key, vid, old string) string {
	t.Helper()
	var id string
	ok := simtest.Within(15*time.Second, func() bool {
		subs, st := f.viewerSubs(), f.status(t, key)
		if len(subs) != 1 || subs[0].ID == old || subs[0].VariantID != vid || st.State != reconciler.StateActive || st.SubscriptionID != subs[0].ID {
			return false
		}
		id = subs[0].ID
		return true
	})
	if !ok {
		t.Fatalf("not settled on one new subscription to %s: subscriptions %+v, status %+v", vid, f.viewerSubs(), f.status(t, key))
	}
	return id
}

// settledStopped waits until the viewer has no subscription and the intent's status says stopped.
func (f *fixture) settledStopped(t *testing.T, key string) {
	t.Helper()
	ok := simtest.Within(15*time.Second, func() bool {
		return len(f.viewerSubs()) == 0 && f.status(t, key).State == reconciler.StateStopped
	})
	if !ok {
		t.Fatalf("not settled stopped: subscriptions %+v, status %+v", f.viewerSubs(), f.status(t, key))
	}
}

// The viewer is killed (its subscription stays on the media server, its status says what it last
// said), the intent stays, is withdrawn, deleted or pointed at another variant, and the viewer is
// restarted with the same worker id. It subscribed beside the subscription its earlier process left
// (two on the media server), and for an intent withdrawn or deleted it left that subscription, and a
// status naming it active, for good.
func TestViewerRestartedAfterAKill(t *testing.T) {
	const other = "browser-h264-480p"
	for _, c := range []struct {
		name   string
		change func(t *testing.T, f *fixture, key string)
		want   string // the variant subscribed to in the end; "" none
	}{
		{"Stays", func(*testing.T, *fixture, string) {}, variant},
		{"Withdrawn", func(t *testing.T, f *fixture, key string) {
			if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"Deleted", func(t *testing.T, f *fixture, key string) {
			if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"VariantChanged", func(t *testing.T, f *fixture, key string) {
			sess, _, _ := f.Sim.SessionID(src)
			if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
				VariantID: other, OutputProfile: other, RecordingMode: "disabled"}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Coord.UpdateIntent(t.Context(), ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
				cur.VariantID = other
				return cur, nil
			}); err != nil {
				t.Fatal(err)
			}
		}, other},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			v, kill := f.killableViewer(t)
			key, err := v.Want(t.Context(), src, "video", variant)
			if err != nil {
				t.Fatal(err)
			}
			first := f.settledOn(t, key, variant, "")
			kill()
			c.change(t, f, key)
			f.viewer(t)
			if c.want == "" {
				f.settledStopped(t, key)
			} else {
				// A new one: the restarted viewer cannot tell the one its earlier process left from
				// one made on a session gone since, and ends it.
				f.settledOn(t, key, c.want, first)
			}
		})
	}
}

// The viewer is killed while it waits for its variant (status pending), the intent is withdrawn, and
// the viewer restarted: the status said, for good, that the viewer still waited.
func TestViewerRestartedAfterAKillWhilePending(t *testing.T) {
	f := setup(t)
	v, kill := f.killableViewer(t)
	key, err := v.Want(t.Context(), src, "video", "browser-h264-1080p")
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "pending", func() bool { return f.status(t, key).State == reconciler.StatePending })
	kill()
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	f.viewer(t)
	f.settledStopped(t, key)
}

// The viewer is stopped while the media server is silent: its unsubscribe reaches nobody, and the
// media server, back with the same session, still has the subscription. The viewer reported it
// stopped all the same, so the restarted viewer knew nothing of it and subscribed beside it.
func TestViewerStoppedWhileTheMediaServerIsSilent(t *testing.T) {
	e := simtest.Start(t, sim.Sources(src), "transcoder-a", user)
	g := &simtest.Gate{}
	s := simtest.ReplaceSim(t, e, sim.Sources(src), g)
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{Env: e, pub: pub}
	sess, _, _ := s.SessionID(src)
	if _, err := pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	run := func() (*view.Viewer, func()) {
		v, err := view.New(view.Config{Conn: f.Connect(t, user), Principal: user, WorkerID: "viewer-1",
			Logger: slog.New(slog.DiscardHandler), Capabilities: simtest.FastTracker})
		if err != nil {
			t.Fatal(err)
		}
		return v, simtest.Run(t, v.Run)
	}
	v, stop := run()
	key, err := v.Want(t.Context(), src, "video", variant)
	if err != nil {
		t.Fatal(err)
	}
	first := f.settledOn(t, key, variant, "")
	speak := g.Silence(t, f.Env)
	stop()
	if st := f.status(t, key); st.State == reconciler.StateStopped {
		t.Errorf("status %+v while the subscription may still be on the media server", st)
	}
	speak()
	run()
	f.settledOn(t, key, variant, first)
}
