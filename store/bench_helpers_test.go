package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/policy"
)

// Qualification workload constants (the seed's "Measured performance" section).
const (
	qualOwners    = 127                     // simulated owner ids
	qualRounds    = 30                      // serial CAS rounds
	qualOps       = qualOwners * qualRounds // 3,810 operations per variant
	qualDocBytes  = 2193                    // compact size of the media intent document
	qualIntentKey = "intents/front-door"
	qualSchema    = "keeppeek.media-intent.v1"
	// qualBenchTimeout bounds every wait of a qualification benchmark, so a stuck engine fails the
	// benchmark instead of hanging it.
	qualBenchTimeout = 2 * time.Minute
)

// qualDoc is the schema-valid publish media intent of the workload, exactly qualDocBytes compact
// bytes. The padding is plain words and spaces in parameters, so the content guard accepts it.
var qualDoc = func() json.RawMessage {
	head := `{"role":"publish","desired":true,"source_id":"camera-front-door","media_kind":"video",` +
		`"stream_id":"main","variant_id":"h264-720p","output_profile":"web-720p","priority":500,` +
		`"recording_mode":"required","parameters":{"transcoder-a":{"note":"`
	tail := `"}}}`
	n := qualDocBytes - len(head) - len(tail)
	words := strings.Repeat("plain words and spaces keep the guard happy ", n/40+1)
	pad := strings.TrimRight(words[:n-1], " ") // never end with a space
	pad += strings.Repeat(".", n-len(pad))
	return json.RawMessage(head + pad + tail)
}()

// qualCompactLen returns the length of doc's compact JSON encoding.
func qualCompactLen(tb testing.TB, doc []byte) int {
	tb.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, doc); err != nil {
		tb.Fatalf("compact: %v", err)
	}
	return buf.Len()
}

// qualCheckDoc asserts the workload document is exactly qualDocBytes compact bytes.
func qualCheckDoc(tb testing.TB) {
	tb.Helper()
	if n := qualCompactLen(tb, qualDoc); n != qualDocBytes {
		tb.Fatalf("workload document is %d compact bytes, want %d", n, qualDocBytes)
	}
}

// qualOwner is owner i of the CAS workload: a non-admin principal writing its own user namespace.
func qualOwner(i int) (policy.Principal, string) {
	id := fmt.Sprintf("owner-%03d", i)
	return policy.Principal{ID: id}, "user/" + id
}

// qualCtx is a context bounded by qualBenchTimeout, cancelled when the benchmark ends.
func qualCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), qualBenchTimeout)
	b.Cleanup(cancel)
	return ctx
}

// qualLatencies collects per-operation latencies and reports their percentiles.
type qualLatencies struct {
	mu      sync.Mutex
	samples []time.Duration
}

func (l *qualLatencies) add(d time.Duration) {
	l.samples = append(l.samples, d)
}

// merge appends another goroutine's samples; safe for concurrent use.
func (l *qualLatencies) merge(ds []time.Duration) {
	l.mu.Lock()
	l.samples = append(l.samples, ds...)
	l.mu.Unlock()
}

// percentile is the nearest-rank percentile p (0 < p <= 100) of sorted samples.
func qualPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func qualUs(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// p50 is the median sample.
func (l *qualLatencies) p50() time.Duration {
	s := slices.Clone(l.samples)
	slices.Sort(s)
	return qualPercentile(s, 50)
}

// report sorts the samples and reports p50-us, p95-us and max-us with the given metric prefix.
func (l *qualLatencies) report(b *testing.B, prefix string) {
	b.Helper()
	if len(l.samples) == 0 {
		b.Fatalf("no latency samples")
	}
	s := slices.Clone(l.samples)
	slices.Sort(s)
	b.ReportMetric(qualUs(qualPercentile(s, 50)), prefix+"p50-us")
	b.ReportMetric(qualUs(qualPercentile(s, 95)), prefix+"p95-us")
	b.ReportMetric(qualUs(s[len(s)-1]), prefix+"max-us")
}

// qualErr keeps the first error of concurrent workers.
type qualErr struct {
	once sync.Once
	err  error
}

func (e *qualErr) set(err error) { e.once.Do(func() { e.err = err }) }

// qualBolt returns the bbolt database of a durable store (nil for an in-memory one), for the
// diagnostic metrics of the qualification benchmarks.
func qualBolt(s *Store) *bolt.DB {
	if bb, ok := s.be.(*boltBackend); ok {
		return bb.db
	}
	return nil
}

// qualBoltWrites is the number of page writes bbolt performed so far (nil db: 0).
func qualBoltWrites(db *bolt.DB) int64 {
	if db == nil {
		return 0
	}
	st := db.Stats()
	return st.TxStats.GetWrite()
}

// qualBoltWriteTime is the time bbolt spent so far writing committed pages to disk, the meta page and
// both fdatasyncs included.
func qualBoltWriteTime(db *bolt.DB) time.Duration {
	st := db.Stats()
	return st.TxStats.GetWriteTime()
}

// qualCommitCounter wraps a store's backend to count commits (one per batch), so a benchmark can
// report how many mutations shared a commit. Install it before the first mutation.
type qualCommitCounter struct {
	backend
	commits atomic.Int64
}

func (c *qualCommitCounter) commit(bt *batch) error {
	c.commits.Add(1)
	return c.backend.commit(bt)
}

// qualCountCommits installs a qualCommitCounter on s. The committer reads s.be only after it takes a
// mutation from the queue, so the swap happens before any use.
func qualCountCommits(s *Store) *qualCommitCounter {
	c := &qualCommitCounter{backend: s.be}
	s.be = c
	return c
}
