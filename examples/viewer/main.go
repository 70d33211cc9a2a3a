// Command viewer is the example viewer: it writes a subscription intent in its own user namespace for
// a variant of a source, and subscribes only once the media server says that variant is READY.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/examples/internal/view"
	"github.com/keeppeek/coordination/store/wire"
)

func main() {
	// First: a SIGTERM or Ctrl-C that comes while the viewer still connects stops it as asked.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn := internal.ConnFlags("dev")
	source := flag.String("source", "front-door", "stable source id")
	kind := flag.String("kind", "video", "media kind")
	variant := flag.String("variant", "browser-h264-720p", "the variant to watch")
	workerID := flag.String("worker-id", fmt.Sprintf("viewer-%d", os.Getpid()), "worker id (the holder its statuses name; keep it across restarts)")
	healthAddr := internal.HealthFlag("")
	internal.ParseFlags()
	internal.CheckWorkerFlags(*workerID, nil)
	internal.CheckConnFlags(conn)
	if err := checkWant(*conn.User, *source, *kind, *variant); err != nil {
		internal.UsageError("%v", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	health := internal.ListenHealth(*healthAddr, logger)
	nc, err := conn.Dial("viewer", internal.WaitForNATS(logger)...)
	if err != nil {
		logger.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	v, err := view.New(view.Config{Conn: nc, Principal: *conn.User, WorkerID: *workerID, Logger: logger, Metrics: health.Metrics(),
		Events: func(kind, intent, detail string) { logger.Info(kind, "intent", intent, "detail", detail) }})
	if err != nil {
		logger.Error("viewer", "err", err)
		os.Exit(1)
	}
	defer health.Serve(v.Worker(), logger)()
	key, err := want(ctx, v, logger, *source, *kind, *variant)
	if err != nil && ctx.Err() != nil {
		return // stopped while waiting for stated: a stop as asked
	}
	if err != nil {
		// A connection NATS closed for good (credentials refused, say) tells why in its last error.
		logger.Error("write the subscription intent", "err", err, "nats_err", nc.LastError())
		os.Exit(1)
	}
	logger.Info("subscription intent written", "namespace", "user/"+*conn.User, "key", key)
	if err := v.Run(ctx); err != nil {
		logger.Error("viewer", "err", err)
		os.Exit(1)
	}
}

// checkWant checks, before anything connects, the subscription intent the flags ask for: the store
// would refuse it, or (an empty variant) store an intent no media server can answer, and the viewer,
// started before stated, would retry it for ever.
func checkWant(user, source, kind, variant string) error {
	switch {
	case !wire.ValidIdentifier(source):
		return fmt.Errorf("--source %q is not a source id ([A-Za-z0-9._-], at most %d bytes)", source, wire.MaxIdentifierLen)
	case kind != "video" && kind != "audio":
		return fmt.Errorf("--kind %q is not video or audio", kind)
	case !wire.ValidIdentifier(variant):
		return fmt.Errorf("--variant %q is not a variant id ([A-Za-z0-9._-], at most %d bytes)", variant, wire.MaxIdentifierLen)
	}
	return coordinator.CheckIntent("user/"+user, "intents/"+source+"-"+kind+"-"+variant, // the key of view.Want
		wire.MediaIntent{Role: wire.RoleSubscribe, Desired: true, SourceID: source, MediaKind: kind, VariantID: variant})
}

// Backoff of the intent's write while stated is not reachable: the first retry waits wantBackoff,
// each further one twice as long, up to maxWantBackoff.
const (
	wantBackoff    = 500 * time.Millisecond
	maxWantBackoff = 5 * time.Second
)

// want writes the subscription intent, waiting for stated as the viewer waits for NATS (started
// before stated, it must not give up after one request timeout): a write that got no answer, or
// UNAVAILABLE, is sent again until ctx ends. The write replaces the whole document, so one that
// committed unanswered and is sent again writes the same intent. Any other error (permission, schema)
// is returned at once: retrying cannot mend it; so is a connection NATS closed for good (it refused
// the credentials, say), on which no request can ever be sent again.
func want(ctx context.Context, v *view.Viewer, logger *slog.Logger, source, kind, variant string) (string, error) {
	backoff := wantBackoff
	for {
		key, err := v.Want(ctx, source, kind, variant)
		if err == nil || ctx.Err() != nil {
			return key, err
		}
		if code := wire.CodeOf(err); code != "" && code != wire.CodeUnavailable {
			return key, err
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return key, err
		}
		logger.Warn("stated not reachable; retrying the subscription intent", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return key, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, maxWantBackoff)
	}
}
