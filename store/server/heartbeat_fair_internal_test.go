package server

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// One principal that starts many workers at once (or forges many worker ids) must not have another
// principal's heartbeats dropped (issue 3: a client never stalls another; SPEC section 11: a worker
// that heartbeats is kept). Heartbeats wait to be handled on lanes chosen by a hash of the worker's
// subject; alice's workers here all hash to the lane of bob's, and each first heartbeat is a put (a
// commit), so her 600 first heartbeats are handed over long before they are handled. Bob's one
// heartbeat, behind them, must still be handled, and soon: after a few of alice's, not after all.
func TestHeartbeatsOfManyWorkersNeverCrowdOutAnotherPrincipal(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	s := startServer(t, Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "alice"}, {ID: "bob"}},
		Metrics: metrics})
	defer func() { _ = s.Stop(context.Background()) }()
	lane := func(subject string) uint32 {
		h := fnv.New32a()
		h.Write([]byte(subject))
		return h.Sum32() % heartbeatLanes
	}
	bobSubject := wire.HeartbeatSubject(wire.DefaultPrefix, "bob", "g")
	nc, err := nats.Connect(s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const flood = 600
	sent := 0
	for i := 0; sent < flood; i++ {
		id := fmt.Sprint("w", i)
		subject := wire.HeartbeatSubject(wire.DefaultPrefix, "alice", id)
		if lane(subject) != lane(bobSubject) {
			continue
		}
		body := fmt.Sprintf(`{"worker_id":%q,"service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`, id)
		if err := nc.Publish(subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(bobSubject, []byte(`{"worker_id":"g","service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	count := func(outcome string) float64 {
		var m dto.Metric
		_ = metrics.Heartbeats.WithLabelValues(outcome).Write(&m)
		return m.GetCounter().GetValue()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(principal, worker string) error {
		_, err := s.st.Get(ctx, serverPrincipal, wire.GetRequest{Namespace: "system", Key: wire.WorkerKey(principal, worker)})
		return err
	}
	for get("bob", "g") != nil {
		if n := count("accepted") + count("dropped") + count("superseded"); n == flood+1 {
			t.Fatalf("bob's heartbeat was never handled: of %d heartbeats %v were dropped", flood+1, count("dropped"))
		}
		if ctx.Err() != nil {
			t.Fatal("bob's heartbeat was not handled within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	l, err := s.st.List(ctx, serverPrincipal, wire.ListRequest{Namespace: "system", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if l.Revision >= flood/2 {
		t.Fatalf("bob's heartbeat was handled only after %d of alice's %d first heartbeats: it waited behind them", l.Revision, flood)
	}
}
