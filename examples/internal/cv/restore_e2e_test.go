package cv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// A holder killed before it saw its intent withdrawn leaves a status that names its subscription as
// active; a backup taken then holds that status next to the withdrawn intent. Another worker ends the
// subscription and says stopped, and the store moves on. Restored from the backup (a new epoch), the
// store again says the dead holder's subscription is active, for the same intent at the same
// revision: the live worker must look again, in the new epoch, and say stopped, not take the
// revision it settled in the old epoch for the restored one (the status would say "active" for a
// withdrawn intent for good).
func TestCVStatusTrueAfterARestoreToALeftover(t *testing.T) {
	const ttl = time.Second
	s, connect, sm, admin, co := startStatedEnv(t, false)
	tl := &timeline{}
	run := func(id string) (kill func()) {
		nc := connect("cv")
		w, err := cv.New(cv.Config{Conn: nc, Principal: "cv", WorkerID: id, LeaseTTL: ttl, EventEvery: 50 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler), Events: func(kind, _, _ string) { tl.add(id + " " + kind) }})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return func() { nc.Close(); cancel(); <-done }
	}
	status := func() (reconciler.ObservedStatus, string) {
		var st reconciler.ObservedStatus
		e, err := admin.Get(t.Context(), cvNS, "status/front-door-people")
		if err != nil {
			return st, err.Error()
		}
		_ = json.Unmarshal(e.Document, &st)
		return st, string(e.Document)
	}
	in := coordinator.SubscribeIntent(src, "video")
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	if _, err := co.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
	kill := run("cv-1")
	waitFor(t, 10*time.Second, "cv-1 runs the job", func() bool {
		st, _ := status()
		subs := cvSubs(sm)
		return st.State == reconciler.StateActive && len(subs) == 1 && st.SubscriptionID == subs[0].ID
	})
	kill() // before it sees the withdrawal: its status and subscription stay
	in.Desired = false
	withdrawn, err := co.PutIntent(t.Context(), cvNS, intent, in)
	if err != nil {
		t.Fatal(err)
	}
	backup := s.OfflineBackup() // the withdrawn intent, and cv-1's "active"
	reconnected := func() {
		natstest.Poll(t, 10*time.Second, "the coordinator reconnected", func() (bool, string) {
			return admin.Conn().IsConnected(), admin.Conn().Status().String()
		})
	}
	reconnected()
	if st, doc := status(); st.State != reconciler.StateActive {
		t.Fatalf("status in the backup: %s, want cv-1's active", doc)
	}
	run("cv-2")
	waitFor(t, time.Minute, "cv-2 ends what cv-1 left", func() bool {
		st, _ := status()
		return st.State == reconciler.StateStopped && len(cvSubs(sm)) == 0
	})
	tl.add("STEP restore")
	s.Restore(backup)
	reconnected()
	e, err := admin.Get(t.Context(), cvNS, intent)
	if err != nil || e.Revision != withdrawn.Revision {
		t.Fatalf("the restored intent: %v %v, want it at revision %d", e.String(), err, withdrawn.Revision)
	}
	var last string
	if !simtest.Within(time.Minute, func() bool {
		var st reconciler.ObservedStatus
		st, last = status()
		return st.State == reconciler.StateStopped && len(cvSubs(sm)) == 0
	}) {
		t.Fatalf("after the restore the withdrawn intent's status still says %s\nevents:\n%s", last, fmt.Sprint(tl))
	}
	// The stopped is written under the lease, which is released after it: let go within a bound.
	var leaseErr error
	if !simtest.Within(10*time.Second, func() bool {
		_, leaseErr = admin.Get(t.Context(), cvNS, leaseKey)
		return wireNotFound(leaseErr)
	}) {
		t.Fatalf("the intent's lease after the restore: %v, want none", leaseErr)
	}
}

func wireNotFound(err error) bool { return wire.CodeOf(err) == wire.CodeNotFound }
