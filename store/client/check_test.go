package client

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// An idle cache's liveness checks acknowledge one past its last applied update, which the server
// refuses (INVALID_ARGUMENT: above the highest sent) while nothing was lost: a healthy watch is kept,
// never resynced by its checks, and the updates that follow are applied as updates. (A check that
// finds an update sent and never received resyncs: cmd/stated's cluster test
// TestE2EClusterCacheFindsAnUpdateLostOnACutRoute.)
func TestCacheIdleChecksKeepAHealthyWatch(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{admin, alice, bob}, WatchSweep: time.Hour})
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: r.handlers(), CheckInterval: 5 * time.Millisecond})
	r.awaitResync(t)
	refused := env.Metrics.Requests.WithLabelValues(string(wire.OpAck), string(wire.CodeInvalidArgument))
	count := func(c prometheus.Counter) float64 {
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	// Checks after the snapshot, then after an update: each has a different last applied sequence.
	awaitChecks := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(testTimeout)
		for count(refused) < n {
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %v refused acks (liveness checks) within %v", n, testTimeout)
			}
			time.Sleep(5 * time.Millisecond) // a metric signals nothing: poll it
		}
	}
	awaitChecks(3)
	e, err := c.Put(ctx, preference(ns, "k", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	awaitChecks(count(refused) + 3)
	if n := k.Resyncs(); n != 0 || !k.Following() {
		t.Fatalf("an idle, healthy cache resynced %d times by its checks (following: %v)", n, k.Following())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) != 2 || r.events[1].kind != "put" {
		t.Fatalf("handler calls %+v, want the snapshot and one put", r.events)
	}
}
