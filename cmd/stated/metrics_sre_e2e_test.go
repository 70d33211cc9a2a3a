package main_test

import (
	"errors"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2EMetricsSeriesExistFromTheStart: an alert on increase() or rate() of a counter sees the
// counter's first events only if its series was there before them. A series that first appears at
// 1 (the first refused heartbeat, the first watch closed with OVERFLOW, the first NO_REPLY) shows no
// increase at all, and state_requests_dropped_total, read from NATS at each scrape, would first
// appear holding the whole first burst of drops, which no alert would then see. So every series of
// the fixed label sets (every op with every code, every heartbeat outcome, every close reason) is on
// /metrics at 0 from the start, and no other series of these families is.
func TestE2EMetricsSeriesExistFromTheStart(t *testing.T) {
	s, _ := startWith(t, "")
	m := scrape(t, s)

	ops := []string{"backup", "audit_verify"}
	for _, op := range wire.Ops {
		ops = append(ops, string(op))
	}
	codes := []string{"OK", "NO_REPLY", "REPLY_REFUSED", "REPLY_FAILED"}
	for _, c := range wire.Codes {
		codes = append(codes, string(c))
	}
	for _, op := range ops {
		for _, code := range codes {
			if _, ok := sample(m, "state_requests_total", map[string]string{"op": op, "code": code}); !ok {
				t.Errorf("state_requests_total{op=%q,code=%q} missing at start", op, code)
			}
		}
		if h, ok := sample(m, "state_request_duration_seconds", map[string]string{"op": op}); !ok || h.GetHistogram() == nil {
			t.Errorf("state_request_duration_seconds{op=%q} missing at start", op)
		}
		if d, ok := sample(m, "state_requests_dropped_total", map[string]string{"op": op}); !ok || d.GetCounter().GetValue() != 0 {
			t.Errorf("state_requests_dropped_total{op=%q} at start: %v (present %v), want 0", op, d.GetCounter().GetValue(), ok)
		}
	}
	if n := len(m["state_requests_total"].GetMetric()); n != len(ops)*len(codes) {
		t.Errorf("state_requests_total has %d series, want %d ops times %d codes", n, len(ops), len(codes))
	}
	for _, outcome := range []string{"accepted", "superseded", "refused", "dropped"} {
		if c, ok := sample(m, "state_heartbeats_total", map[string]string{"outcome": outcome}); !ok || c.GetCounter().GetValue() != 0 {
			t.Errorf("state_heartbeats_total{outcome=%q} at start: %v (present %v), want 0", outcome, c.GetCounter().GetValue(), ok)
		}
	}
	reasons := []wire.CloseReason{wire.CloseOverflow, wire.CloseAckTimeout, wire.CloseUnauthorized, wire.CloseSnapshotFailed,
		wire.CloseRestored, wire.CloseShutdown}
	for _, r := range reasons {
		if c, ok := sample(m, "state_watch_closures_total", map[string]string{"reason": string(r)}); !ok || c.GetCounter().GetValue() != 0 {
			t.Errorf("state_watch_closures_total{reason=%q} at start: %v (present %v), want 0", r, c.GetCounter().GetValue(), ok)
		}
	}
	series := map[string]int{"state_requests_total": len(ops) * len(codes), "state_request_duration_seconds": len(ops),
		"state_requests_dropped_total": len(ops), "state_heartbeats_total": 4, "state_watch_closures_total": len(reasons)}
	checkSeries := func(m map[string]*dto.MetricFamily, when string) {
		t.Helper()
		for name, n := range series {
			if got := len(m[name].GetMetric()); got != n {
				t.Errorf("%s: %s has %d series, want %d", when, name, got, n)
			}
		}
	}
	checkSeries(m, "at start")

	// Requests on subjects no endpoint serves (a made-up op, a made-up admin call, an op with a
	// token more) reach nobody: they add no op label, whatever a client sends.
	coord, _ := conn(t, s, "coordinator")
	for _, subject := range []string{wire.DefaultPrefix + ".state.v1.coordinator.made-up-op", wire.DefaultPrefix + ".admin.v1.coordinator.made_up",
		wire.DefaultPrefix + ".state.v1.coordinator.get.more"} {
		if _, err := coord.Request(subject, []byte(`{"request_id":1}`), timeout); !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("request on %s: %v, want no responders", subject, err)
		}
	}
	if r := request(t, coord, "coordinator", wire.OpInfo, `{"request_id":2}`); !r.OK {
		t.Fatalf("info: %+v", r)
	}
	m = awaitMetrics(t, s, "the info request counted", func(m map[string]*dto.MetricFamily) bool {
		return value(m, "state_requests_total", map[string]string{"op": "info", "code": "OK"}) == 1
	})
	checkSeries(m, "after requests on made-up ops")
}

// TestE2EMetricsReadyGauge: what /readyz says is on /metrics too, as state_ready, so that an alert
// on the metrics alone (a stated not behind a load balancer, whose readiness probe pages nobody)
// sees a stated that serves nothing: 1 while /readyz answers 200, 0 while it answers 503 (here, a
// store that is not served).
func TestE2EMetricsReadyGauge(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	s.Start()
	readyz := func() int {
		t.Helper()
		resp, err := (&http.Client{Timeout: timeout}).Get(s.HTTP() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if g, ok := sample(scrape(t, s), "state_ready", nil); !ok || g.GetGauge().GetValue() != 1 || readyz() != http.StatusOK {
		t.Fatalf("a serving stated: state_ready %v (present %v), /readyz %d", g.GetGauge().GetValue(), ok, readyz())
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	if err := os.WriteFile(s.DatabasePath(), []byte(strings.Repeat("not a bbolt database ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()
	if g, ok := sample(scrape(t, s), "state_ready", nil); !ok || g.GetGauge().GetValue() != 0 || readyz() != http.StatusServiceUnavailable {
		t.Fatalf("a stated whose store is not served: state_ready %v (present %v), /readyz %d", g.GetGauge().GetValue(), ok, readyz())
	}
}

// TestE2EMetricsBuildInfo: the issue asks for build info. Go's go_build_info says "(devel)" for a build
// from the repository, while stated reports its own version in info and its log; state_build_info
// carries the version info reports, so a dashboard can tell which stated runs where.
func TestE2EMetricsBuildInfo(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	info := request(t, coord, "coordinator", wire.OpInfo, `{}`)
	if !info.OK || info.Version == "" {
		t.Fatalf("info: %+v", info)
	}
	m := scrape(t, s)
	if g, ok := sample(m, "state_build_info", map[string]string{"version": info.Version, "goversion": runtime.Version()}); !ok || g.GetGauge().GetValue() != 1 {
		t.Fatalf("state_build_info{version=%q}: %v (present %v); families: %v", info.Version, g.GetGauge().GetValue(), ok,
			m["state_build_info"].GetMetric())
	}
}
