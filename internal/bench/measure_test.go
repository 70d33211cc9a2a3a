package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// The percentiles are nearest-rank ones (the smallest sample with at least p of the samples at or
// below it, no interpolation), whatever the order the samples came in, at the sizes the bench takes
// them: 30 fanout puts, 3,810 serial and writers' ops, and a couple in a small run.
func TestPercentileNearestRankAtTheBenchsSizes(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	for _, tc := range []struct {
		n             int
		p50, p95, max float64
	}{
		{1, 1, 1, 1},
		{2, 1, 2, 2},             // p50: rank ceil(1) = 1; p95: rank ceil(1.9) = 2
		{3, 2, 3, 3},             // ranks ceil(1.5) = 2, ceil(2.85) = 3
		{20, 10, 19, 20},         // ranks 10 and 19 exactly: no rank above
		{30, 15, 29, 30},         // the fanout's 30 puts: ranks 15 and ceil(28.5) = 29
		{3810, 1905, 3620, 3810}, // the serial and writers' ops: ranks 1,905 and ceil(3,619.5) = 3,620
	} {
		lat := make([]time.Duration, tc.n)
		for i := range lat {
			lat[i] = us(i + 1)
		}
		rand.Shuffle(len(lat), func(i, j int) { lat[i], lat[j] = lat[j], lat[i] })
		in := append([]time.Duration(nil), lat...)
		s := summarize(lat)
		if s.p50 != tc.p50 || s.p95 != tc.p95 || s.max != tc.max {
			t.Errorf("summarize of 1..%d us = %+v, want p50 %v, p95 %v, max %v", tc.n, s, tc.p50, tc.p95, tc.max)
		}
		for i := range lat {
			if lat[i] != in[i] {
				t.Fatalf("summarize reordered the latencies it was given")
			}
		}
	}
	// Sub-microsecond parts are kept, not rounded away.
	if s := summarize([]time.Duration{1500 * time.Nanosecond}); s.p50 != 1.5 {
		t.Errorf("summarize of 1.5 us = %+v", s)
	}
}

// A compare-and-set the server refuses is an error of the phase, never a sample: a key of each
// phase's is rewritten behind the bench's back as the phase starts, so the bench's next
// compare-and-set of it meets CONFLICT, and the run fails with it (and reports nothing). A stray
// update under the fanout's prefix is no watcher's receipt of the fanout's put either.
func TestRunFailsWhenAnOpFails(t *testing.T) {
	t.Parallel()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	c := devClient(t, s)
	doc, err := Document(DocumentBytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step, key, phase string
		conflict         bool
	}{
		{"serial CAS:", "cas/o-001", "serial CAS", true},
		{"concurrent writers:", "writers/w-001", "concurrent writers", true},
		{"fanout: %d rounds", fanoutKey, "fanout", true},
		// Every watcher gets this update first: counted as a receipt, it would end the first round
		// before any watcher had the put's.
		{"fanout: %d rounds", fanoutPrefix + "stray", "fanout", false},
	} {
		cfg := smallConfig(s)
		cfg.Owners, cfg.Writers, cfg.Rounds = 3, 3, 3
		wrote := false
		cfg.Logf = atStep(tc.step, func() {
			// The bench's own document, so that its clean up removes it as one of its keys.
			_, err := c.Put(ctxT(t), wire.PutRequest{Namespace: cfg.Namespace, Key: tc.key, Schema: DocumentSchema, Document: doc})
			if err != nil {
				t.Errorf("put %s: %v", tc.key, err)
			}
			wrote = true
		})
		rep, err := Run(ctxT(t), cfg)
		if !wrote {
			t.Fatalf("%s: step %q never came: %v", tc.key, tc.step, err)
		}
		if err == nil || rep != nil {
			t.Fatalf("%s rewritten behind the bench: Run reported %+v, %v; want a failure", tc.key, rep, err)
		}
		if !strings.Contains(err.Error(), "bench: "+tc.phase+":") {
			t.Errorf("%s rewritten: %v, want the %s phase's failure", tc.key, err, tc.phase)
		}
		if tc.conflict != errors.Is(err, wire.ErrConflict) {
			t.Errorf("%s rewritten: %v, want a CONFLICT: %v", tc.key, err, tc.conflict)
		}
		if l, err := c.List(ctxT(t), wire.ListRequest{Namespace: cfg.Namespace}); err != nil || len(l.Entries) != 0 {
			t.Fatalf("after the failed run the namespace holds %d entries (%v)", len(l.Entries), err)
		}
	}
}

// The idle memory is read with the namespace holding what the report says: IdleResult.BenchEntries
// of the bench's entries (the idle phase's alone, or with Keep every phase's), no other key of the
// bench's, and the table says so.
func TestRunIdleMemoryIsReadWithTheEntriesReported(t *testing.T) {
	t.Parallel()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	c := devClient(t, s)
	for _, keep := range []bool{false, true} {
		cfg := smallConfig(s)
		cfg.MetricsURL, cfg.Keep = s.HTTP()+"/metrics", keep
		cfg.Owners, cfg.Writers, cfg.Entries, cfg.Idle = 2, 3, 4, 10*time.Millisecond
		held := map[string]int{}
		cfg.Logf = atStep("idle memory: waiting", func() {
			l, err := c.List(ctxT(t), wire.ListRequest{Namespace: cfg.Namespace, Limit: wire.MaxListLimit})
			if err != nil {
				t.Error(err)
				return
			}
			for _, e := range l.Entries {
				prefix, _, _ := strings.Cut(e.Key, "/")
				held[prefix+"/"]++
			}
		})
		rep, err := Run(ctxT(t), cfg)
		if err != nil {
			t.Fatalf("keep %v: %v\n%s", keep, err, s.Logs())
		}
		want := map[string]int{idlePrefix: cfg.Entries}
		if keep {
			want[serialPrefix], want[writerPrefix], want[fanoutPrefix] = cfg.Owners, cfg.Writers, 1
		}
		if fmt.Sprint(held) != fmt.Sprint(want) {
			t.Errorf("keep %v: while the memory was read the namespace held %v, want %v", keep, held, want)
		}
		total := 0
		for _, n := range held {
			total += n
		}
		if !rep.Idle.Measured || rep.Idle.Entries != cfg.Entries || rep.Idle.BenchEntries != total {
			t.Errorf("keep %v: idle reported as %+v, the namespace held %d of the bench's entries", keep, rep.Idle, total)
		}
		var b strings.Builder
		if err := rep.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		// The figure depends on the wait too (stated gives memory back once idle): it is said.
		if rep.Idle.WaitSeconds != cfg.Idle.Seconds() {
			t.Errorf("keep %v: idle wait reported as %v s, was %v", keep, rep.Idle.WaitSeconds, cfg.Idle)
		}
		for _, say := range []string{fmt.Sprintf("%d entries written (%d bench entries in the namespace), then 10ms idle with one connection", cfg.Entries, total),
			"10ms idle with all 3 connections open"} {
			if !strings.Contains(b.String(), say) {
				t.Errorf("keep %v: the table does not say %q:\n%s", keep, say, b.String())
			}
		}
		// With Keep the next run removes the kept keys as leftovers.
	}
}

// Each figure of the table is the field of the JSON report it names, in its unit: --json and the
// table give the same numbers.
func TestFiguresAreTheReportsFields(t *testing.T) {
	rep := &Report{
		SerialCAS: SerialResult{Ops: 6, Owners: 3, Rounds: 2, P50US: 11, P95US: 12, MaxUS: 13, CommitMeanUS: 14, CommitMeasured: true, RequestRTTP50US: 15},
		Writers: WritersResult{Writers: 3, Ops: 6, Seconds: 0.5, OpsPerSec: 21, P50US: 22, P95US: 23, OpsPerCommit: 24,
			CommitBusyPct: 25, CommitMeasured: true},
		Fanout: FanoutResult{Watches: 4, Connections: 2, Principals: 1, Rounds: 2, P50US: 31, P95US: 32},
		Idle: IdleResult{Entries: 5, BenchEntries: 5, Measured: true, RSSBytes: 41 << 20, RSSMiB: 41, Connections: 3,
			ConnsRSSBytes: 42 << 20, ConnsRSSMiB: 42},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	doc := map[string]map[string]any{}
	for _, phase := range []string{"serial_cas", "writers", "fanout", "idle"} {
		var m map[string]any
		if err := json.Unmarshal(top[phase], &m); err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		doc[phase] = m
	}
	field := map[string]string{
		"serial-cas-p50-us": "serial_cas.p50_us", "serial-cas-p95-us": "serial_cas.p95_us", "serial-cas-max-us": "serial_cas.max_us",
		"serial-commit-mean-us": "serial_cas.commit_mean_us", "request-rtt-p50-us": "serial_cas.request_rtt_p50_us",
		"writers-3-ops/s": "writers.ops_per_sec", "writers-3-p50-us": "writers.p50_us", "writers-3-p95-us": "writers.p95_us",
		"writers-3-ops/commit": "writers.ops_per_commit", "writers-3-commit-busy-pct": "writers.commit_busy_pct",
		"fanout-4-p50-us": "fanout.p50_us", "fanout-4-p95-us": "fanout.p95_us",
		"rss-idle-MiB": "idle.rss_mib", "rss-idle-3-conns-MiB": "idle.conns_rss_mib",
	}
	figs := rep.Figures()
	if len(figs) != len(field) {
		t.Fatalf("%d figures, want %d", len(figs), len(field))
	}
	for _, f := range figs {
		path, ok := field[f.Name]
		if !ok {
			t.Errorf("figure %s is not expected", f.Name)
			continue
		}
		phase, name, _ := strings.Cut(path, ".")
		if v, ok := doc[phase][name].(float64); !ok || v != f.Value || !f.Measured {
			t.Errorf("figure %s = %v (measured %v), the JSON report's %s = %v", f.Name, f.Value, f.Measured, path, doc[phase][name])
		}
	}
	// The MiB are mebibytes of the bytes reported beside them.
	if float64(rep.Idle.RSSBytes)/(1<<20) != rep.Idle.RSSMiB || float64(rep.Idle.ConnsRSSBytes)/(1<<20) != rep.Idle.ConnsRSSMiB {
		t.Errorf("MiB and bytes disagree: %+v", rep.Idle)
	}
}

// The table says how its percentiles are taken (nearest-rank, over every op: no warm-up left out),
// so that a reader can compare them with another tool's.
func TestReportTableSaysHowPercentilesAreTaken(t *testing.T) {
	var b strings.Builder
	if err := (&Report{}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nearest-rank", "warm-up"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table does not say %q:\n%s", want, b.String())
		}
	}
}
