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

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/store/client"
)

func main() {
	url := flag.String("nats-url", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server")
	user := flag.String("user", envOr("KP_USER", "dev"), "principal (an admin: service namespaces are admin-written)")
	password := flag.String("password", os.Getenv("KP_PASSWORD"), "password of the principal")
	service := flag.String("service", "transcoder-a", "service id: the worker reads service/<id>")
	host, _ := os.Hostname()
	workerID := flag.String("worker-id", fmt.Sprintf("tx-%d", os.Getpid()), "worker id ([A-Za-z0-9_-]{1,64}) on "+host)
	ttl := flag.Duration("lease-ttl", 5*time.Second, "lease TTL: how long a standby waits after this worker dies")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts := internal.WaitForNATS(logger)
	if *password != "" {
		opts = append(opts, nats.UserInfo(*user, *password))
	}
	nc, err := client.Connect(*url, *user, opts...)
	if err != nil {
		logger.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	t, err := transcode.New(transcode.Config{Conn: nc, Principal: *user, WorkerID: *workerID, Service: *service, LeaseTTL: *ttl,
		Logger: logger, Events: func(e transcode.Event) {
			logger.Info(e.Kind, "worker", e.WorkerID, "intent", e.Intent, "detail", e.Detail)
		}})
	if err != nil {
		logger.Error("transcoder", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := t.Run(ctx); err != nil {
		logger.Error("transcoder", "err", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
