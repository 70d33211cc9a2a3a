// Command cvworker is the example computer-vision worker: for each model-profile intent in
// service/<service>/intents/ it claims the intent's lease, subscribes to the ready variant and emits
// validated (simulated) detections to its log. Its health is served over HTTP, separately.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/examples/internal/cv"
)

func main() {
	// First: a SIGTERM or Ctrl-C that comes while the worker still connects stops it as asked.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn := internal.ConnFlags("dev")
	service := flag.String("service", "cv-a", "service id: the worker reads service/<id>")
	workerID := flag.String("worker-id", fmt.Sprintf("cv-%d", os.Getpid()), "worker id")
	health := flag.String("health-listen", "127.0.0.1:9096", "HTTP address of /healthz and /readyz (empty: none)")
	internal.ParseFlags()
	internal.CheckWorkerFlags(*workerID, service)
	internal.CheckConnFlags(conn)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Listened on first, before NATS is waited for: an address taken (another CV worker's, started
	// with the defaults) ends the worker at once, rather than leave it running unprobed while a probe
	// of that address reads another process's health.
	var healthLn net.Listener
	if *health != "" {
		var err error
		if healthLn, err = net.Listen("tcp", *health); err != nil {
			logger.Error("cvworker: /healthz cannot be served", "addr", *health, "err", err)
			os.Exit(1)
		}
	}
	nc, err := conn.Dial("cvworker", internal.WaitForNATS(logger)...)
	if err != nil {
		logger.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	w, err := cv.New(cv.Config{Conn: nc, Principal: *conn.User, WorkerID: *workerID, Service: *service, Logger: logger,
		Events: func(kind, intent, detail string) {
			if kind != "detection" { // detections are logged by the worker itself
				logger.Info(kind, "intent", intent, "detail", detail)
			}
		}})
	if err != nil {
		logger.Error("cvworker", "err", err)
		os.Exit(1)
	}
	if healthLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/healthz", w.Worker().HealthHandler())
		mux.Handle("/readyz", w.Worker().ReadyHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(healthLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("cvworker: /healthz not served", "addr", *health, "err", err)
			}
		}()
		defer srv.Close()
	}
	if err := w.Run(ctx); err != nil {
		logger.Error("cvworker", "err", err)
		os.Exit(1)
	}
}
