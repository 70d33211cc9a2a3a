package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

const auditTimeout = 10 * time.Second

// Every heartbeat the server takes is counted in exactly one outcome of state_heartbeats_total, one
// still waiting on its lane when the server stops included: the help says so ("dropped: ... came as
// the server stopped"), and an embedding program that reads its registry after Stop would otherwise
// see heartbeats that were taken and never accounted for. Here worker w1's first heartbeat is being
// handled (held at the server's in-flight lock) and its second waits behind it when Stop closes the
// lanes.
func TestHeartbeatWaitingAtStopIsCountedDropped(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	s := startServer(t, Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "alice"}}, Metrics: metrics})
	nc, err := nats.Connect(s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "w1")
	body := []byte(`{"worker_id":"w1","service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`)
	// waiting reports whether a heartbeat of w1 waits on its lane (handed over, not yet taken).
	waiting := func() bool {
		s.hbLanes.mu.Lock()
		defer s.hbLanes.mu.Unlock()
		_, ok := s.hbLanes.waiting[subject]
		return ok
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(auditTimeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, auditTimeout)
			}
			time.Sleep(time.Millisecond) // polls the lanes' state: they signal nothing to await
		}
	}
	s.inflight.Lock() // the first heartbeat, once taken, is held before it reaches the store
	publish := func() {
		t.Helper()
		if err := nc.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	await("the first heartbeat taken off its lane", func() bool {
		s.hbLanes.mu.Lock()
		defer s.hbLanes.mu.Unlock()
		return s.hbLanes.started && len(s.hbLanes.waiting) == 0 && len(s.hbLanes.groups) == 0
	})
	publish()
	await("the second heartbeat waiting", waiting)

	stopped := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Stop does not wait for the held heartbeat
	go func() { stopped <- s.Stop(ctx) }()
	select {
	case <-stopped:
	case <-time.After(auditTimeout):
		t.Fatal("Stop did not return")
	}
	s.inflight.Unlock()
	s.hbLanes.wg.Wait() // the held heartbeat handled (against a closed store)

	total := 0.0
	for _, outcome := range []string{"accepted", "superseded", "refused", "dropped"} {
		var m dto.Metric
		if err := metrics.Heartbeats.WithLabelValues(outcome).Write(&m); err != nil {
			t.Fatal(err)
		}
		total += m.GetCounter().GetValue()
	}
	if total != 2 {
		t.Fatalf("state_heartbeats_total counts %v heartbeats in all, want the 2 the server took", total)
	}
}

// capture is a Registerer that keeps what is registered on it.
type capture struct{ got []prometheus.Collector }

func (c *capture) Register(col prometheus.Collector) error   { c.got = append(c.got, col); return nil }
func (c *capture) MustRegister(cols ...prometheus.Collector) { c.got = append(c.got, cols...) }
func (c *capture) Unregister(prometheus.Collector) bool      { return false }

// A scrape that stalls while it collects the store's gauges (a slow /metrics reader, a registry
// that gathers slowly) must not hold the store: writes commit and are read, and watches open, while
// the collector waits to hand over its first sample.
func TestStalledStoreScrapeDoesNotHoldWriters(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var reg capture
	m := NewMetrics(prometheus.NewRegistry())
	if err := m.RegisterStore(&reg, st, "bbolt"); err != nil || len(reg.got) != 1 {
		t.Fatalf("RegisterStore: %v, %d collectors", err, len(reg.got))
	}
	stalled := make(chan prometheus.Metric) // never read until the writes are done
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		reg.got[0].Collect(stalled)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	coord := policy.Principal{ID: "coordinator", Admin: true}
	for i := range 20 {
		if _, err := st.Put(ctx, coord, wire.PutRequest{Namespace: fmt.Sprint("service/s", i), Key: "k", Schema: wire.SchemaLease,
			Document: []byte(`{"holder":"w1","claimed_at_ms":1}`)}); err != nil {
			t.Fatalf("put %d while a scrape stalls: %v", i, err)
		}
	}
	if _, err := st.Watch(ctx, coord, wire.WatchRequest{WatchID: "w", Namespace: "service/s0"}, func(store.Message) {}); err != nil {
		t.Fatalf("watch while a scrape stalls: %v", err)
	}
	if got := st.Stats().LiveNamespaces; got != 20 {
		t.Fatalf("live namespaces %d, want 20", got)
	}
	n := 0
	for {
		select {
		case <-stalled:
			n++
			continue
		case <-collected:
		}
		break
	}
	if n != 13 { // state_watches, and entries, bytes and namespaces of four kinds
		t.Fatalf("the collector handed over %d samples, want 13", n)
	}
}
