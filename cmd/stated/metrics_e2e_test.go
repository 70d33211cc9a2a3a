package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// goClient connects as principal (conn's connection: the principal's credentials and inbox prefix)
// and returns a store/client over it.
func goClient(t *testing.T, s *e2e.Stated, principal string) *client.Client {
	t.Helper()
	nc, _ := conn(t, s, principal)
	c, err := client.New(nc, principal, client.WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openWatch opens a raw watch and stops it at cleanup (a watch the server closed is no error).
func openWatch(t *testing.T, c *client.Client, id, namespace, prefix string) *client.Watch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: namespace, KeyPrefix: prefix})
	if err != nil {
		t.Fatalf("watch %s on %s %q: %v", id, namespace, prefix, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// nextWatchMessage waits (bounded) for the watch's next message; the channel must not be closed.
func nextWatchMessage(t *testing.T, w *client.Watch) wire.WatchMessage {
	t.Helper()
	select {
	case m, ok := <-w.Messages():
		if !ok {
			t.Fatalf("watch %s: messages ended (err %v)", w.ID(), w.Err())
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("watch %s: no message within %v", w.ID(), timeout)
	}
	panic("unreachable")
}

// wantUpdate waits for the watch's next message and checks it is the PUT of key with sequence seq.
func wantUpdate(t *testing.T, w *client.Watch, seq uint64, key string) wire.WatchMessage {
	t.Helper()
	m := nextWatchMessage(t, w)
	if m.Kind != wire.UpdatePut || m.WatchSequence != seq || m.Key != key {
		t.Fatalf("watch %s: got %+v, want PUT %s at watch_sequence %d", w.ID(), m, key, seq)
	}
	return m
}

// wantClosed waits for the watch's next message, checks it is CLOSED with reason, and that the
// client's channel ends after it.
func wantClosed(t *testing.T, w *client.Watch, reason wire.CloseReason) {
	t.Helper()
	m := nextWatchMessage(t, w)
	if m.Kind != wire.UpdateClosed || m.Reason != reason {
		t.Fatalf("watch %s: got %+v, want CLOSED %s", w.ID(), m, reason)
	}
	select {
	case m, ok := <-w.Messages():
		if ok {
			t.Fatalf("watch %s: message after CLOSED: %+v", w.ID(), m)
		}
	case <-time.After(timeout):
		t.Fatalf("watch %s: messages did not end after CLOSED", w.ID())
	}
}

func compactLen(t *testing.T, doc string) float64 {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	return float64(b.Len())
}

// scrape reads and parses stated's /metrics (Prometheus text format).
func scrape(t *testing.T, s *e2e.Stated) map[string]*dto.MetricFamily {
	t.Helper()
	hc := &http.Client{Timeout: timeout}
	resp, err := hc.Get(s.HTTP() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics answered %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample finds the series of family name whose labels are exactly labels.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (*dto.Metric, bool) {
	f := fams[name]
	if f == nil {
		return nil, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
				match = false
				break
			}
		}
		if match {
			return m, true
		}
	}
	return nil, false
}

// value is the counter, gauge or untyped value of a series, 0 when the series does not exist (a
// labelled counter appears at its first increment).
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m, ok := sample(fams, name, labels)
	if !ok {
		return 0
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// labelsOf lists the values of label across family name's series, sorted.
func labelsOf(fams map[string]*dto.MetricFamily, name, label string) []string {
	var out []string
	for _, m := range fams[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out = append(out, lp.GetValue())
			}
		}
	}
	sort.Strings(out)
	return out
}

// countedLabels lists the values of label across family name's series whose value is not 0, sorted
// (the series of a fixed label set exist from the start, at 0).
func countedLabels(fams map[string]*dto.MetricFamily, name, label string) []string {
	var out []string
	for _, m := range fams[name].GetMetric() {
		if m.GetCounter().GetValue() == 0 {
			continue
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out = append(out, lp.GetValue())
			}
		}
	}
	sort.Strings(out)
	return out
}

// awaitMetrics scrapes until cond holds (bounded) and returns that scrape. Counters are updated after
// a reply is sent, so a scrape right after a reply may trail it by a moment.
func awaitMetrics(t *testing.T, s *e2e.Stated, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		fams := scrape(t, s)
		if cond(fams) {
			return fams
		}
		select {
		case <-deadline:
			t.Fatalf("metrics: %s did not happen within %v", what, timeout)
		case <-tick.C:
		}
	}
}

// TestE2EMetrics drives stated through the Go client and checks /metrics: requests by op and code,
// the commit histograms, live watches, closures by reason, entries and bytes per namespace kind
// (bounded labels), the backend, heartbeats and build info.
func TestE2EMetrics(t *testing.T) {
	s, ctx := startWith(t, "[bounds]\nmax_pending_updates = 4\n")
	coord := goClient(t, s, "coordinator")
	alice := goClient(t, s, "alice")

	putOK := map[string]string{"op": "put", "code": "OK"}
	getNotFound := map[string]string{"op": "get", "code": string(wire.CodeNotFound)}
	base := scrape(t, s)
	basePuts, baseNotFound := value(base, "state_requests_total", putOK), value(base, "state_requests_total", getNotFound)
	if n := value(base, "state_watches", nil); n != 0 {
		t.Fatalf("state_watches before any watch: %v", n)
	}

	// A watch that acknowledges: live while open, gone after unwatch (which is no server closure).
	w := openWatch(t, coord, "metrics-acked", "service/tx", "items/")
	if n := value(scrape(t, s), "state_watches", nil); n != 1 {
		t.Fatalf("state_watches with one watch open: %v", n)
	}
	puts := 0
	put := func(c *client.Client, ns, key, schema, doc string) {
		t.Helper()
		if _, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: key, Schema: schema, Document: json.RawMessage(doc)}); err != nil {
			t.Fatalf("put %s %s: %v", ns, key, err)
		}
		puts++
	}
	lease := func(holder string) string { return fmt.Sprintf(`{"holder": %q, "claimed_at_ms": 1}`, holder) }
	serviceDocs := map[string]string{"items/a": lease("w1"), "items/b": lease("worker-22"), "items/c": lease("w333")}
	for i, key := range []string{"items/a", "items/b", "items/c"} {
		put(coord, "service/tx", key, wire.SchemaLease, serviceDocs[key])
		wantUpdate(t, w, uint64(i+1), key)
		if err := w.Ack(ctx, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	serviceDocs["items/a"] = lease("replacement-holder") // an overwrite: same entry count, new bytes
	put(coord, "service/tx", "items/a", wire.SchemaLease, serviceDocs["items/a"])
	wantUpdate(t, w, 4, "items/a")
	if err := w.Ack(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := coord.Unwatch(ctx, "metrics-acked"); err != nil {
		t.Fatal(err)
	}
	if n := value(scrape(t, s), "state_watches", nil); n != 0 {
		t.Fatalf("state_watches after unwatch: %v", n)
	}

	// Two user namespaces: one series for the kind, two namespaces in it.
	aliceDoc, bobDoc := `{"kind":"ui"}`, `{"kind": "layout", "layout": "grid"}`
	put(alice, "user/alice", "prefs", wire.SchemaPreference, aliceDoc)
	put(coord, "user/bob", "prefs", wire.SchemaPreference, bobDoc)

	// Two gets of missing keys.
	for _, c := range []struct {
		c      *client.Client
		ns, ky string
	}{{coord, "service/tx", "items/missing"}, {alice, "user/alice", "nothing"}} {
		if _, err := c.c.Get(ctx, c.ns, c.ky); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("get %s %s: %v, want NOT_FOUND", c.ns, c.ky, err)
		}
	}

	// A watch that never acknowledges: closed by the server with OVERFLOW at the fifth update.
	lazy := openWatch(t, alice, "metrics-lazy", "user/alice", "prefs")
	if n := value(scrape(t, s), "state_watches", nil); n != 1 {
		t.Fatalf("state_watches with the lazy watch open: %v", n)
	}
	for i := 1; i <= 5; i++ {
		aliceDoc = fmt.Sprintf(`{"kind":"ui-%d"}`, i)
		put(alice, "user/alice", "prefs", wire.SchemaPreference, aliceDoc)
	}
	for i := 1; i <= 4; i++ {
		wantUpdate(t, lazy, uint64(i), "prefs")
	}
	wantClosed(t, lazy, wire.CloseOverflow)

	// A heartbeat that does not parse: dropped and counted, nothing stored.
	hb, _ := conn(t, s, "alice")
	if err := hb.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-1"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := hb.Flush(); err != nil {
		t.Fatal(err)
	}

	wantPuts := basePuts + float64(puts)
	m := awaitMetrics(t, s, fmt.Sprintf("put/OK reaching %v, get/NOT_FOUND %v and one dropped heartbeat", wantPuts, baseNotFound+2),
		func(m map[string]*dto.MetricFamily) bool {
			return value(m, "state_requests_total", putOK) >= wantPuts &&
				value(m, "state_requests_total", getNotFound) >= baseNotFound+2 &&
				value(m, "state_heartbeats_total", map[string]string{"outcome": "dropped"}) >= 1
		})

	if got := value(m, "state_requests_total", putOK) - basePuts; got != float64(puts) {
		t.Errorf("state_requests_total{op=put,code=OK} rose by %v, want %d", got, puts)
	}
	if got := value(m, "state_requests_total", getNotFound) - baseNotFound; got != 2 {
		t.Errorf("state_requests_total{op=get,code=NOT_FOUND} rose by %v, want 2", got)
	}
	if got := value(m, "state_heartbeats_total", map[string]string{"outcome": "dropped"}); got != 1 {
		t.Errorf("state_heartbeats_total{outcome=dropped} = %v, want 1", got)
	}

	// Commit histograms: every put committed; their batch sizes add up to the puts (no TTLs, no
	// heartbeats were stored), and one latency observation per batch.
	cs, ok1 := sample(m, "state_commit_duration_seconds", nil)
	cb, ok2 := sample(m, "state_commit_batch_size", nil)
	if !ok1 || !ok2 || cs.GetHistogram() == nil || cb.GetHistogram() == nil {
		t.Fatalf("commit histograms missing: latency %v, batch %v", ok1, ok2)
	}
	if n := cs.GetHistogram().GetSampleCount(); n == 0 || n != cb.GetHistogram().GetSampleCount() {
		t.Errorf("commit latency count %d, batch size count %d: want equal and > 0", n, cb.GetHistogram().GetSampleCount())
	}
	if sum := cb.GetHistogram().GetSampleSum(); sum != float64(puts) {
		t.Errorf("commit batch sizes add up to %v, want %d changes", sum, puts)
	}

	// Live watches and closures.
	if n := value(m, "state_watches", nil); n != 0 {
		t.Errorf("state_watches after both watches ended: %v", n)
	}
	if got := countedLabels(m, "state_watch_closures_total", "reason"); strings.Join(got, ",") != "OVERFLOW" {
		t.Errorf("closure reasons %v, want only OVERFLOW (an unwatch is no closure)", got)
	}
	if n := value(m, "state_watch_closures_total", map[string]string{"reason": "OVERFLOW"}); n != 1 {
		t.Errorf("state_watch_closures_total{reason=OVERFLOW} = %v, want 1", n)
	}

	// Entries, bytes and namespaces per namespace kind: exactly the four kinds as label values.
	var serviceBytes float64
	for _, d := range serviceDocs {
		serviceBytes += compactLen(t, d)
	}
	userBytes := compactLen(t, aliceDoc) + compactLen(t, bobDoc)
	for _, c := range []struct {
		kind                   string
		entries, bytes, spaces float64
	}{
		{"service", 3, serviceBytes, 1},
		{"user", 2, userBytes, 2},
		{"group", 0, 0, 0},
		{"system", 0, 0, 0},
	} {
		l := map[string]string{"kind": c.kind}
		if got := value(m, "state_entries", l); got != c.entries {
			t.Errorf("state_entries{kind=%s} = %v, want %v", c.kind, got, c.entries)
		}
		if got := value(m, "state_value_bytes", l); got != c.bytes {
			t.Errorf("state_value_bytes{kind=%s} = %v, want %v", c.kind, got, c.bytes)
		}
		if got := value(m, "state_namespaces", l); got != c.spaces {
			t.Errorf("state_namespaces{kind=%s} = %v, want %v", c.kind, got, c.spaces)
		}
	}
	for _, name := range []string{"state_entries", "state_value_bytes", "state_namespaces"} {
		if got := strings.Join(labelsOf(m, name, "kind"), ","); got != "group,service,system,user" {
			t.Errorf("%s kinds %s, want group,service,system,user", name, got)
		}
	}

	if n := value(m, "state_backend_info", map[string]string{"type": "bbolt"}); n != 1 {
		t.Errorf(`state_backend_info{type="bbolt"} = %v, want 1`, n)
	}
	if f := m["go_build_info"]; f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("go_build_info missing or not 1: %v", f)
	}
}
