package reconciler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gathered returns the value of the series name{controller=ctrl,extra...} in reg, and whether reg
// has it: a counter's or a gauge's value, a histogram's sample count.
func gathered(t *testing.T, reg *prometheus.Registry, name, ctrl string, extra ...string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	want := map[string]string{"controller": ctrl}
	for i := 0; i+1 < len(extra); i += 2 {
		want[extra[i]] = extra[i+1]
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// expect fails the test unless reg holds name{...} with value want.
func expect(t *testing.T, reg *prometheus.Registry, want float64, name, ctrl string, extra ...string) {
	t.Helper()
	got, ok := gathered(t, reg, name, ctrl, extra...)
	if !ok || got != want {
		t.Errorf("%s{controller=%q %v} = %v (present %v), want %v", name, ctrl, extra, got, ok, want)
	}
}

// A controller with Metrics counts every Reconcile by outcome (a panic as an error, and as a panic),
// times them and their wait in the queue, counts the retries, and shows, when collected, its queue
// (ready, scheduled, running) and its cache (following, revision, resyncs). Once stopped its gauges
// are gone and its name is free again; a second controller may not take the name while it runs.
func TestControllerMetrics(t *testing.T) {
	_, c := setup(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("a second NewMetrics on one registry succeeded")
	}
	if _, err := NewMetrics(nil); err == nil {
		t.Fatal("NewMetrics(nil) succeeded")
	}

	calls := make(chan string, 64)
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	r := Func(func(ctx context.Context, req Request) (Result, error) {
		key := strings.TrimPrefix(req.Key, testPrefix)
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		calls <- key
		switch key {
		case "fail":
			if n == 1 {
				return Result{}, errors.New("first attempt fails")
			}
		case "panic":
			if n == 1 {
				panic("first attempt panics")
			}
		case "requeue":
			if n == 1 {
				return Result{Requeue: true}, nil
			}
		case "later":
			return Result{RequeueAfter: time.Hour}, nil
		case "block":
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return Result{}, nil
	})
	const name = "transcoder-intents"
	ctrl, err := New(c, r, Options{Namespace: testNS, KeyPrefix: testPrefix, BaseBackoff: time.Millisecond, Metrics: m, Name: name})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := New(c, r, Options{Namespace: testNS, KeyPrefix: testPrefix, Metrics: m, Name: name}); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("New with the name of a running controller: %v, want an error naming it", err)
	}
	expect(t, reg, 0, "reconciler_cache_following", name) // not started: no cache yet
	// Every series is there from New on, at 0, so that increase() sees the first event.
	for _, r := range []string{"success", "error", "requeue", "requeue_after"} {
		expect(t, reg, 0, "reconciler_reconcile_total", name, "result", r)
	}
	expect(t, reg, 0, "reconciler_reconcile_panics_total", name)
	expect(t, reg, 0, "reconciler_queue_retries_total", name)
	expect(t, reg, 0, "reconciler_reconcile_duration_seconds", name)

	var last uint64
	for i, k := range []string{"ok", "fail", "panic", "requeue", "later"} {
		last = putIntent(t, c, k, i, 0)
	}
	if err := ctrl.Start(ctxT(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer ctrl.Stop()
	want := map[string]int{"ok": 1, "fail": 2, "panic": 2, "requeue": 2, "later": 1}
	for got := map[string]int{}; !mapsEqual(got, want); {
		got[recv(t, calls, "the Reconciles of the five keys")]++
	}
	// One worker: once the next key's Reconcile runs, the previous one has been counted. "block"
	// runs until released, with "ok" enqueued behind it.
	ctrl.Enqueue(testPrefix + "block")
	if k := recv(t, calls, "the Reconcile of block"); k != "block" {
		t.Fatalf("Reconcile of %q, want block", k)
	}
	ctrl.Enqueue(testPrefix + "ok")

	expect(t, reg, 4, "reconciler_reconcile_total", name, "result", "success") // ok, and the second of fail, panic, requeue
	expect(t, reg, 2, "reconciler_reconcile_total", name, "result", "error")
	expect(t, reg, 1, "reconciler_reconcile_total", name, "result", "requeue")
	expect(t, reg, 1, "reconciler_reconcile_total", name, "result", "requeue_after")
	expect(t, reg, 1, "reconciler_reconcile_panics_total", name)
	expect(t, reg, 3, "reconciler_queue_retries_total", name) // fail, panic, requeue
	expect(t, reg, 8, "reconciler_reconcile_duration_seconds", name)
	expect(t, reg, 9, "reconciler_queue_wait_seconds", name) // block's wait too: it runs
	expect(t, reg, 1, "reconciler_active_reconciles", name)
	expect(t, reg, 1, "reconciler_queue_depth", name)     // ok, behind block
	expect(t, reg, 1, "reconciler_queue_scheduled", name) // later, in an hour
	expect(t, reg, 1, "reconciler_cache_following", name)
	expect(t, reg, float64(last), "reconciler_cache_revision", name)
	expect(t, reg, 0, "reconciler_cache_resyncs_total", name)

	close(release)
	if k := recv(t, calls, "the Reconcile of ok behind block"); k != "ok" {
		t.Fatalf("Reconcile of %q, want ok", k)
	}
	ctrl.Stop()
	for _, g := range []string{"reconciler_queue_depth", "reconciler_active_reconciles", "reconciler_cache_following"} {
		if _, ok := gathered(t, reg, g, name); ok {
			t.Errorf("%s of a stopped controller is still collected", g)
		}
	}
	// The counters stay (block's success at least was counted: ok's Reconcile began after it), and
	// the name is free for a new controller.
	if v, ok := gathered(t, reg, "reconciler_reconcile_total", name, "result", "success"); !ok || v < 5 {
		t.Errorf("successes after Stop: %v (present %v), want at least 5", v, ok)
	}
	again, err := New(c, r, Options{Namespace: testNS, KeyPrefix: testPrefix, Metrics: m, Name: name})
	if err != nil {
		t.Fatalf("New with the name of a stopped controller: %v", err)
	}
	again.Stop()
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
