package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of the controllers given them as Options.Metrics, in the manner
// of controller-runtime's, every series labelled controller (the controller's Options.Name):
//
//	reconciler_reconcile_total{controller,result}      Reconciles by outcome: success, error (a panic
//	                                                   included), requeue, requeue_after
//	reconciler_reconcile_panics_total{controller}      Reconciles that panicked
//	reconciler_reconcile_duration_seconds{controller}  how long each Reconcile ran
//	reconciler_queue_wait_seconds{controller}          from a key's being ready to its Reconcile's start
//	reconciler_queue_retries_total{controller}         keys scheduled again after their backoff (a
//	                                                   failure, or Result.Requeue)
//	reconciler_queue_depth{controller}                 keys ready, waiting for a worker
//	reconciler_queue_scheduled{controller}             keys waiting for a backoff or a RequeueAfter
//	reconciler_active_reconciles{controller}           Reconciles running
//	reconciler_cache_following{controller}             1 while the cache follows the store
//	                                                   (Cache().Following()), else 0
//	reconciler_cache_resyncs_total{controller}         snapshots the cache installed after its first
//	reconciler_cache_revision{controller}              the namespace revision the cache reflects
//
// A controller's series are there from New on, at 0, so that increase() sees its first event. The
// gauges and the cache's figures are read when the metrics are collected. One Metrics serves
// every controller of a process; their names must differ while they run (New refuses a name in use;
// Stop frees it, and a later controller of that name goes on with its counters).
type Metrics struct {
	reconciles *prometheus.CounterVec
	panics     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	wait       *prometheus.HistogramVec
	retries    *prometheus.CounterVec

	depth, scheduled, active, following, resyncs, revision *prometheus.Desc

	mu          sync.Mutex
	controllers map[string]*Controller
}

// Results of reconciler_reconcile_total.
const (
	resultSuccess      = "success"
	resultError        = "error"
	resultRequeue      = "requeue"
	resultRequeueAfter = "requeue_after"
)

// NewMetrics returns the metrics, registered with reg. It returns reg's error when they cannot be
// registered (another collector there already has their names).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("reconciler: nil Registerer")
	}
	label := []string{"controller"}
	gauge := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, label, nil) }
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reconciler_reconcile_total",
			Help: "Reconciles by outcome: success, error (a panic included), requeue (Result.Requeue), requeue_after (Result.RequeueAfter). A Reconcile the controller's Stop cancelled is not counted."},
			[]string{"controller", "result"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reconciler_reconcile_panics_total",
			Help: "Reconciles that panicked (recovered, and retried as an error)."}, label),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "reconciler_reconcile_duration_seconds",
			Help: "How long each Reconcile ran.", Buckets: durationBuckets}, label),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "reconciler_queue_wait_seconds",
			Help: "How long a key waited in the queue, ready, before its Reconcile started (its backoff or RequeueAfter not included).", Buckets: durationBuckets}, label),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reconciler_queue_retries_total",
			Help: "Keys scheduled again after their per-key backoff: a failed Reconcile, or Result.Requeue."}, label),
		depth:     gauge("reconciler_queue_depth", "Keys ready to be reconciled, waiting for a worker."),
		scheduled: gauge("reconciler_queue_scheduled", "Keys waiting for their backoff or RequeueAfter to pass."),
		active:    gauge("reconciler_active_reconciles", "Reconciles running."),
		following: gauge("reconciler_cache_following", "1 while the controller's cache follows the store (its watch is live and gap-free), 0 while it does not (before its first snapshot, while it resyncs, once closed): its entries are then its last word."),
		resyncs:   prometheus.NewDesc("reconciler_cache_resyncs_total", "Snapshots the controller's cache installed after its first (a gap, a reconnect, a stated restart, a restore).", label, nil),
		revision:  gauge("reconciler_cache_revision", "The namespace revision the controller's cache reflects."),

		controllers: map[string]*Controller{},
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("reconciler: register metrics: %w", err)
	}
	return m, nil
}

// durationBuckets span a Reconcile from a cache read (100 us) to a media command that waits (a minute).
var durationBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// claim records c under name; it fails when a controller that has not stopped has that name.
func (m *Metrics) claim(name string, c *Controller) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, taken := m.controllers[name]; taken {
		return fmt.Errorf("reconciler: metrics name %q is another controller's (set Options.Name)", name)
	}
	m.controllers[name] = c
	// Every series of the controller is there from the start, at 0, so that increase() and rate()
	// see its first event.
	for _, r := range []string{resultSuccess, resultError, resultRequeue, resultRequeueAfter} {
		m.reconciles.WithLabelValues(name, r)
	}
	m.panics.WithLabelValues(name)
	m.retries.WithLabelValues(name)
	m.duration.WithLabelValues(name)
	m.wait.WithLabelValues(name)
	return nil
}

// release forgets c, whose figures are no longer collected.
func (m *Metrics) release(name string, c *Controller) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.controllers[name] == c {
		delete(m.controllers, name)
	}
}

// observe counts one Reconcile of the controller named name that ran for d and ended with result; an
// error or a Requeue scheduled its key again after its backoff (a retry).
func (m *Metrics) observe(name string, d time.Duration, result string, panicked bool) {
	m.reconciles.WithLabelValues(name, result).Inc()
	m.duration.WithLabelValues(name).Observe(d.Seconds())
	if panicked {
		m.panics.WithLabelValues(name).Inc()
	}
	if result == resultError || result == resultRequeue {
		m.retries.WithLabelValues(name).Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.reconciles.Describe(ch)
	m.panics.Describe(ch)
	m.duration.Describe(ch)
	m.wait.Describe(ch)
	m.retries.Describe(ch)
	for _, d := range []*prometheus.Desc{m.depth, m.scheduled, m.active, m.following, m.resyncs, m.revision} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the counters and histograms, and each running
// controller's queue and cache as they are now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.reconciles.Collect(ch)
	m.panics.Collect(ch)
	m.duration.Collect(ch)
	m.wait.Collect(ch)
	m.retries.Collect(ch)
	m.mu.Lock()
	ctrls := maps.Clone(m.controllers) // the registry orders what it gathers
	m.mu.Unlock()
	for name, c := range ctrls {
		ready, scheduled, active := c.q.sizes()
		following, resyncs, revision := 0.0, 0.0, 0.0
		if k := c.Cache(); k != nil {
			if k.Following() {
				following = 1
			}
			resyncs, revision = float64(k.Resyncs()), float64(k.Revision())
		}
		ch <- prometheus.MustNewConstMetric(m.depth, prometheus.GaugeValue, float64(ready), name)
		ch <- prometheus.MustNewConstMetric(m.scheduled, prometheus.GaugeValue, float64(scheduled), name)
		ch <- prometheus.MustNewConstMetric(m.active, prometheus.GaugeValue, float64(active), name)
		ch <- prometheus.MustNewConstMetric(m.following, prometheus.GaugeValue, following, name)
		ch <- prometheus.MustNewConstMetric(m.resyncs, prometheus.CounterValue, resyncs, name)
		ch <- prometheus.MustNewConstMetric(m.revision, prometheus.GaugeValue, revision, name)
	}
}
