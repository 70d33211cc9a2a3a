package cv_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// killableCV runs a CV worker with a 2 s lease; kill closes its NATS connection: nothing more of it
// reaches the servers, and its lease is not released (a process killed).
func (f *fixture) killableCV(t *testing.T, id string) (kill func()) {
	t.Helper()
	nc := f.Connect(t, "cv")
	w, err := cv.New(cv.Config{Conn: nc, Principal: "cv", WorkerID: id, LeaseTTL: 2 * time.Second,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() { nc.Close(); cancel(); <-done }
}

// leaseHolder is the holder the intent's lease names, "" when there is none.
func (f *fixture) leaseHolder(t *testing.T) string {
	e, err := f.Admin.Get(t.Context(), cvNS, leaseKey)
	if err != nil {
		return ""
	}
	var d wire.LeaseDocument
	_ = json.Unmarshal(e.Document, &d)
	return d.Holder
}

// cvStatus is the intent's observed status (zero when there is none).
func (f *fixture) cvStatus(t *testing.T) reconciler.ObservedStatus {
	var st reconciler.ObservedStatus
	if e, err := f.Admin.Get(t.Context(), cvNS, "status/front-door-people"); err == nil {
		_ = json.Unmarshal(e.Document, &st)
	}
	return st
}

// killedActiveHolder runs cv-1 until it is subscribed, then kills it.
func killedActiveHolder(t *testing.T, f *fixture) {
	t.Helper()
	kill := f.killableCV(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv-1 subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 && f.leaseHolder(t) == "cv-1" })
	kill()
}

// settledAlone waits until the media server has exactly one subscription of cv, other than old (an
// earlier process's), made by the lease holder want, which the status names as active: the job runs
// once, under its lease.
func settledAlone(t *testing.T, f *fixture, want, old string) {
	t.Helper()
	ok := simtest.Within(15*time.Second, func() bool {
		subs, st := cvSubs(f.Sim), f.cvStatus(t)
		return len(subs) == 1 && subs[0].ID != old && f.leaseHolder(t) == want && st.State == reconciler.StateActive &&
			st.Holder == want && st.SubscriptionID == subs[0].ID
	})
	if !ok {
		t.Fatalf("not settled on one subscription held by %s: subscriptions %+v, lease holder %q, status %+v",
			want, cvSubs(f.Sim), f.leaseHolder(t), f.cvStatus(t))
	}
}

// settledStopped waits until nothing of the intent is left: no subscription of cv, no lease, and a
// status that does not say anyone is at work on it.
func settledStopped(t *testing.T, f *fixture) {
	t.Helper()
	ok := simtest.Within(15*time.Second, func() bool {
		st := f.cvStatus(t)
		return len(cvSubs(f.Sim)) == 0 && f.leaseHolder(t) == "" && (st.State == "" || st.State == reconciler.StateStopped)
	})
	if !ok {
		t.Fatalf("not settled stopped: subscriptions %+v, lease holder %q, status %+v", cvSubs(f.Sim), f.leaseHolder(t), f.cvStatus(t))
	}
}

// The holder is killed while subscribed (the media server keeps a subscription whose subscriber
// died), and then the intent stays, is withdrawn, deleted or given another model, before or after
// the dead holder's lease expires. The dead holder's subscription was named nowhere: the standby
// subscribed beside it, and a withdrawn or deleted intent left it on the media server for good.
func TestCVKilledHolder(t *testing.T) {
	for _, c := range []struct {
		name string
		// standbyFirst starts the standby before the change (it sees it while the dead holder's lease
		// is still live); otherwise the change comes once that lease has expired, and the standby
		// starts after it.
		standbyFirst bool
		change       func(t *testing.T, f *fixture)
		stopped      bool // the intent is no longer wanted
	}{
		{"Stays", true, func(*testing.T, *fixture) {}, false},
		{"WithdrawnBeforeExpiry", true, withdraw, true},
		{"WithdrawnAfterExpiry", false, withdraw, true},
		{"DeletedBeforeExpiry", true, deleteIntent, true},
		{"ModelChangedBeforeExpiry", true, func(t *testing.T, f *fixture) { f.modelIntent(t, "car-detector") }, false},
		{"ModelRemovedAfterExpiry", false, func(t *testing.T, f *fixture) {
			in := coordinator.SubscribeIntent(src, "video")
			in.VariantID = variant
			in.Parameters = map[string]json.RawMessage{"cv-a": nil} // nil removes the service's entry
			if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			f.publish(t)
			killedActiveHolder(t, f)
			if c.standbyFirst {
				f.runCV(t, "cv-2", 2*time.Second)
			} else {
				waitFor(t, 10*time.Second, "the dead holder's lease expired", func() bool { return f.leaseHolder(t) == "" })
			}
			c.change(t, f)
			if !c.standbyFirst {
				f.runCV(t, "cv-2", 2*time.Second)
			}
			if c.stopped {
				settledStopped(t, f)
			} else {
				settledAlone(t, f, "cv-2", "")
			}
		})
	}
}

func withdraw(t *testing.T, f *fixture) {
	t.Helper()
	if _, err := f.Coord.SetDesired(t.Context(), cvNS, intent, false); err != nil {
		t.Fatal(err)
	}
}

func deleteIntent(t *testing.T, f *fixture) {
	t.Helper()
	if _, err := f.Coord.DeleteIntent(t.Context(), cvNS, intent, 0); err != nil {
		t.Fatal(err)
	}
}

// A worker killed while subscribed and restarted with the same worker id: it ends the subscription
// its earlier process left before it subscribes again (it had two on the media server); and when
// the intent was deleted meanwhile, it ends that subscription although no intent names it any more.
func TestCVRestartedWithTheSameID(t *testing.T) {
	t.Run("Desired", func(t *testing.T) {
		f := setup(t)
		f.publish(t)
		killedActiveHolder(t, f)
		old := cvSubs(f.Sim)[0].ID
		f.runCV(t, "cv-1", 2*time.Second)
		settledAlone(t, f, "cv-1", old)
	})
	t.Run("Deleted", func(t *testing.T) {
		f := setup(t)
		f.publish(t)
		killedActiveHolder(t, f)
		deleteIntent(t, f)
		f.runCV(t, "cv-1", 2*time.Second)
		settledStopped(t, f)
	})
}

// Two workers started at once on one intent: one holds it, one subscription.
func TestCVTwoWorkersStartedAtOnce(t *testing.T) {
	f := setup(t)
	f.publish(t)
	f.modelIntent(t, "person-detector")
	f.runCV(t, "cv-1", 2*time.Second)
	f.runCV(t, "cv-2", 2*time.Second)
	waitFor(t, 10*time.Second, "one holder", func() bool { return f.leaseHolder(t) != "" })
	settledAlone(t, f, f.leaseHolder(t), "")
}

// The holder dies while pending (the variant's publisher went away after it subscribed: it waits,
// holding the lease), and then the intent is withdrawn: its status does not go on saying that the
// dead worker waits.
func TestCVKilledPendingHolderThenWithdrawn(t *testing.T) {
	f := setup(t)
	f.publish(t)
	kill := f.killableCV(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv-1 subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
	if err := f.Sim.SetOnline(src, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv-1 pending", func() bool {
		st := f.cvStatus(t)
		return st.State == reconciler.StatePending && st.Holder == "cv-1"
	})
	kill()
	f.runCV(t, "cv-2", 2*time.Second)
	withdraw(t, f)
	settledStopped(t, f)
}

// The holder is stopped gracefully while the media server is silent: its unsubscribe reaches nobody,
// and the media server, back with the same session, still has the subscription. The status went on
// naming nothing (it said nothing at all), and the standby subscribed beside it; then it said
// "active" for a subscription whose worker had gone: it says pending, naming it.
func TestCVStoppedWhileTheMediaServerIsSilent(t *testing.T) {
	f, g, s := publishedBehindAGate(t)
	opts := func(id string) cv.Config {
		return cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: id, LeaseTTL: 2 * time.Second,
			EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Capabilities: simtest.FastTracker}
	}
	w1, err := cv.New(opts("cv-1"))
	if err != nil {
		t.Fatal(err)
	}
	stop1 := simtest.Run(t, w1.Run)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv-1 subscribed", func() bool { return len(cvSubs(s)) == 1 })
	sub := cvSubs(s)[0].ID
	speak := g.Silence(t, f.Env)
	stop1()
	// What cv-1 could not end is named, and not said to run under a worker that has gone.
	if st := f.cvStatus(t); st.SubscriptionID != sub || st.State != reconciler.StatePending {
		t.Fatalf("status after a stop the media server did not hear: %+v, want pending naming %s", st, sub)
	}
	w2, err := cv.New(opts("cv-2"))
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, w2.Run)
	speak()
	settledAlone(t, f, "cv-2", "")
}

// The holder dies, and the media server restarts (new sessions: the dead holder's subscription is
// gone with the old one): the standby subscribes once on the new session.
func TestCVKilledHolderThenMediaServerRestarted(t *testing.T) {
	f := setup(t)
	f.publish(t)
	killedActiveHolder(t, f)
	f.runCV(t, "cv-2", 2*time.Second)
	f.Sim = simtest.ReplaceSim(t, f.Env, sim.Sources(src), nil)
	f.publish(t)
	settledAlone(t, f, "cv-2", "")
}

// The holder dies, the media server goes silent, and the intent is withdrawn: the dead holder's
// subscription is ended once the media server answers again (back with the same session, it still
// has it), not forgotten at the first unanswered unsubscribe.
func TestCVKilledHolderWithdrawnWhileTheMediaServerIsSilent(t *testing.T) {
	f, g, _ := publishedBehindAGate(t)
	killedActiveHolder(t, f)
	f.runCV(t, "cv-2", 2*time.Second)
	speak := g.Silence(t, f.Env)
	withdraw(t, f)
	waitFor(t, 10*time.Second, "the dead holder's lease expired", func() bool { return f.leaseHolder(t) != "cv-1" })
	speak()
	settledStopped(t, f)
}
