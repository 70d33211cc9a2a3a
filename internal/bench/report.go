package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Report is what Run measured. Latencies are in microseconds: a request's from just before it is
// sent to its reply decoded and checked, a fanout round's from just before its put is sent until the
// last watcher holds the update. Percentiles are nearest-rank (no interpolation) over every op of a
// phase, the first ones included (no warm-up is left out; each phase's keys are created beforehand,
// unmeasured); a failed op fails the run, it is never a sample.
type Report struct {
	Namespace     string        `json:"namespace"`
	Schema        string        `json:"schema"`
	DocumentBytes int           `json:"document_bytes"`
	Principals    int           `json:"principals"`
	ServerVersion string        `json:"server_version"`
	SerialCAS     SerialResult  `json:"serial_cas"`
	Writers       WritersResult `json:"writers"`
	Fanout        FanoutResult  `json:"fanout"`
	Idle          IdleResult    `json:"idle"`
}

// SerialResult is the serial compare-and-set phase.
type SerialResult struct {
	Ops    int     `json:"ops"`
	Owners int     `json:"owners"`
	Rounds int     `json:"rounds"`
	P50US  float64 `json:"p50_us"`
	P95US  float64 `json:"p95_us"`
	MaxUS  float64 `json:"max_us"`
	// CommitMeanUS is stated's mean database commit (fsync included) over the phase, from its
	// metrics: how much of a put is the disk. CommitMeasured is false without a metrics URL.
	CommitMeanUS   float64 `json:"commit_mean_us,omitempty"`
	CommitMeasured bool    `json:"commit_measured"`
	// RequestRTTP50US is the p50 round trip of an info request over the same connection, measured
	// before the phase: the transport's and the server's share of a request that writes nothing.
	RequestRTTP50US float64 `json:"request_rtt_p50_us"`
}

// WritersResult is the concurrent writers phase.
type WritersResult struct {
	Writers   int     `json:"writers"`
	Ops       int     `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50US     float64 `json:"p50_us"`
	P95US     float64 `json:"p95_us"`
	// OpsPerCommit is how many changes shared one of stated's commits over the phase, and
	// CommitBusyPct the share of the phase's wall time stated spent in commits (their page writes,
	// fsyncs and CPU, one commit at a time): near 100 the commits are the bottleneck, and what slows
	// them (the disk, or CPU the commits wait for) decides the throughput. From stated's metrics;
	// CommitMeasured is false without a metrics URL.
	OpsPerCommit   float64 `json:"ops_per_commit,omitempty"`
	CommitBusyPct  float64 `json:"commit_busy_pct,omitempty"`
	CommitMeasured bool    `json:"commit_measured"`
}

// FanoutResult is the fanout phase: the time from the start of a put until the last of Watches
// watchers held the update.
type FanoutResult struct {
	Watches     int     `json:"watches"`
	Connections int     `json:"connections"`
	Principals  int     `json:"principals"`
	Rounds      int     `json:"rounds"`
	P50US       float64 `json:"p50_us"`
	P95US       float64 `json:"p95_us"`
}

// IdleResult is stated's resident set size, idle, with Entries entries written (BenchEntries of
// the bench's entries in the namespace, more than Entries with Config.Keep): RSS once the bench
// closed all its connections but one, ConnsRSS before that, with Connections open, each read
// WaitSeconds (Config.Idle) after the change. Measured is false when no metrics URL was given.
type IdleResult struct {
	Entries      int  `json:"entries"`
	BenchEntries int  `json:"bench_entries"`
	Measured     bool `json:"measured"`
	// WaitSeconds is how long the bench waited, idle, before each read: stated gives memory back
	// only once its requests and clients have been still for a while (about a second).
	WaitSeconds   float64 `json:"wait_seconds,omitempty"`
	RSSBytes      int64   `json:"rss_bytes,omitempty"`
	RSSMiB        float64 `json:"rss_mib,omitempty"`
	Connections   int     `json:"connections,omitempty"`
	ConnsRSSBytes int64   `json:"conns_rss_bytes,omitempty"`
	ConnsRSSMiB   float64 `json:"conns_rss_mib,omitempty"`
}

// Figure is one reported number. Name is the go test -bench metric unit: serial-cas-p50-us,
// writers-127-ops/s, fanout-1024-p95-us, rss-idle-MiB, ... (the counts are the run's).
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Measured is false for a figure that was not measured (rss-idle-MiB without a metrics URL).
	Measured bool `json:"measured"`
	// Note says, for the table, what workload the figure (and those after it, up to the next note)
	// came from.
	Note string `json:"note,omitempty"`
}

// Figures lists the report's numbers in a fixed order.
func (r *Report) Figures() []Figure {
	s, w, f, i := r.SerialCAS, r.Writers, r.Fanout, r.Idle
	n, k := w.Writers, f.Watches
	wait := time.Duration(math.Round(i.WaitSeconds * float64(time.Second)))
	return []Figure{
		{"serial-cas-p50-us", s.P50US, true, fmt.Sprintf("%d ops: %d owners x %d rounds, one connection, keys cas/o-*", s.Ops, s.Owners, s.Rounds)},
		{"serial-cas-p95-us", s.P95US, true, ""},
		{"serial-cas-max-us", s.MaxUS, true, ""},
		{"serial-commit-mean-us", s.CommitMeanUS, s.CommitMeasured, "stated's mean database commit (fsync included) in the serial phase, from its metrics"},
		{"request-rtt-p50-us", s.RequestRTTP50US, true, fmt.Sprintf("%d info requests over the same connection: a request that writes nothing", rttRequests)},
		{fmt.Sprintf("writers-%d-ops/s", n), w.OpsPerSec, true, fmt.Sprintf("%d ops: %d writers x %d CAS, one connection each, %.2f s",
			w.Ops, w.Writers, w.Ops/max(w.Writers, 1), w.Seconds)},
		{fmt.Sprintf("writers-%d-p50-us", n), w.P50US, true, ""},
		{fmt.Sprintf("writers-%d-p95-us", n), w.P95US, true, ""},
		{fmt.Sprintf("writers-%d-ops/commit", n), w.OpsPerCommit, w.CommitMeasured, "changes per stated commit in the writers phase, from its metrics"},
		{fmt.Sprintf("writers-%d-commit-busy-pct", n), w.CommitBusyPct, w.CommitMeasured,
			"share of the writers phase stated spent in commits (near 100: commits are the bottleneck)"},
		{fmt.Sprintf("fanout-%d-p50-us", k), f.P50US, true, fmt.Sprintf("%d watches over %d connections (%d principal(s)), %d puts; until the last watcher has it",
			f.Watches, f.Connections, f.Principals, f.Rounds)},
		{fmt.Sprintf("fanout-%d-p95-us", k), f.P95US, true, ""},
		{"rss-idle-MiB", i.RSSMiB, i.Measured, fmt.Sprintf("%d entries written (%d bench entries in the namespace), then %v idle with one connection",
			i.Entries, i.BenchEntries, wait)},
		{fmt.Sprintf("rss-idle-%d-conns-MiB", i.Connections), i.ConnsRSSMiB, i.Measured,
			fmt.Sprintf("the same, before the bench closed all its connections but one: %v idle with all %d connections open", wait, i.Connections)},
	}
}

// WriteTable prints the report for people: what ran, then one figure per line.
func (r *Report) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "stated %s, namespace %s, %d-byte %s documents\n", r.ServerVersion, r.Namespace, r.DocumentBytes, r.Schema)
	fmt.Fprintf(out, "%s\n\n", percentilesNote)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tWORKLOAD")
	for _, fig := range r.Figures() {
		v := "not measured (no --metrics-url)"
		if fig.Measured {
			v = formatValue(fig.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", fig.Name, v, fig.Note)
	}
	return tw.Flush()
}

func formatValue(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// percentilesNote says, under the table's title, how its latencies and percentiles are taken.
const percentilesNote = "a request's latency: from just before it is sent to its reply decoded and checked (a failed op fails the run); " +
	"percentiles: nearest-rank, over every op of the phase (no warm-up left out)"

// stats are latency percentiles in microseconds.
type stats struct{ p50, p95, max float64 }

func summarize(lat []time.Duration) stats {
	if len(lat) == 0 {
		return stats{}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return stats{p50: micros(percentile(s, 0.50)), p95: micros(percentile(s, 0.95)), max: micros(s[len(s)-1])}
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
