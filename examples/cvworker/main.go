// Command cvworker is the example computer-vision worker: for each model-profile intent in
// service/<service>/intents/ it claims the intent's lease, subscribes to the ready variant and emits
// validated (simulated) detections to its log. Its health is served over HTTP, separately.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

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
	healthAddr := internal.HealthFlag("127.0.0.1:9096")
	internal.ParseFlags()
	internal.CheckWorkerFlags(*workerID, service)
	internal.CheckConnFlags(conn)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	health := internal.ListenHealth(*healthAddr, logger)
	nc, err := conn.Dial("cvworker", internal.WaitForNATS(logger)...)
	if err != nil {
		logger.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	w, err := cv.New(cv.Config{Conn: nc, Principal: *conn.User, WorkerID: *workerID, Service: *service, Logger: logger, Metrics: health.Metrics(),
		Events: func(kind, intent, detail string) {
			if kind != "detection" { // detections are logged by the worker itself
				logger.Info(kind, "intent", intent, "detail", detail)
			}
		}})
	if err != nil {
		logger.Error("cvworker", "err", err)
		os.Exit(1)
	}
	defer health.Serve(w.Worker(), logger)()
	if err := w.Run(ctx); err != nil {
		logger.Error("cvworker", "err", err)
		os.Exit(1)
	}
}
