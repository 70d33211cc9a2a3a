package server

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/wire"
)

// Metrics are the server's Prometheus metrics. Namespaces are labelled by their kind (system,
// service, group, user), so label cardinality stays bounded however many namespaces exist.
type Metrics struct {
	Requests       *prometheus.CounterVec
	RequestSeconds *prometheus.HistogramVec
	// RequestsDropped counts, by op, the requests NATS dropped before the server took them. It is
	// brought up to date whenever the registry is gathered (see droppedRequests).
	RequestsDropped *prometheus.CounterVec
	CommitSeconds   prometheus.Histogram
	CommitBatch     prometheus.Histogram
	CommitFailures  prometheus.Counter
	WatchClosures   *prometheus.CounterVec
	WatchSweeps     prometheus.Counter
	WatchesDropped  prometheus.Counter
	// WatchesIdleClosed counts the watches closed (with ACK_TIMEOUT, so also in WatchClosures)
	// because no request of their client named them within Options.IdleWatch.
	WatchesIdleClosed prometheus.Counter
	// WatchMessagesUnsent counts the watch messages (updates, CLOSED) NATS refused to take from the
	// server: its connection closed, or reconnecting with a full buffer.
	WatchMessagesUnsent prometheus.Counter
	// Heartbeats counts heartbeats by outcome. The ones NATS dropped are added to "dropped" when the
	// registry is gathered, so they may show one scrape late.
	Heartbeats  *prometheus.CounterVec
	BackendInfo *prometheus.GaugeVec

	dropped droppedRequests // feeds RequestsDropped
}

// NewMetrics makes the metrics and registers them, with Go, process and build info collectors, on reg.
// A Go, process or build info collector reg already holds is kept (prometheus.DefaultRegisterer comes
// with the first two), so the server's metrics can join an embedding program's registry. Every series
// of the fixed label sets (each op with each code, heartbeat outcome, close reason) exists from the
// start, at 0; the latency histograms' buckets run from 50 us (requests) or 100 us (commits) to past
// the 30 s request timeout.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_requests_total", Help: "Requests taken, by op (a state operation, or the admin call backup or audit_verify) and result code (OK, a SPEC error code, NO_REPLY: its time in the store ran out (the request timeout, or the server stopped), its outcome unknown, and it got no reply, REPLY_REFUSED: not served, its reply subject lay outside its principal's space, or REPLY_FAILED: served, what it does done, but its reply could not be sent: no reply subject, a connection closed, over max_payload). Requests NATS dropped are in state_requests_dropped_total instead.",
		}, []string{"op", "code"}),
		RequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "state_request_duration_seconds", Help: "Latency of the requests of state_requests_total, by op: from the server taking the request off NATS to its reply, a wait for a free slot (past the server's MaxConcurrentRequests) or in its principal's ack and unwatch queue included.",
			Buckets: latencyBuckets(0.00005),
		}, []string{"op"}),
		RequestsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_requests_dropped_total", Help: "Requests NATS dropped unanswered before the server took them, by op: while the server handles as many requests as it may at once (MaxConcurrentRequests, 1,024 in stated), more wait in its NATS subscription, and past that subscription's pending limits (nats.go's defaults: 500,000 messages or 64 MiB per op) NATS drops them as a slow consumer's. Their requesters time out; raise the bound or add capacity if this grows.",
		}, []string{"op"}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "state_commit_duration_seconds", Help: "Database commit latency, fsync included.",
			Buckets: latencyBuckets(0.0001),
		}),
		CommitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "state_commit_batch_size", Help: "Changes per commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		CommitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_commit_failures_total", Help: "Commits the disk refused: a database commit (its writes answered STORAGE), or a settings-backed namespace's file (that namespace's writes answered STORAGE, the rest of the batch committed without them). A write refused because its settings file could not be read (missing, unparsable) is no commit: every STORAGE answer counts in state_requests_total{code=\"STATE_STORE_ERROR_CODE_STORAGE\"}.",
		}),
		WatchClosures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_watch_closures_total", Help: "Watches the server closed with a CLOSED message, by reason (SPEC section 7.6; the idle closes of state_watches_idle_closed_total included, as ACK_TIMEOUT). An unwatch is no closure, nor is a watch dropped because its subscriber is gone (state_watches_dropped_total).",
		}, []string{"reason"}),
		WatchSweeps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_watch_sweeps_total", Help: "Looks for watches whose subscriber is gone (embedded NATS only).",
		}),
		WatchesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_watches_dropped_total", Help: "Watches dropped because no one subscribed to their delivery subject any more.",
		}),
		WatchesIdleClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_watches_idle_closed_total", Help: "Watches closed with ACK_TIMEOUT (also counted in state_watch_closures_total) because their client sent no request naming them (an ack, of any sequence) within the idle bound ([nats] watch_idle_ms; off by default).",
		}),
		WatchMessagesUnsent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_watch_messages_unsent_total", Help: "Watch messages (updates, CLOSED messages) the server's NATS connection refused to take: closed, or reconnecting with its buffer full. Their watchers see a sequence gap (or an update that never comes, until their liveness check) and resync.",
		}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_heartbeats_total", Help: "Heartbeats seen, by outcome (accepted; superseded: replaced, while it waited, by a newer heartbeat of its worker; refused: a new worker of a principal at max_workers_per_principal, or of a full system namespace, or a worker status over max_document_bytes; dropped: broke a rule, failed, found too many workers waiting, came as the server stopped, or was dropped by NATS, past the heartbeat subscription's pending limits, before the server took it).",
		}, []string{"outcome"}),
		BackendInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "state_backend_info", Help: "The storage backend in use (1).",
		}, []string{"type"}),
	}
	m.dropped.vec = m.RequestsDropped
	// Every series of the fixed label sets exists from the start, at 0: a series that appeared at its
	// first event would show no increase() or rate() there, and an alert on it would miss that event
	// (and, for the requests NATS dropped, read at a scrape, the whole first burst).
	for _, op := range metricOps() {
		for _, code := range requestCodes() {
			m.Requests.WithLabelValues(op, code)
		}
		m.RequestSeconds.WithLabelValues(op)
		m.RequestsDropped.WithLabelValues(op)
	}
	for _, outcome := range heartbeatOutcomes {
		m.Heartbeats.WithLabelValues(outcome)
	}
	for _, reason := range closeReasons {
		m.WatchClosures.WithLabelValues(string(reason))
	}
	reg.MustRegister(m.Requests, m.RequestSeconds, &m.dropped, m.CommitSeconds, m.CommitBatch, m.CommitFailures,
		m.WatchClosures, m.WatchSweeps, m.WatchesDropped, m.WatchesIdleClosed, m.WatchMessagesUnsent, m.Heartbeats, m.BackendInfo)
	for _, c := range []prometheus.Collector{collectors.NewBuildInfoCollector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); !ok {
				panic(err)
			}
		}
	}
	return m
}

// latencyBuckets are the buckets of a latency histogram from start (seconds), doubling up to past a
// minute: past the 30 s a request may wait on the store (Options.RequestTimeout), so that a stalled
// disk or a request that took most of its timeout lands in a bucket of its own, not in +Inf, where
// histogram_quantile would report the last finite bound.
func latencyBuckets(start float64) []float64 {
	var b []float64
	for v := start; v < 60; v *= 2 {
		b = append(b, v)
	}
	return b
}

// metricOps are the values of the op label: the state operations and the admin calls.
func metricOps() []string {
	ops := make([]string, 0, len(wire.Ops)+len(adminOps))
	for _, op := range append(slices.Clone(wire.Ops), adminOps...) {
		ops = append(ops, string(op))
	}
	return ops
}

// requestCodes are the values of state_requests_total's code label.
func requestCodes() []string {
	codes := []string{"OK", codeNoReply, ReplyRefused, ReplyFailed}
	for _, c := range wire.Codes {
		codes = append(codes, string(c))
	}
	return codes
}

// codeNoReply is the code label of a request the store did not finish within the request timeout (or
// as the server stopped): its outcome is unknown and it got no reply.
const codeNoReply = "NO_REPLY"

// heartbeatOutcomes are the values of state_heartbeats_total's outcome label.
var heartbeatOutcomes = []string{"accepted", "superseded", "refused", "dropped"}

// closeReasons are the values of state_watch_closures_total's reason label: SPEC section 7.6's.
var closeReasons = []wire.CloseReason{wire.CloseOverflow, wire.CloseAckTimeout, wire.CloseUnauthorized,
	wire.CloseSnapshotFailed, wire.CloseRestored, wire.CloseShutdown}

func (m *Metrics) observeRequest(op, code string, d time.Duration) {
	m.Requests.WithLabelValues(op, code).Inc()
	m.RequestSeconds.WithLabelValues(op).Observe(d.Seconds())
}

// droppedRequests feeds RequestsDropped (and the dropped heartbeats) from the subscriptions of the
// server's endpoints (and heartbeats). nats.go
// drops a message past a subscription's pending limits and reports the subscription to the
// connection's error handler only when it starts dropping, not for each message, so the handler
// hands the subscription over (watch) and the count is read from the subscription itself
// (Subscription.Dropped) whenever the metrics are gathered. A subscription closed since (the server
// stopped) keeps what was last read from it.
type droppedRequests struct {
	vec  *prometheus.CounterVec // collected (nil in a Metrics not made by NewMetrics)
	mu   sync.Mutex
	subs []*droppingSub
}

type droppingSub struct {
	counter prometheus.Counter
	sub     *nats.Subscription
	seen    int // drops already counted
}

// watch adds to counter, from now on, the messages NATS drops from sub.
func (d *droppedRequests) watch(counter prometheus.Counter, sub *nats.Subscription) {
	d.mu.Lock()
	known := false
	for _, w := range d.subs {
		known = known || w.sub == sub
	}
	if !known {
		d.subs = append(d.subs, &droppingSub{counter: counter, sub: sub})
	}
	d.mu.Unlock()
	d.update()
}

// update adds to the counter what the watched subscriptions dropped since the last update, and
// forgets those that are closed.
func (d *droppedRequests) update() {
	d.mu.Lock()
	defer d.mu.Unlock()
	live := d.subs[:0]
	for _, w := range d.subs {
		n, err := w.sub.Dropped()
		if err != nil {
			continue // closed: nothing more can be dropped from it
		}
		if n > w.seen {
			w.counter.Add(float64(n - w.seen))
			w.seen = n
		}
		live = append(live, w)
	}
	clear(d.subs[len(live):])
	d.subs = live
}

func (d *droppedRequests) Describe(ch chan<- *prometheus.Desc) { d.vec.Describe(ch) }

func (d *droppedRequests) Collect(ch chan<- prometheus.Metric) {
	d.update()
	d.vec.Collect(ch)
}

// heartbeatsDropped has Heartbeats{outcome="dropped"} count what NATS drops from sub, the
// subscription of the heartbeats.
func (m *Metrics) heartbeatsDropped(sub *nats.Subscription) {
	if m.Heartbeats != nil {
		m.dropped.watch(m.Heartbeats.WithLabelValues("dropped"), sub)
	}
}

// requestsDropped has RequestsDropped{op} count what NATS drops from sub, the subscription of op's
// endpoint (nothing, in a Metrics without RequestsDropped).
func (m *Metrics) requestsDropped(op string, sub *nats.Subscription) {
	if m.RequestsDropped != nil {
		m.dropped.watch(m.RequestsDropped.WithLabelValues(op), sub)
	}
}

// Committed implements store.Observer.
func (m *Metrics) Committed(changes int, took time.Duration) {
	m.CommitBatch.Observe(float64(changes))
	m.CommitSeconds.Observe(took.Seconds())
}

// CommitFailed implements store.Observer.
func (m *Metrics) CommitFailed() { m.CommitFailures.Inc() }

// WatchClosed implements store.Observer.
func (m *Metrics) WatchClosed(reason wire.CloseReason) {
	m.WatchClosures.WithLabelValues(string(reason)).Inc()
}

// RegisterStore adds gauges read from st at scrape time: live watches, and entries and bytes per
// namespace kind; and sets state_backend_info{type=backend}.
func (m *Metrics) RegisterStore(reg prometheus.Registerer, st *store.Store, backend string) error {
	m.BackendInfo.WithLabelValues(backend).Set(1)
	c := &storeCollector{st: st,
		watches: prometheus.NewDesc("state_watches", "Live watches.", nil, nil),
		entries: prometheus.NewDesc("state_entries", "Live entries by namespace kind.", []string{"kind"}, nil),
		bytes:   prometheus.NewDesc("state_value_bytes", "Document bytes by namespace kind.", []string{"kind"}, nil),
		nss:     prometheus.NewDesc("state_namespaces", "Namespaces holding at least one entry, by kind.", []string{"kind"}, nil),
	}
	return reg.Register(c)
}

type storeCollector struct {
	st                           *store.Store
	watches, entries, bytes, nss *prometheus.Desc
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.watches
	ch <- c.entries
	ch <- c.bytes
	ch <- c.nss
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st.Stats()
	ch <- prometheus.MustNewConstMetric(c.watches, prometheus.GaugeValue, float64(st.Watches))
	type agg struct {
		entries, bytes, nss float64
	}
	kinds := map[wire.NamespaceKind]*agg{wire.KindSystem: {}, wire.KindService: {}, wire.KindGroup: {}, wire.KindUser: {}}
	for _, ns := range st.PerNamespace {
		kind, _, ok := wire.ParseNamespace(ns.Namespace)
		if !ok {
			continue
		}
		a := kinds[kind]
		a.entries += float64(ns.Entries)
		a.bytes += float64(ns.Bytes)
		if ns.Entries > 0 {
			a.nss++
		}
	}
	for kind, a := range kinds {
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, a.entries, string(kind))
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, a.bytes, string(kind))
		ch <- prometheus.MustNewConstMetric(c.nss, prometheus.GaugeValue, a.nss, string(kind))
	}
}
