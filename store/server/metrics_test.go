package server_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/keeppeek/coordination/store/server"
)

// A program that embeds the server passes its own registry, often prometheus.DefaultRegisterer,
// which already holds the Go and process collectors: NewMetrics joins it instead of panicking on a
// duplicate registration, and the server's own metrics are registered there.
func TestNewMetricsJoinsARegistryThatHasTheStandardCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var m *server.Metrics
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("NewMetrics on a registry with the Go and process collectors panicked: %v", r)
			}
		}()
		m = server.NewMetrics(reg)
	}()
	m.BackendInfo.WithLabelValues("bbolt").Set(1)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"state_backend_info": false, "go_build_info": false, "go_goroutines": false}
	for _, f := range fams {
		if _, ok := want[f.GetName()]; ok {
			want[f.GetName()] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("%s not gathered", name)
		}
	}
}
