package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) {
	if os.Getenv(floorChildEnv) != "" {
		os.Exit(floorChild())
	}
	e2e.Main(m)
}

// The bench document is exactly DocumentBytes compact bytes, and the store's schema registry and
// content guard accept it where the bench writes it.
func TestDocument(t *testing.T) {
	doc, err := Document(DocumentBytes)
	if err != nil {
		t.Fatal(err)
	}
	compact, err := wire.CompactDocument(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(compact) != DocumentBytes || string(compact) != string(doc) {
		t.Fatalf("document is %d compact bytes (%d as written), want %d", len(compact), len(doc), DocumentBytes)
	}
	reg, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"service/bench", "user/bench-000"} {
		if err := reg.Validate(DocumentSchema, ns, doc); err != nil {
			t.Fatalf("registry rejects the bench document in %s: %v", ns, err)
		}
	}
	for _, want := range []string{`"role":"publish"`, `"recording_mode":"required"`, `"parameters":{"bench":{"notes":"`} {
		if !strings.Contains(string(doc), want) {
			t.Fatalf("document lacks %s", want)
		}
	}
	if _, err := Document(10); err == nil {
		t.Fatal("a 10-byte document was built")
	}
	// Other sizes come out exact too.
	for _, n := range []int{400, 1025, 4096} {
		d, err := Document(n)
		if err != nil || len(d) != n {
			t.Fatalf("Document(%d): %d bytes, %v", n, len(d), err)
		}
		if err := reg.Validate(DocumentSchema, "service/bench", d); err != nil {
			t.Fatalf("Document(%d) rejected: %v", n, err)
		}
	}
}

func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	s := summarize(lat)
	if s.p50 != 50 || s.p95 != 95 || s.max != 100 {
		t.Fatalf("summarize 1..100 us = %+v", s)
	}
	if s := summarize([]time.Duration{7 * time.Microsecond}); s.p50 != 7 || s.p95 != 7 || s.max != 7 {
		t.Fatalf("summarize one = %+v", s)
	}
	if s := summarize(nil); s != (stats{}) {
		t.Fatalf("summarize none = %+v", s)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no principals":   func(c *Config) { c.Principals = nil },
		"bad principal":   func(c *Config) { c.Principals = []Principal{{ID: "Bad.Id"}} },
		"group namespace": func(c *Config) { c.Namespace = "group/bench" },
		"zero watches":    func(c *Config) { c.Watches = 0 },
		"zero rounds":     func(c *Config) { c.Rounds = 0 },
		"ftp metrics":     func(c *Config) { c.MetricsURL = "ftp://x/metrics" },
		"negative idle":   func(c *Config) { c.Idle = -time.Second },
		// Owners x Rounds latencies are kept: a count that overflows or cannot be held is refused
		// here, not met as a panic or an exhausted memory after the bench connected.
		"huge rounds": func(c *Config) { c.Rounds = math.MaxInt },
		"many rounds": func(c *Config) { c.Rounds = 1_000_000 },
		// A URL without a host is refused here, as bad usage, not met after the bench wrote.
		"hostless metrics": func(c *Config) { c.MetricsURL = "http:///metrics" },
		// A principal named twice would be counted twice (Report.Principals, the watches' fit).
		"principal twice": func(c *Config) {
			c.Principals = []Principal{{ID: "a", Password: "x"}, {ID: "b"}, {ID: "a", Password: "y"}}
		},
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestReportTable(t *testing.T) {
	rep := &Report{Namespace: "service/bench", Schema: DocumentSchema, DocumentBytes: DocumentBytes, ServerVersion: "0.1.0",
		SerialCAS: SerialResult{Ops: 6, Owners: 3, Rounds: 2, P50US: 1500, P95US: 2500, MaxUS: 9000},
		Writers:   WritersResult{Writers: 3, Ops: 6, Seconds: 0.5, OpsPerSec: 12, P50US: 40000, P95US: 70000},
		Fanout:    FanoutResult{Watches: 4, Connections: 2, Principals: 1, Rounds: 2, P50US: 300, P95US: 400},
		Idle:      IdleResult{Entries: 5, BenchEntries: 5, Connections: 3}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for name, want := range map[string]string{
		"serial-cas-p50-us":         "1500 6 ops: 3 owners x 2 rounds",
		"serial-cas-max-us":         "9000",
		"writers-3-ops/s":           "12.0 6 ops: 3 writers x 2 CAS",
		"writers-3-p95-us":          "70000",
		"fanout-4-p50-us":           "300 4 watches over 2 connections",
		"rss-idle-MiB":              "not measured",
		"rss-idle-3-conns-MiB":      "not measured (no --metrics-url) the same, before",
		"serial-commit-mean-us":     "not measured",
		"writers-3-ops/commit":      "not measured (no --metrics-url) changes per stated commit",
		"writers-3-commit-busy-pct": "not measured",
	} {
		if !strings.Contains(rows[name], want) {
			t.Errorf("row %s = %q, want %q in it\n%s", name, rows[name], want, b.String())
		}
	}
	if len(rep.Figures()) != 14 {
		t.Fatalf("%d figures", len(rep.Figures()))
	}
}

// benchPrincipals is how many admin principals BenchmarkStated configures: one per connection, so
// the 1,024 fanout watches spread to at most 9 per principal, well inside the default
// max_watches_per_principal (256), and max_watches (1,024) is met exactly.
const benchPrincipals = 127

// BenchmarkStated runs the qualification workload (DefaultConfig) against the real stated binary
// configured with 127 admin principals bench-000 to bench-126, and reports each figure. It asserts
// nothing about speed. Run it with:
//
//	go test ./internal/bench -run '^$' -bench Stated -benchtime 1x
func BenchmarkStated(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Principals = nil
	var principals []e2e.Principal
	for i := range benchPrincipals {
		id, pw := fmt.Sprintf("bench-%03d", i), fmt.Sprintf("bench-pw-%03d", i)
		principals = append(principals, e2e.Principal{ID: id, Admin: true, Password: pw})
		cfg.Principals = append(cfg.Principals, Principal{ID: id, Password: pw})
	}
	s := e2e.NewStated(b, e2e.Config{Principals: principals})
	s.Start()
	cfg.URL, cfg.MetricsURL = s.URL(), s.HTTP()+"/metrics"
	cfg.Logf = b.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var rep *Report
	for b.Loop() {
		var err error
		if rep, err = Run(ctx, cfg); err != nil {
			b.Fatalf("%v\n%s", err, s.Logs())
		}
	}
	for _, f := range rep.Figures() {
		b.ReportMetric(f.Value, f.Name)
	}
}
