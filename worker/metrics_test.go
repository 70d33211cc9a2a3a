package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// series returns the values of the series of name in reg, by the value of label (a counter's or a
// gauge's value).
func series(t *testing.T, reg *prometheus.Registry, name, workerID, label string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var id, key string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "worker_id":
					id = l.GetValue()
				case label:
					key = l.GetValue()
				}
			}
			if id != workerID {
				continue
			}
			v := m.GetGauge().GetValue()
			if f.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			out[key] = v
		}
	}
	return out
}

// The worker's collector shows its identity, status, health, readiness, leases and heartbeats as
// they are when collected; two workers share a registry.
func TestWorkerCollector(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	updates := statusUpdates(t, env)
	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-1", Service: "transcoder-a",
		HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	other, err := worker.New(worker.Options{Conn: env.Connect(t, "bob"), Principal: "bob", WorkerID: "tx-2"})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(w.Collector(), other.Collector())
	one := func(name, label, key string) float64 {
		t.Helper()
		v, ok := series(t, reg, name, "tx-1", label)[key]
		if !ok {
			t.Fatalf("no %s{worker_id=tx-1,%s=%q}", name, label, key)
		}
		return v
	}
	if one("worker_status", "status", wire.StatusStarting) != 1 || one("worker_healthy", "", "") != 0 ||
		one("worker_last_heartbeat_timestamp_seconds", "", "") != 0 {
		t.Fatal("a worker not yet running: want status starting, not healthy, no heartbeat")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.WorkerID == "tx-1" && s.Status == wire.StatusReady })
	if v := series(t, reg, "worker_info", "tx-1", "service"); v["transcoder-a"] != 1 || len(v) != 1 {
		t.Fatalf("worker_info by service: %v", v)
	}
	for _, s := range []string{wire.StatusStarting, wire.StatusReady, wire.StatusDraining, wire.StatusStopping} {
		if got, want := one("worker_status", "status", s), map[bool]float64{true: 1}[s == wire.StatusReady]; got != want {
			t.Errorf("worker_status{status=%q} = %v, want %v", s, got, want)
		}
	}
	if one("worker_healthy", "", "") != 1 || one("worker_ready", "", "") != 1 {
		t.Fatalf("a running worker: healthy %v, ready %v", one("worker_healthy", "", ""), one("worker_ready", "", ""))
	}
	if one("worker_heartbeats_total", "result", "sent") < 1 || one("worker_heartbeats_total", "result", "failed") != 0 {
		t.Fatalf("heartbeats: %v", series(t, reg, "worker_heartbeats_total", "tx-1", "result"))
	}
	if at := one("worker_last_heartbeat_timestamp_seconds", "", ""); at < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last heartbeat at %v", at)
	}
	w.HoldLease("leases/a")
	w.HoldLease("leases/b")
	if n := one("worker_leases_held", "", ""); n != 2 {
		t.Fatalf("leases held %v, want 2", n)
	}
	if v := series(t, reg, "worker_status", "tx-2", "status"); v[wire.StatusStarting] != 1 {
		t.Fatalf("the other worker's status: %v", v)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if one("worker_status", "status", wire.StatusStopping) != 1 || one("worker_healthy", "", "") != 0 || one("worker_ready", "", "") != 0 {
		t.Fatal("a stopped worker: want status stopping, neither healthy nor ready")
	}
}
