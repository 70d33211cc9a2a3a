package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// A principal that heartbeats more worker ids than max_workers_per_principal gets the first ones
// kept and the rest refused (counted "refused"), while another principal's new worker still gets its
// entry: one principal cannot fill system and keep every other principal's workers out.
func TestHeartbeatsPastWorkersBoundAreRefused(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxWorkersPerPrincipal = 2
	env := testenv.Start(t, testenv.Options{Bounds: &b, WatchSweep: time.Hour}) // WatchSweep gives the Env its metrics
	coord := env.Connect(t, "coordinator")
	alice := env.Connect(t, "alice")
	bob := env.Connect(t, "bob")
	beat := func(nc interface {
		Publish(string, []byte) error
		Flush() error
	}, principal, id string) {
		t.Helper()
		body := fmt.Sprintf(`{"worker_id":%q,"service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`, id)
		if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, principal, id), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	has := func(principal, id string) bool {
		return request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, wire.WorkerKey(principal, id))).OK
	}
	// One at a time, so which ones are kept is known.
	for _, id := range []string{"a1", "a2"} {
		beat(alice, "alice", id)
		waitUntil(t, "alice's "+id+" is kept", func() bool { return has("alice", id) })
	}
	beat(alice, "alice", "a3")
	waitUntil(t, "alice's third worker is refused", func() bool {
		return counter(t, env.Metrics.Heartbeats.WithLabelValues("refused")) == 1
	})
	if has("alice", "a3") {
		t.Fatal("alice's third worker has an entry past max_workers_per_principal 2")
	}
	beat(bob, "bob", "b1")
	waitUntil(t, "bob's worker is kept", func() bool { return has("bob", "b1") })
	// Alice's kept workers still heartbeat as keepalives.
	beat(alice, "alice", "a1")
	waitUntil(t, "alice's keepalive is accepted", func() bool {
		return counter(t, env.Metrics.Heartbeats.WithLabelValues("accepted")) == 4
	})
	if n := counter(t, env.Metrics.Heartbeats.WithLabelValues("refused")); n != 1 {
		t.Fatalf("%v heartbeats refused, want 1", n)
	}
	l := request(t, coord, "coordinator", wire.OpInfo, `{}`)
	if !l.OK || l.Bounds == nil || l.Bounds.MaxWorkersPerPrincipal != 2 {
		t.Fatalf("info does not show max_workers_per_principal 2: %+v", l.Bounds)
	}
}
