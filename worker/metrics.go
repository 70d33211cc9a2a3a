package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/store/wire"
)

// Collector returns the worker's Prometheus metrics, read when they are collected, every series
// labelled worker_id:
//
//	worker_info{worker_id,principal,service}         1
//	worker_status{worker_id,status}                  1 for the current status (starting, ready,
//	                                                 draining, stopping), 0 for the others
//	worker_healthy{worker_id}                        1 while Healthy reports nil, else 0
//	worker_ready{worker_id}                          1 while Ready reports nil, else 0
//	worker_leases_held{worker_id}                    the leases the heartbeats list (HoldLease)
//	worker_heartbeats_total{worker_id,result}        heartbeats published (sent) or not (failed: the
//	                                                 connection down, the publish refused)
//	worker_last_heartbeat_timestamp_seconds{worker_id}  when the last heartbeat went out (0: none yet)
//
// Register it with the registry the process serves (prometheus.MustRegister(w.Collector())); the
// workers of one process may share a registry, their worker ids differing.
func (w *Worker) Collector() prometheus.Collector {
	return &collector{w: w, descs: newDescs(w.opts.WorkerID)}
}

type descs struct {
	info, status, healthy, ready, leases, heartbeats, lastBeat *prometheus.Desc
}

// newDescs returns the descriptions of the metrics of worker id: its id is a constant label, so the
// workers of a process are distinct collectors of one registry.
func newDescs(id string) descs {
	c := prometheus.Labels{"worker_id": id}
	return descs{
		info:       prometheus.NewDesc("worker_info", "The worker's identity (1).", []string{"principal", "service"}, c),
		status:     prometheus.NewDesc("worker_status", "1 for the worker's current status (starting, ready, draining, stopping), 0 for the others.", []string{"status"}, c),
		healthy:    prometheus.NewDesc("worker_healthy", "1 while the worker is healthy (its liveness check, /healthz), else 0.", nil, c),
		ready:      prometheus.NewDesc("worker_ready", "1 while the worker is ready (its readiness check, /readyz: a state server answers it), else 0.", nil, c),
		leases:     prometheus.NewDesc("worker_leases_held", "Leases the worker's heartbeats list.", nil, c),
		heartbeats: prometheus.NewDesc("worker_heartbeats_total", "Heartbeats published (sent) or not (failed: the NATS connection down, the publish refused).", []string{"result"}, c),
		lastBeat:   prometheus.NewDesc("worker_last_heartbeat_timestamp_seconds", "When the last heartbeat was published, in seconds since the epoch (0: none yet).", nil, c),
	}
}

type collector struct {
	w     *Worker
	descs descs
}

// workerStatuses are the values of worker_status's status label.
var workerStatuses = []string{wire.StatusStarting, wire.StatusReady, wire.StatusDraining, wire.StatusStopping}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, x := range []*prometheus.Desc{d.info, d.status, d.healthy, d.ready, d.leases, d.heartbeats, d.lastBeat} {
		ch <- x
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	w, d := c.w, c.descs
	healthy, ready := w.Healthy() == nil, w.Ready() == nil
	w.mu.Lock()
	status, leases, sent, failed, last := w.status, len(w.leases), w.sent, w.failed, w.lastBeat
	w.mu.Unlock()
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	gauge(d.info, 1, w.opts.Principal, w.opts.Service)
	for _, s := range workerStatuses {
		gauge(d.status, flag(s == status), s)
	}
	gauge(d.healthy, flag(healthy))
	gauge(d.ready, flag(ready))
	gauge(d.leases, float64(leases))
	ch <- prometheus.MustNewConstMetric(d.heartbeats, prometheus.CounterValue, float64(sent), "sent")
	ch <- prometheus.MustNewConstMetric(d.heartbeats, prometheus.CounterValue, float64(failed), "failed")
	lastSec := 0.0
	if !last.IsZero() {
		lastSec = float64(last.UnixNano()) / 1e9
	}
	gauge(d.lastBeat, lastSec)
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
