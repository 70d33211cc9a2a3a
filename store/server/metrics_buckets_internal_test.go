package server

import (
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// bucketOf is the index of the first bucket of h whose upper bound holds v, len(buckets) for +Inf.
func bucketOf(h *dto.Histogram, v float64) int {
	for i, b := range h.GetBucket() {
		if v <= b.GetUpperBound() {
			return i
		}
	}
	return len(h.GetBucket())
}

// The latency histograms' buckets tell apart what an SRE alerts on, up to the 30 s a request may
// take before it is given up (NO_REPLY): a fast commit (200 us) from one that waited on a busy disk
// (50 ms), and a commit or request of a few seconds from one that took most of the timeout. A value
// past the last finite bucket is in +Inf only, where histogram_quantile answers the last finite
// bound: with buckets ending near 1 s, a disk that stalls every commit for 20 s would show a p99 of
// 0.8 s, and an alert on "p99 over 2 s" could never fire.
func TestLatencyBucketsSeparateWhatAnSREAlertsOn(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	values := []time.Duration{200 * time.Microsecond, 50 * time.Millisecond, 2 * time.Second, 5 * time.Second, 29 * time.Second}
	for _, d := range values {
		m.Committed(1, d)
		m.observeRequest("put", "OK", d)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{{"state_commit_duration_seconds", nil}, {"state_request_duration_seconds", map[string]string{"op": "put"}}} {
		g := gathered(t, reg, c.name, c.labels)
		if g == nil || g.GetHistogram() == nil {
			t.Fatalf("%s not gathered", c.name)
		}
		h := g.GetHistogram()
		if h.GetSampleCount() != uint64(len(values)) {
			t.Fatalf("%s holds %d observations, want %d", c.name, h.GetSampleCount(), len(values))
		}
		for i, d := range values {
			b := bucketOf(h, d.Seconds())
			if b == len(h.GetBucket()) {
				t.Errorf("%s: %v lands past the last bucket (%vs), in +Inf only", c.name, d, h.GetBucket()[len(h.GetBucket())-1].GetUpperBound())
				continue
			}
			if i > 0 && bucketOf(h, values[i-1].Seconds()) == b {
				t.Errorf("%s: %v and %v land in one bucket (up to %vs)", c.name, values[i-1], d, h.GetBucket()[b].GetUpperBound())
			}
		}
	}
}

// A series a HELP text names is one an SRE copies into a query: every `name{label="value"}` in the
// HELP of the server's metrics names a family that exists, with a label value it takes (the codes
// of state_requests_total are the full SPEC codes, STATE_STORE_ERROR_CODE_STORAGE, not STORAGE).
func TestHelpTextsNameSeriesThatExist(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	named := regexp.MustCompile(`(state_[a-z_]+)\{([a-z_]+)="([^"]*)"\}`)
	checked := 0
	for _, f := range fams {
		for _, ref := range named.FindAllStringSubmatch(f.GetHelp(), -1) {
			checked++
			if gathered(t, reg, ref[1], map[string]string{ref[2]: ref[3]}) == nil {
				t.Errorf("the HELP of %s names %s, which no series is", f.GetName(), ref[0])
			}
		}
		for _, name := range regexp.MustCompile(`state_[a-z_]+`).FindAllString(f.GetHelp(), -1) {
			if byName[name] == nil {
				t.Errorf("the HELP of %s names %s, which is no metric", f.GetName(), name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no HELP names a series: the check checked nothing")
	}
}
