package view_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// wantOriginal has the viewer want the stream's own variant, which a restarted media server has at
// once (no publisher needed), and waits for it to be active.
func (f *fixture) wantOriginal(t *testing.T) (key, subID string) {
	t.Helper()
	key = "intents/front-door-video"
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, coordinator.SubscribeIntent(src, "video")); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "active", func() bool {
		return len(f.viewerSubs()) == 1 && f.status(t, key).State == reconciler.StateActive
	})
	return key, f.viewerSubs()[0].ID
}

// awaitSettled waits, for at most d, until the media server has no command waiting, exactly one of
// the viewer's subscriptions runs, and the status of the intent key names it active.
func (f *fixture) awaitSettled(t *testing.T, key string, d time.Duration) {
	t.Helper()
	simtest.WaitFor(t, d, "settled on one subscription", func() bool {
		st := f.status(t, key)
		subs := f.viewerSubs()
		return f.Sim.Pending() == 0 && len(subs) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	})
}

// A media server restarted (its subscriptions gone) that answers slowly, within the command
// timeout: while the viewer ends the old subscription and makes a new one, its status does not say
// the old one is active: the media server no longer has it.
func TestViewerStatusWhileResubscribingOnASlowRestartedMediaServer(t *testing.T) {
	f := setup(t)
	f.viewer(t)
	key, old := f.wantOriginal(t)
	s := simtest.RestartSlow(t, f.Env, sim.Sources(src), 2*time.Second)
	simtest.WaitFor(t, 10*time.Second, "the old subscription's unsubscribe answered, the new subscribe under way", func() bool {
		return simtest.CountCommands(s, user, "unsubscribe") >= 1 && s.Pending() > 0
	})
	if st := f.status(t, key); st.State == reconciler.StateActive && st.SubscriptionID == old {
		t.Errorf("status while resubscribing: %+v, names %s active, which the restarted media server does not have", st, old)
	}
	simtest.WaitFor(t, 10*time.Second, "active again", func() bool {
		st := f.status(t, key)
		subs := f.viewerSubs()
		return len(subs) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	})
}

// A restarted media server that answers only after the command timeout, for a while: the viewer's
// status does not go on naming the gone subscription active meanwhile, and once the media server
// answers in time again, exactly one subscription runs and the status names it.
func TestViewerStatusOnARestartedMediaServerAnsweringLate(t *testing.T) {
	f := setup(t)
	f.viewer(t)
	key, old := f.wantOriginal(t)
	s := simtest.RestartSlow(t, f.Env, sim.Sources(src), capabilities.DefaultRequestTimeout+2*time.Second)
	simtest.WaitFor(t, 10*time.Second, "a command under way", func() bool { return s.Pending() > 0 })
	simtest.WaitFor(t, capabilities.DefaultRequestTimeout+3*time.Second, "the status no longer names the gone subscription active", func() bool {
		st := f.status(t, key)
		return !(st.State == reconciler.StateActive && st.SubscriptionID == old)
	})
	s.SetCommandDelay(0)
	f.awaitSettled(t, key, 30*time.Second)
}

// The media server restarts while the viewer's subscribe waits in its queue: the restart drops it
// unanswered. The viewer subscribes on the restarted media server: exactly one subscription, named
// by an active status, and nothing of the dropped command lingers in the process (goleak, at the
// end of the package's tests).
func TestViewerMediaServerRestartedMidSubscribe(t *testing.T) {
	f := setup(t)
	f.viewer(t)
	f.Sim.SetCommandDelay(time.Minute)
	const key = "intents/front-door-video"
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, coordinator.SubscribeIntent(src, "video")); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the subscribe under way", func() bool { return f.Sim.Pending() > 0 })
	simtest.ReplaceSim(t, f.Env, sim.Sources(src), nil)
	f.awaitSettled(t, key, 30*time.Second)
}

// The media server restarts while the unsubscribe of a withdrawn intent waits in its queue: the
// restart drops it unanswered, and the restarted media server has no subscription. The status does
// not say active meanwhile, and then says stopped; no subscription is left.
func TestViewerMediaServerRestartedMidUnsubscribe(t *testing.T) {
	f := setup(t)
	f.viewer(t)
	key, _ := f.wantOriginal(t)
	f.Sim.SetCommandDelay(time.Minute)
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the unsubscribe under way", func() bool { return f.Sim.Pending() > 0 })
	if st := f.status(t, key); st.State == reconciler.StateActive {
		t.Errorf("status while the withdrawn intent's subscription is ended: %+v", st)
	}
	s := simtest.ReplaceSim(t, f.Env, sim.Sources(src), nil)
	simtest.WaitFor(t, 30*time.Second, "stopped", func() bool { return f.status(t, key).State == reconciler.StateStopped })
	if subs := f.viewerSubs(); len(subs) != 0 || s.Pending() != 0 {
		t.Errorf("subscriptions left: %+v (%d commands pending)", subs, s.Pending())
	}
}
