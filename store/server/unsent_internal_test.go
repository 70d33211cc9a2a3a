package server

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// A watch update that the server's NATS connection refused (closed, or reconnecting with its buffer
// full) was thrown away without a trace: its watcher resyncs at the gap, but nothing told an operator
// that updates were being lost. Each one counts in state_watch_messages_unsent_total.
func TestWatchMessageNATSRefusedIsCounted(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	s, st := newServer(t, natstest.Start(t, natsserver.Options{}), store.DefaultOptions(), Options{Metrics: metrics})
	defer func() { _ = s.Stop(context.Background()) }()
	nc, err := nats.Connect(s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	updates, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if r := natstest.Request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"w","namespace":"service/tx"}`, auditTimeout); !r.OK {
		t.Fatalf("watch: %+v", r)
	}
	unsent := func() float64 {
		var m dto.Metric
		if err := metrics.WatchMessagesUnsent.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	coordinator := policy.Principal{ID: "coordinator", Admin: true}
	put := func(key string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
		defer cancel()
		doc := json.RawMessage(`{"holder":"w1","claimed_at_ms":1}`)
		if _, err := st.Put(ctx, coordinator, wire.PutRequest{Namespace: "service/tx", Key: key, Schema: wire.SchemaLease, Document: doc}); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	if _, err := updates.NextMsg(auditTimeout); err != nil {
		t.Fatalf("the update of a put: %v", err)
	}
	if n := unsent(); n != 0 {
		t.Fatalf("%v unsent after an update that went out", n)
	}
	s.nc.Close()
	put("b")
	put("c")
	if n := unsent(); n != 2 {
		t.Fatalf("%v unsent after two updates on a closed connection, want 2", n)
	}
}
