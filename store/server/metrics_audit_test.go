package server_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// gatherStore gathers reg (holding the store's collector) by family name.
func gatherStore(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func kindValue(f *dto.MetricFamily, kind string) float64 {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == kind {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// Watches open when the server stops are closed with SHUTDOWN: each is counted in
// state_watch_closures_total{reason="SHUTDOWN"}, and state_watches reads 0 after the stop.
func TestMetricsCountShutdownClosures(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Metrics: true})
	reg := prometheus.NewRegistry()
	if err := env.Metrics.RegisterStore(reg, env.Store, "bbolt"); err != nil {
		t.Fatal(err)
	}
	nc := env.Connect(t, "coordinator")
	for i := range 3 {
		if r := request(t, nc, "coordinator", wire.OpWatch, fmt.Sprintf(`{"watch_id":"w%d","namespace":"service/tx"}`, i)); !r.OK {
			t.Fatalf("watch %d: %+v", i, r)
		}
	}
	if n := gatherStore(t, reg)["state_watches"].GetMetric()[0].GetGauge().GetValue(); n != 3 {
		t.Fatalf("state_watches with three watches: %v", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := env.Server.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var closed dto.Metric
	if err := env.Metrics.WatchClosures.WithLabelValues(string(wire.CloseShutdown)).Write(&closed); err != nil {
		t.Fatal(err)
	}
	if n := closed.GetCounter().GetValue(); n != 3 {
		t.Errorf("state_watch_closures_total{reason=SHUTDOWN} = %v, want 3", n)
	}
	if n := gatherStore(t, reg)["state_watches"].GetMetric()[0].GetGauge().GetValue(); n != 0 {
		t.Errorf("state_watches after the stop: %v", n)
	}
}

// Many namespaces written and emptied leave the per-kind series as they were (four kinds, no more),
// and state_namespaces counts only the namespaces still holding entries.
func TestMetricsNamespaceChurnKeepsLabelsBounded(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Metrics: true})
	reg := prometheus.NewRegistry()
	if err := env.Metrics.RegisterStore(reg, env.Store, "bbolt"); err != nil {
		t.Fatal(err)
	}
	nc := env.Connect(t, "coordinator")
	const n = 200
	for i := range n {
		body := fmt.Sprintf(`{"namespace":"service/churn-%d","key":"k","schema":"keeppeek.lease.v1","document":%s}`, i, lease)
		if r := request(t, nc, "coordinator", wire.OpPut, body); !r.OK {
			t.Fatalf("put %d: %+v", i, r)
		}
	}
	m := gatherStore(t, reg)
	if got := kindValue(m["state_namespaces"], "service"); got != n {
		t.Fatalf("state_namespaces{kind=service} with %d namespaces: %v", n, got)
	}
	for i := range n - 1 { // all but the last emptied
		if r := request(t, nc, "coordinator", wire.OpDelete, fmt.Sprintf(`{"namespace":"service/churn-%d","key":"k"}`, i)); !r.OK {
			t.Fatalf("delete %d: %+v", i, r)
		}
	}
	m = gatherStore(t, reg)
	for _, name := range []string{"state_entries", "state_value_bytes", "state_namespaces"} {
		if got := len(m[name].GetMetric()); got != 4 {
			t.Errorf("%s has %d series after %d namespaces came and went, want 4 (one per kind)", name, got, n)
		}
	}
	if got := kindValue(m["state_namespaces"], "service"); got != 1 {
		t.Errorf("state_namespaces{kind=service} after emptying all but one: %v", got)
	}
	if got := kindValue(m["state_entries"], "service"); got != 1 {
		t.Errorf("state_entries{kind=service}: %v", got)
	}
	if got := kindValue(m["state_value_bytes"], "service"); got != float64(len(lease)) {
		t.Errorf("state_value_bytes{kind=service}: %v, want %d", got, len(lease))
	}
}
