// Command transcoder is the example transcoder worker: it watches publish intents under
// service/<service>/intents/, claims one lease per actual output, starts the publication on the media
// server with the intent's recording_mode once the source is resolved, and reports observed status.
// Run two of them: one works, the other stands by until the lease goes. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/lease"
)

func main() {
	// First: a SIGTERM or Ctrl-C that comes while the worker still connects stops it as asked.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn := internal.ConnFlags("dev")
	flag.Lookup("user").Usage = "principal (env KP_USER; an admin: service namespaces are admin-written)"
	service := flag.String("service", "transcoder-a", "service id: the worker reads service/<id>")
	host, _ := os.Hostname()
	workerID := flag.String("worker-id", fmt.Sprintf("tx-%d", os.Getpid()), "worker id ([A-Za-z0-9_-]{1,64}) on "+host)
	ttl := flag.Duration("lease-ttl", 5*time.Second, "lease TTL: how long a standby waits after this worker dies")
	healthAddr := internal.HealthFlag("")
	internal.ParseFlags()
	internal.CheckWorkerFlags(*workerID, service)
	internal.CheckConnFlags(conn)

	if *ttl < lease.MinTTL || *ttl > lease.MaxTTL {
		// A usage error, checked before waiting for NATS; 0 would otherwise be the library's default
		// of 5 s.
		internal.UsageError("--lease-ttl %v is outside %v to %v", *ttl, lease.MinTTL, lease.MaxTTL)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	health := internal.ListenHealth(*healthAddr, logger)
	nc, err := conn.Dial("transcoder", internal.WaitForNATS(logger)...)
	if err != nil {
		logger.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	t, err := transcode.New(transcode.Config{Conn: nc, Principal: *conn.User, WorkerID: *workerID, Service: *service, LeaseTTL: *ttl, Metrics: health.Metrics(),
		Logger: logger, Events: func(e transcode.Event) {
			logger.Info(e.Kind, "worker", e.WorkerID, "intent", e.Intent, "detail", e.Detail)
		}})
	if err != nil {
		logger.Error("transcoder", "err", err)
		os.Exit(1)
	}
	defer health.Serve(t.Worker(), logger)()
	if err := t.Run(ctx); err != nil {
		logger.Error("transcoder", "err", err)
		os.Exit(1)
	}
}
