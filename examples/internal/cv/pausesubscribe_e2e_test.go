package cv_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// The holder's state server hangs (SIGSTOP; NATS is external, so the media server still answers)
// just as the source it waits for comes back online. Before it subscribes it reports "subscribing",
// a write that hangs until the lease is lost. The subscribe must not be sent then: the lease is
// gone, and the job would run beside the next holder's. It was sent, since the worker checked its
// lease before that write only; the job then ran under no lease until the worker let it go.
func TestCVSubscribesNothingOnceItsLeaseIsLost(t *testing.T) {
	env := newStatedEnv(t, true)
	s, sm, admin := env.s, env.sim, env.admin
	logs := &simtest.LogTap{}
	env.run(t, cv.Config{Conn: env.connect("cv"), Principal: "cv", WorkerID: "cv-1", LeaseTTL: time.Second,
		Capabilities: simtest.FastTracker, Logger: slog.New(logs)})
	status := func() reconciler.ObservedStatus {
		var st reconciler.ObservedStatus
		if e, err := admin.Get(t.Context(), cvNS, "status/front-door-people"); err == nil {
			_ = json.Unmarshal(e.Document, &st)
		}
		return st
	}
	running := func() bool {
		subs := cvSubs(sm)
		st := status()
		return len(subs) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID
	}
	waitFor(t, 10*time.Second, "the job running", running)
	if err := sm.SetOnline(src, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the job waiting for its source, and saying so", func() bool {
		return len(cvSubs(sm)) == 0 && status().State == reconciler.StatePending
	})
	subscribes := simtest.CountCommands(sm, "cv", "subscribe")

	s.Pause()
	if err := sm.SetOnline(src, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the report before the subscribe failed", func() bool {
		return logs.Count("status not written", slog.LevelDebug) > 0
	})
	s.Resume()
	waitFor(t, 30*time.Second, "the job running again", running)
	if n := simtest.CountCommands(sm, "cv", "subscribe") - subscribes; n != 1 {
		t.Fatalf("%d subscribes since the state server hung, want the one made under the lease claimed again\nlogs:\n%s", n, logs)
	}
}
