package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// roundTimeout bounds the wait for every watcher to hold one fanout update.
const roundTimeout = 30 * time.Second

// serial: Owners keys, Rounds compare-and-sets each, one at a time over one connection.
func (r *runner) serial(ctx context.Context) (SerialResult, error) {
	ks := keys(serialPrefix+"o-", r.cfg.Owners)
	revs, err := r.seed(ctx, ks)
	if err != nil {
		return SerialResult{}, err
	}
	ops := r.cfg.Owners * r.cfg.Rounds
	r.logf("serial CAS: %d ops (%d owners x %d rounds) over one connection", ops, r.cfg.Owners, r.cfg.Rounds)
	c := r.conns[0]
	// The info requests also tell whether the metrics are this stated's: another one's (a default
	// --metrics-url while --nats-url names another server) would count none of them, and its memory and
	// commit figures would be reported as this one's.
	var infoBefore float64
	if r.cfg.MetricsURL != "" {
		if infoBefore, err = r.infoCount(ctx); err != nil {
			return SerialResult{}, err
		}
	}
	rtt := make([]time.Duration, 0, rttRequests)
	for range rttRequests {
		ictx, cancel := r.bounded(ctx)
		start := time.Now()
		_, err := c.Info(ictx)
		d := time.Since(start)
		cancel()
		if err != nil {
			return SerialResult{}, fmt.Errorf("info: %w", err)
		}
		rtt = append(rtt, d)
	}
	if r.cfg.MetricsURL != "" {
		after, err := r.infoCount(ctx)
		if err != nil {
			return SerialResult{}, err
		}
		if after-infoBefore < rttRequests {
			return SerialResult{}, fmt.Errorf("bench: %s counted %v of the %d info requests just sent: it is not the metrics of the stated at %s (set --metrics-url, or --metrics-url '' to skip them)",
				r.cfg.MetricsURL, after-infoBefore, rttRequests, r.cfg.URL)
		}
	}
	commits, err := r.startMeter(ctx, commitSum, commitCount)
	if err != nil {
		return SerialResult{}, err
	}
	lat := make([]time.Duration, 0, ops)
	for range r.cfg.Rounds {
		for o, key := range ks {
			expected := revs[o]
			pctx, cancel := r.bounded(ctx)
			start := time.Now()
			e, err := c.Put(pctx, r.put(key, &expected))
			d := time.Since(start)
			cancel()
			if err != nil {
				return SerialResult{}, fmt.Errorf("put %s at revision %d: %w", key, expected, err)
			}
			revs[o] = int64(e.Revision)
			lat = append(lat, d)
		}
	}
	s := summarize(lat)
	res := SerialResult{Ops: ops, Owners: r.cfg.Owners, Rounds: r.cfg.Rounds, P50US: s.p50, P95US: s.p95, MaxUS: s.max,
		RequestRTTP50US: summarize(rtt).p50}
	grown, err := commits.since(ctx)
	if err != nil {
		return SerialResult{}, err
	}
	if grown != nil && grown[1] > 0 {
		res.CommitMeasured, res.CommitMeanUS = true, math.Round(grown[0]/grown[1]*1e6)
	}
	return res, nil
}

// writers: Writers goroutines, each with its own connection and key, Rounds compare-and-sets each,
// started together.
func (r *runner) writers(ctx context.Context) (WritersResult, error) {
	n := r.cfg.Writers
	ks := keys(writerPrefix+"w-", n)
	revs, err := r.seed(ctx, ks)
	if err != nil {
		return WritersResult{}, err
	}
	commits, err := r.startMeter(ctx, commitSum, commitCount, batchSum)
	if err != nil {
		return WritersResult{}, err
	}
	r.logf("concurrent writers: %d writers x %d CAS, one connection each", n, r.cfg.Rounds)
	lats := make([][]time.Duration, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, rev := r.conns[i], revs[i]
			lat := make([]time.Duration, 0, r.cfg.Rounds)
			<-start
			for range r.cfg.Rounds {
				expected := rev
				pctx, cancel := r.bounded(ctx)
				t0 := time.Now()
				e, err := c.Put(pctx, r.put(ks[i], &expected))
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs[i] = fmt.Errorf("writer %d: put %s at revision %d: %w", i, ks[i], expected, err)
					return
				}
				rev = int64(e.Revision)
				lat = append(lat, d)
			}
			lats[i] = lat
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return WritersResult{}, err
	}
	all := slices.Concat(lats...)
	s := summarize(all)
	res := WritersResult{Writers: n, Ops: len(all), Seconds: elapsed.Seconds(),
		OpsPerSec: float64(len(all)) / elapsed.Seconds(), P50US: s.p50, P95US: s.p95}
	grown, err := commits.since(ctx)
	if err != nil {
		return WritersResult{}, err
	}
	if grown != nil && grown[1] > 0 {
		res.CommitMeasured = true
		res.OpsPerCommit = math.Round(grown[2]/grown[1]*10) / 10
		res.CommitBusyPct = math.Round(grown[0]/elapsed.Seconds()*1000) / 10
	}
	return res, nil
}

// arrival is one watcher's receipt of one update.
type arrival struct {
	watcher int
	rev     uint64
	at      time.Time
	err     error
}

// fanout: Watches caches (client.Cache, acknowledging as its defaults do) of one key over Connections
// connections; each round one put, timed until the last cache holds it.
func (r *runner) fanout(ctx context.Context) (res FanoutResult, err error) {
	zero := int64(0)
	pctx, cancel := r.bounded(ctx)
	e, err := r.conns[0].Put(pctx, r.put(fanoutKey, &zero))
	cancel()
	if err != nil {
		return res, fmt.Errorf("create %s: %w", fanoutKey, err)
	}
	rev := e.Revision
	n, nconn := r.cfg.Watches, r.cfg.Connections
	r.logf("fanout: opening %d watches over %d connections", n, nconn)
	run := randomHex(4)
	caches := make([]*client.Cache, n)
	results := make(chan arrival, n)
	done := make(chan struct{}) // closed when the rounds end: caches stop reporting
	defer func() {
		close(done)
		// Close every cache that started, in parallel per connection; each unwatches.
		cerr := parallel(nconn, nconn, func(_, ci int) error {
			var errs []error
			for j := ci; j < n; j += nconn {
				if caches[j] != nil {
					errs = append(errs, caches[j].Close())
				}
			}
			return errors.Join(errs...)
		})
		if cerr != nil && err == nil {
			err = fmt.Errorf("close caches: %w", cerr)
		}
	}()
	// A Cache retries a watch that timed out until its context ends: each first snapshot (an info,
	// the watch, an info) gets a bound of its own.
	watchTimeout := 4 * r.cfg.RequestTimeout
	err = parallel(nconn, nconn, func(_, ci int) error {
		for j := ci; j < n; j += nconn {
			wctx, cancel := context.WithTimeout(ctx, watchTimeout)
			k, err := r.conns[ci].NewCache(wctx, client.CacheOptions{WatchID: fmt.Sprintf("bench-%s-%04d", run, j),
				Namespace: r.cfg.Namespace, KeyPrefix: fanoutPrefix, Handlers: arrivals(j, results, done)})
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					err = fmt.Errorf("no snapshot within %v: %w", watchTimeout, err)
				}
				return fmt.Errorf("watch %d as %s: %w", j, r.conns[ci].Principal(), err)
			}
			caches[j] = k
			// The snapshot's revision is the namespace's: writes to other keys of the namespace may
			// have moved it past the fanout key's.
			if got, ok := k.Get(fanoutKey); !ok || got.Revision != rev {
				return fmt.Errorf("watch %d: the snapshot at %d lacks %s at revision %d", j, k.Revision(), fanoutKey, rev)
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}

	r.logf("fanout: %d rounds", r.cfg.Rounds)
	lat := make([]time.Duration, 0, r.cfg.Rounds)
	for round := range r.cfg.Rounds {
		expected := int64(rev)
		pctx, cancel := r.bounded(ctx)
		t0 := time.Now()
		e, err := r.conns[0].Put(pctx, r.put(fanoutKey, &expected))
		cancel()
		if err != nil {
			return res, fmt.Errorf("round %d: put: %w", round+1, err)
		}
		rev = e.Revision
		var last time.Time
		timer := time.NewTimer(roundTimeout)
		for got := 0; got < n; got++ {
			select {
			case a := <-results:
				if a.err != nil {
					timer.Stop()
					return res, fmt.Errorf("round %d: watcher %d: %w", round+1, a.watcher, a.err)
				}
				if a.rev != rev {
					timer.Stop()
					return res, fmt.Errorf("round %d: watcher %d got revision %d, want %d", round+1, a.watcher, a.rev, rev)
				}
				if a.at.After(last) {
					last = a.at
				}
			case <-timer.C:
				return res, fmt.Errorf("round %d: %d of %d watchers got the update within %v", round+1, got, n, roundTimeout)
			case <-ctx.Done():
				timer.Stop()
				return res, ctx.Err()
			}
		}
		timer.Stop()
		lat = append(lat, last.Sub(t0))
	}
	s := summarize(lat)
	// Watch j is on connection j % nconn: with fewer watches than connections, only the first
	// Watches connections hold one.
	used := min(n, nconn)
	principals := map[string]bool{}
	for _, c := range r.conns[:used] {
		principals[c.Principal()] = true
	}
	return FanoutResult{Watches: n, Connections: used, Principals: len(principals), Rounds: r.cfg.Rounds, P50US: s.p50, P95US: s.p95}, nil
}

// arrivals are the handlers of fanout cache j: each update it applies is reported with the time it
// was applied. A resync after the first snapshot is reported as an error: the rounds expect every
// update to arrive as one.
func arrivals(j int, results chan<- arrival, done <-chan struct{}) client.Handlers {
	send := func(a arrival) {
		a.watcher = j
		select {
		case results <- a:
		case <-done:
		}
	}
	snapshots := 0
	return client.Handlers{
		OnPut: func(e wire.Entry) { send(arrival{rev: e.Revision, at: time.Now()}) },
		OnDelete: func(key string, _ uint64) {
			send(arrival{err: fmt.Errorf("%s deleted", key)})
		},
		OnExpire: func(key string, _ uint64) {
			send(arrival{err: fmt.Errorf("%s expired", key)})
		},
		OnResync: func(_ []wire.Entry, rev uint64) {
			if snapshots++; snapshots > 1 {
				send(arrival{err: fmt.Errorf("resynced at revision %d", rev)})
			}
		},
	}
}

// idle: Entries entries written, Idle waited, stated's resident set size read from its metrics; then
// every connection but one closed, Idle waited, and the resident set size read again. It leaves the
// runner with that one connection.
func (r *runner) idle(ctx context.Context) (IdleResult, error) {
	if !r.cfg.Keep {
		r.logf("idle memory: removing the keys of the earlier phases")
		if err := r.deleteUnder(ctx, serialPrefix, writerPrefix, fanoutPrefix); err != nil {
			return IdleResult{}, err
		}
	}
	r.logf("idle memory: writing %d entries", r.cfg.Entries)
	ks := keys(idlePrefix+"e-", r.cfg.Entries)
	err := parallel(len(ks), len(r.conns), func(w, i int) error {
		zero := int64(0) // create only: the keys are new, and never someone else's
		pctx, cancel := r.bounded(ctx)
		defer cancel()
		if _, err := r.conns[w].Put(pctx, r.put(ks[i], &zero)); err != nil {
			return fmt.Errorf("put %s: %w", ks[i], err)
		}
		return nil
	})
	if err != nil {
		return IdleResult{}, err
	}
	res := IdleResult{Entries: r.cfg.Entries, Connections: len(r.conns)}
	if r.cfg.Keep {
		res.BenchEntries = r.cfg.Entries + r.cfg.Owners + r.cfg.Writers + 1
	} else {
		res.BenchEntries = r.cfg.Entries
	}
	if r.cfg.MetricsURL == "" {
		r.logf("idle memory: no metrics URL, not measured")
		return res, nil
	}
	// First with every connection still open, then, as an idle server usually is, with the load's
	// clients gone: one connection left. stated trims its memory after either change.
	res.WaitSeconds = r.cfg.Idle.Seconds()
	r.logf("idle memory: waiting %v with %d connections open", r.cfg.Idle, len(r.conns))
	if err := sleep(ctx, r.cfg.Idle); err != nil {
		return res, err
	}
	b, err := r.residentBytes(ctx)
	if err != nil {
		return res, err
	}
	res.ConnsRSSBytes, res.ConnsRSSMiB = int64(b), b/(1<<20)
	for _, c := range r.conns[1:] {
		c.Conn().Close()
	}
	r.conns = r.conns[:1]
	r.logf("idle memory: waiting %v with one connection open", r.cfg.Idle)
	if err := sleep(ctx, r.cfg.Idle); err != nil {
		return res, err
	}
	if b, err = r.residentBytes(ctx); err != nil {
		return res, err
	}
	res.Measured, res.RSSBytes, res.RSSMiB = true, int64(b), b/(1<<20)
	return res, nil
}

// residentBytes reads stated's process_resident_memory_bytes.
func (r *runner) residentBytes(ctx context.Context) (float64, error) {
	v, err := r.metricValues(ctx, "process_resident_memory_bytes")
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// metricValues reads the samples named names (without labels) from stated's metrics, in the order
// asked.
func (r *runner) metricValues(ctx context.Context, names ...string) ([]float64, error) {
	all, err := r.metrics(ctx)
	if err != nil {
		return nil, err
	}
	values := make([]float64, len(names))
	for i, name := range names {
		v, ok := all[name]
		if !ok {
			return nil, fmt.Errorf("read metrics: %s has no %s (is it stated's /metrics?)", r.cfg.MetricsURL, name)
		}
		values[i] = v
	}
	return values, nil
}

// processStart is the process collector's start time of the process serving the metrics.
const processStart = "process_start_time_seconds"

// ErrRestarted marks a run that stated's metrics show restarted: its figures would span two processes.
var ErrRestarted = errors.New("stated restarted during the bench")

// metrics reads every sample of stated's metrics and checks that they come from the process the
// bench read first. A stated restarted since counts from zero again and holds another memory: a
// counter's growth over a phase would mix the two processes (and could even come out positive, as a
// plausible figure), and a resident set size would not be of the process the bench loaded.
func (r *runner) metrics(ctx context.Context) (map[string]float64, error) {
	all, err := scrapeMetrics(ctx, r.cfg.MetricsURL, r.cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	start, ok := all[processStart]
	switch {
	case !ok: // a platform without it: since still catches counters that went back
	case r.statedStart == 0:
		r.statedStart = start
	case start != r.statedStart:
		return nil, fmt.Errorf("%w: %s reports %s %.2f, %.2f when the bench first read it; its figures are not reported",
			ErrRestarted, r.cfg.MetricsURL, processStart, start, r.statedStart)
	}
	return all, nil
}

// scrapeMetrics reads every sample of a Prometheus text endpoint, keyed by its name with its labels
// as the endpoint writes them.
func scrapeMetrics(ctx context.Context, url string, timeout time.Duration) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read metrics: %s answers %s", url, resp.Status)
	}
	all := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("read metrics: %s %q: %w", f[0], f[1], err)
		}
		all[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return all, nil
}

// infoServed is the series of stated's metrics that counts the info requests it answered.
const infoServed = `state_requests_total{code="OK",op="info"}`

// infoCount returns how many info requests the metrics endpoint's stated answered (0 before its
// first).
func (r *runner) infoCount(ctx context.Context) (float64, error) {
	all, err := r.metrics(ctx)
	if err != nil {
		return 0, err
	}
	if _, ok := all["state_commit_duration_seconds_count"]; !ok {
		return 0, fmt.Errorf("read metrics: %s has no state_commit_duration_seconds_count (is it stated's /metrics?)", r.cfg.MetricsURL)
	}
	return all[infoServed], nil
}

// meter reads some of stated's metrics at the start of a phase, so that since can tell how much each
// grew during it. Without a metrics URL it reads nothing and since returns nil.
type meter struct {
	r     *runner
	names []string
	start []float64
}

func (r *runner) startMeter(ctx context.Context, names ...string) (*meter, error) {
	m := &meter{r: r, names: names}
	if r.cfg.MetricsURL == "" {
		return m, nil
	}
	var err error
	m.start, err = r.metricValues(ctx, names...)
	return m, err
}

// since returns how much each metric grew since startMeter, in the order they were named.
func (m *meter) since(ctx context.Context) ([]float64, error) {
	if m.start == nil {
		return nil, nil
	}
	now, err := m.r.metricValues(ctx, m.names...)
	if err != nil {
		return nil, err
	}
	for i := range now {
		if now[i] < m.start[i] {
			// Counters only grow within one process.
			return nil, fmt.Errorf("%w: %s went from %v to %v during the phase", ErrRestarted, m.names[i], m.start[i], now[i])
		}
		now[i] -= m.start[i]
	}
	return now, nil
}

// rttRequests is how many info requests measure a request's round trip before the serial phase.
const rttRequests = 200

// Stated's commit latency histogram: its sum and count give the mean commit of a phase; the batch
// size histogram's sum, the changes those commits carried.
const (
	commitSum   = "state_commit_duration_seconds_sum"
	commitCount = "state_commit_duration_seconds_count"
	batchSum    = "state_commit_batch_size_sum"
)

// parallel runs fn(worker, i) for every i in [0, n) on min(workers, n) goroutines; worker is the
// goroutine's index, so it can pick a connection. After the first error no new i starts; that error
// is returned.
func parallel(n, workers int, fn func(worker, i int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		first  error
		wg     sync.WaitGroup
	)
	for w := range min(workers, n) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
