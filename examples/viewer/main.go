// Command viewer is the example viewer: it writes a subscription intent in its own user namespace for
// a variant of a source, and subscribes only once the media server says that variant is READY.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/examples/internal/view"
)

func main() {
	conn := internal.ConnFlags("dev")
	source := flag.String("source", "front-door", "stable source id")
	kind := flag.String("kind", "video", "media kind")
	variant := flag.String("variant", "browser-h264-720p", "the variant to watch")
	workerID := flag.String("worker-id", "viewer-1", "worker id")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	nc, err := conn.Dial("viewer", internal.WaitForNATS(logger)...)
	if err != nil {
		logger.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	v, err := view.New(view.Config{Conn: nc, Principal: *conn.User, WorkerID: *workerID, Logger: logger,
		Events: func(kind, intent, detail string) { logger.Info(kind, "intent", intent, "detail", detail) }})
	if err != nil {
		logger.Error("viewer", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	key, err := v.Want(ctx, *source, *kind, *variant)
	if err != nil {
		logger.Error("write the subscription intent", "err", err)
		os.Exit(1)
	}
	logger.Info("subscription intent written", "namespace", "user/"+*conn.User, "key", key)
	if err := v.Run(ctx); err != nil {
		logger.Error("viewer", "err", err)
		os.Exit(1)
	}
}
