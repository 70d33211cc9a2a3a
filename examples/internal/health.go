package internal

import (
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/worker"
)

// Health is a worker's HTTP endpoint: /healthz (liveness), /readyz (readiness) and /metrics (the Go
// runtime's and the process's, the worker's Collector and the reconciler Metrics of its controllers).
type Health struct {
	ln       net.Listener
	registry *prometheus.Registry
	metrics  *reconciler.Metrics
}

// HealthFlag defines the --health-listen flag, the address of a worker's Health (def by default;
// empty: none).
func HealthFlag(def string) *string {
	return flag.String("health-listen", def, "HTTP address of /healthz, /readyz and /metrics (empty: none)")
}

// ListenHealth listens on addr (HealthFlag's), first thing, before NATS is waited for: an address
// taken (another worker's, started with the defaults) ends the process at once (exit 1, naming flag
// and address), rather than leave it running unprobed while a probe of that address reads another
// process's health. It returns nil when addr is empty (no endpoint).
func ListenHealth(addr string, logger *slog.Logger) *Health {
	if addr == "" {
		return nil
	}
	h, err := listenHealth(addr)
	if err != nil {
		logger.Error("/healthz, /readyz and /metrics cannot be served", "flag", "--health-listen", "addr", addr, "err", err)
		os.Exit(1)
	}
	return h
}

func listenHealth(addr string) (*Health, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := reconciler.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Health{ln: ln, registry: reg, metrics: m}, nil
}

// Metrics are the metrics to give the worker's controllers (reconciler.Options.Metrics): nil on a
// nil Health, which serves none.
func (h *Health) Metrics() *reconciler.Metrics {
	if h == nil {
		return nil
	}
	return h.metrics
}

// Addr is the address the endpoint listens on.
func (h *Health) Addr() net.Addr { return h.ln.Addr() }

// Serve serves the endpoint for w, on a goroutine, until the returned stop is called. On a nil
// Health it serves nothing.
func (h *Health) Serve(w *worker.Worker, logger *slog.Logger) (stop func()) {
	if h == nil {
		return func() {}
	}
	h.registry.MustRegister(w.Collector())
	mux := http.NewServeMux()
	mux.Handle("/healthz", w.HealthHandler())
	mux.Handle("/readyz", w.ReadyHandler())
	mux.Handle("/metrics", promhttp.HandlerFor(h.registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(h.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("/healthz, /readyz and /metrics not served", "addr", h.ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		_ = srv.Close()
		<-done
	}
}
