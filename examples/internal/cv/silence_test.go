package cv_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
)

// publishedBehindAGate publishes the variant on a simulator whose network g can cut.
func publishedBehindAGate(t *testing.T) (*fixture, *simtest.Gate, *sim.Sim) {
	e := simtest.Start(t, sim.Sources(src), "transcoder-a", "cv")
	g := &simtest.Gate{}
	s := simtest.ReplaceSim(t, e, sim.Sources(src), g)
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{Env: e, pub: pub}
	f.publish(t)
	return f, g, s
}

// A media server that goes silent and comes back with the same sessions still has the worker's
// subscription: the job keeps it (a stale snapshot says nothing of it) instead of forgetting it and
// subscribing a second time, which would leave the first one on the media server for good.
// Restarted (new sessions), it has ended the subscription: the job subscribes again, once.
func TestCVKeepsItsSubscriptionAcrossASilentMediaServer(t *testing.T) {
	f, g, s := publishedBehindAGate(t)
	w, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: "cv-1", LeaseTTL: 3 * time.Second,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Capabilities: simtest.FastTracker})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, w.Run)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(s)) == 1 })
	first := cvSubs(s)[0].ID

	// A tracker of the test's, with the worker's options, tells when the silence reads as stale.
	speak := g.Silence(t, f.Env)
	speak()
	waitFor(t, 10*time.Second, "the worker's subscribes answered", func() bool { return s.Pending() == 0 })
	if subs := cvSubs(s); len(subs) != 1 || subs[0].ID != first {
		t.Errorf("cv subscriptions after the silence: %+v, want only %s", subs, first)
	}
	if n := simtest.CountCommands(s, "cv", "subscribe"); n > 2 {
		t.Errorf("%d subscribes for one silence", n)
	}

	s = simtest.ReplaceSim(t, f.Env, sim.Sources(src), nil)
	f.publish(t)
	waitFor(t, 10*time.Second, "cv subscribed on the new session", func() bool { return len(cvSubs(s)) == 1 })
	if n := simtest.CountCommands(s, "cv", "subscribe"); n != 1 {
		t.Errorf("%d subscribes after the restart, want 1", n)
	}
}

// An intent withdrawn while the media server is silent: the unsubscribe reaches nobody, so the job
// keeps its subscription and its lease, and ends it once the media server answers again with the
// same session, which still has it; only then is the lease released.
func TestCVWithdrawnIntentEndsTheSubscriptionOnceTheMediaServerAnswers(t *testing.T) {
	f, g, s := publishedBehindAGate(t)
	ev := &events{}
	w, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: "cv-1", LeaseTTL: 3 * time.Second,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Capabilities: simtest.FastTracker,
		Events: func(kind, _, detail string) { ev.add(kind, detail) }})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, w.Run)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(s)) == 1 })

	speak := g.Silence(t, f.Env)
	if _, err := f.Coord.SetDesired(t.Context(), cvNS, intent, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the withdrawal acted on", func() bool {
		return ev.after("cv subscribed", "cv stopped") > 0 || ev.after("cv subscribed", "cv unsubscribe unanswered") > 0
	})
	if f.leaseGone(t, leaseKey) {
		t.Error("lease released while the subscription is still on the media server")
	}
	speak()
	waitFor(t, 10*time.Second, "the subscription ended once the media server answers", func() bool { return len(cvSubs(s)) == 0 })
	waitFor(t, 10*time.Second, "lease released", func() bool { return f.leaseGone(t, leaseKey) })
}

// While a withdrawn intent's unsubscribe goes unanswered, the worker sends it again every second,
// for as long as the media server stays silent. It warned, and told the event "cv unsubscribe
// unanswered", at every one of them: a log and a narration buried under one line a second. It warns
// and tells once per outage, logs the repeats at Debug, and tells at Info when the media server
// answers again.
func TestCVWarnsOncePerUnansweredUnsubscribe(t *testing.T) {
	f, g, s := publishedBehindAGate(t)
	ev := &events{}
	tap := &simtest.LogTap{}
	w, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: "cv-1", LeaseTTL: 3 * time.Second,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(tap), Capabilities: simtest.FastTracker,
		Events: func(kind, _, detail string) { ev.add(kind, detail) }})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, w.Run)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(s)) == 1 })

	speak := g.Silence(t, f.Env)
	if _, err := f.Coord.SetDesired(t.Context(), cvNS, intent, false); err != nil {
		t.Fatal(err)
	}
	if !simtest.Within(15*time.Second, func() bool { return tap.Count("unsubscribe", slog.LevelDebug) >= 3 }) {
		t.Fatalf("three unanswered unsubscribes: not within 15s; the worker logged:\n%s", tap)
	}
	if n := tap.Count("unsubscribe", slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings for one unanswered unsubscribe, want 1", n)
	}
	if n := ev.after("cv subscribed", "cv unsubscribe unanswered"); n != 1 {
		t.Errorf("%d events \"cv unsubscribe unanswered\" for one outage, want 1", n)
	}
	speak()
	waitFor(t, 10*time.Second, "the subscription ended once the media server answers", func() bool { return len(cvSubs(s)) == 0 })
	waitFor(t, 10*time.Second, "the recovery told", func() bool { return tap.Count("unsubscribe answered again", slog.LevelInfo) == 1 })
}
