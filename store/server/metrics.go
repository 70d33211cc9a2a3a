package server

import (
	"errors"
	"time"

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
	CommitSeconds  prometheus.Histogram
	CommitBatch    prometheus.Histogram
	CommitFailures prometheus.Counter
	WatchClosures  *prometheus.CounterVec
	WatchSweeps    prometheus.Counter
	WatchesDropped prometheus.Counter
	Heartbeats     *prometheus.CounterVec
	BackendInfo    *prometheus.GaugeVec
}

// NewMetrics makes the metrics and registers them, with Go, process and build info collectors, on reg.
// A Go, process or build info collector reg already holds is kept (prometheus.DefaultRegisterer comes
// with the first two), so the server's metrics can join an embedding program's registry.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_requests_total", Help: "State API requests by op and result code (OK, a SPEC error code, NO_REPLY: the request timed out in the store, its outcome unknown, and got no reply, or REPLY_REFUSED: not served, its reply subject lay outside its principal's space).",
		}, []string{"op", "code"}),
		RequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "state_request_duration_seconds", Help: "State API request latency by op.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}, []string{"op"}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "state_commit_duration_seconds", Help: "Database commit latency, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		CommitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "state_commit_batch_size", Help: "Changes per commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		CommitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_commit_failures_total", Help: "Commits the disk refused.",
		}),
		WatchClosures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_watch_closures_total", Help: "Watches closed by the server, by reason.",
		}, []string{"reason"}),
		WatchSweeps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_watch_sweeps_total", Help: "Looks for watches whose subscriber is gone (embedded NATS only).",
		}),
		WatchesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "state_watches_dropped_total", Help: "Watches dropped because no one subscribed to their delivery subject any more.",
		}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "state_heartbeats_total", Help: "Heartbeats seen, by outcome (accepted; superseded: replaced, while it waited, by a newer heartbeat of its worker; refused: a new worker of a principal at max_workers_per_principal, or of a full system namespace; dropped: broke a rule, failed, or found too many workers waiting).",
		}, []string{"outcome"}),
		BackendInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "state_backend_info", Help: "The storage backend in use (1).",
		}, []string{"type"}),
	}
	reg.MustRegister(m.Requests, m.RequestSeconds, m.CommitSeconds, m.CommitBatch, m.CommitFailures,
		m.WatchClosures, m.WatchSweeps, m.WatchesDropped, m.Heartbeats, m.BackendInfo)
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

func (m *Metrics) observeRequest(op, code string, d time.Duration) {
	m.Requests.WithLabelValues(op, code).Inc()
	m.RequestSeconds.WithLabelValues(op).Observe(d.Seconds())
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
