package cv_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// originalIntent is an intent on the stream's own variant, which a restarted media server has at
// once (no publisher needed).
func (f *fixture) originalIntent(t *testing.T) {
	t.Helper()
	in := coordinator.SubscribeIntent(src, "video")
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
}

// awaitActive waits until one CV subscription runs and the status says active, and returns the
// subscription's id.
func (f *fixture) awaitActive(t *testing.T) string {
	t.Helper()
	waitFor(t, 10*time.Second, "cv active", func() bool {
		return len(cvSubs(f.Sim)) == 1 && f.cvStatus(t).State == reconciler.StateActive
	})
	return cvSubs(f.Sim)[0].ID
}

// awaitSettled waits, for at most d, until the media server has no command waiting, exactly one CV
// subscription runs, and the status names it active.
func (f *fixture) awaitSettled(t *testing.T, d time.Duration) {
	t.Helper()
	waitFor(t, d, "settled on one subscription", func() bool {
		st := f.cvStatus(t)
		subs := cvSubs(f.Sim)
		return f.Sim.Pending() == 0 && len(subs) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	})
}

// A media server restarted (its subscriptions gone) that answers slowly, within the command
// timeout: while the worker ends the old subscription and makes a new one, its status does not say
// the old one is active: the media server no longer has it.
func TestCVStatusWhileResubscribingOnASlowRestartedMediaServer(t *testing.T) {
	f := setup(t)
	f.cvWorker(t, "cv-1")
	f.originalIntent(t)
	old := f.awaitActive(t)
	s := simtest.RestartSlow(t, f.Env, sim.Sources(src), 2*time.Second)
	waitFor(t, 10*time.Second, "the old subscription's unsubscribe answered, the new subscribe under way", func() bool {
		return simtest.CountCommands(s, "cv", "unsubscribe") >= 1 && s.Pending() > 0
	})
	if st := f.cvStatus(t); st.State == reconciler.StateActive && st.SubscriptionID == old {
		t.Errorf("status while resubscribing: %+v, names %s active, which the restarted media server does not have", st, old)
	}
	waitFor(t, 10*time.Second, "cv active again", func() bool {
		st := f.cvStatus(t)
		return len(cvSubs(s)) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == cvSubs(s)[0].ID
	})
}

// A restarted media server that answers only after the command timeout, for a while: the worker's
// status does not go on naming the gone subscription active meanwhile, and once the media server
// answers in time again, exactly one subscription runs and the status names it.
func TestCVStatusOnARestartedMediaServerAnsweringLate(t *testing.T) {
	f := setup(t)
	f.cvWorker(t, "cv-1")
	f.originalIntent(t)
	old := f.awaitActive(t)
	s := simtest.RestartSlow(t, f.Env, sim.Sources(src), capabilities.DefaultRequestTimeout+2*time.Second)
	waitFor(t, 10*time.Second, "a command under way", func() bool { return s.Pending() > 0 })
	waitFor(t, capabilities.DefaultRequestTimeout+3*time.Second, "the status no longer names the gone subscription active", func() bool {
		st := f.cvStatus(t)
		return !(st.State == reconciler.StateActive && st.SubscriptionID == old)
	})
	s.SetCommandDelay(0)
	f.awaitSettled(t, 30*time.Second)
}

// The media server restarts while the worker's subscribe waits in its queue: the restart drops it
// unanswered. The worker subscribes on the restarted media server: exactly one subscription, named
// by an active status, and nothing of the dropped command lingers in the process (goleak, at the
// end of the package's tests).
func TestCVMediaServerRestartedMidSubscribe(t *testing.T) {
	f := setup(t)
	f.cvWorker(t, "cv-1")
	f.Sim.SetCommandDelay(time.Minute)
	f.originalIntent(t)
	waitFor(t, 10*time.Second, "the subscribe under way", func() bool { return f.Sim.Pending() > 0 })
	simtest.ReplaceSim(t, f.Env, sim.Sources(src), nil)
	f.awaitSettled(t, 30*time.Second)
}

// The media server restarts while the unsubscribe of a withdrawn intent waits in its queue: the
// restart drops it unanswered, and the restarted media server has no subscription. The worker ends
// the job once: the status says stopped, the lease is released, no subscription is left.
func TestCVMediaServerRestartedMidUnsubscribe(t *testing.T) {
	f := setup(t)
	ev := f.cvWorker(t, "cv-1")
	f.originalIntent(t)
	f.awaitActive(t)
	f.Sim.SetCommandDelay(time.Minute)
	if _, err := f.Coord.SetDesired(t.Context(), cvNS, intent, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the unsubscribe under way", func() bool { return f.Sim.Pending() > 0 })
	if st := f.cvStatus(t); st.State == reconciler.StateActive {
		t.Errorf("status while the withdrawn intent's subscription is ended: %+v", st)
	}
	s := simtest.ReplaceSim(t, f.Env, sim.Sources(src), nil)
	waitFor(t, 30*time.Second, "stopped", func() bool {
		return f.cvStatus(t).State == reconciler.StateStopped && f.leaseGone(t, leaseKey)
	})
	if subs := cvSubs(s); len(subs) != 0 {
		t.Errorf("subscriptions left: %+v", subs)
	}
	if n := ev.after("cv subscribed", "cv stopped"); n != 1 {
		t.Errorf("the job ended %d times, want once", n)
	}
}
