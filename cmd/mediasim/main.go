// Command mediasim runs the media server simulator of package capabilities/sim against a NATS server
// until SIGINT or SIGTERM, logging every command it serves:
//
//	mediasim --nats-url nats://127.0.0.1:4222 --user media --password P \
//	    --sources front-door,back-yard --ready-delay 300ms
//
// It answers `<prefix>.caps.v1.get`, announces changes on `<prefix>.caps.v1.changed` and serves the
// media commands on `<prefix>.media.v1.*.<command>` (SPEC.md section 12). Under stated's permissions
// it must connect as a principal with `media = true`. Started before the NATS server is up, it waits
// for it until stopped, and it reconnects as often as the connection drops. Bad flags end it with
// exit 2; credentials NATS refuses, at the first connection or a later reconnect (the principal
// removed, its password changed), with exit 1; SIGINT or SIGTERM, at any time, with exit 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/natstls"
	"github.com/keeppeek/coordination/store/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// keepCommands is how many of the commands served the simulator keeps a record of.
const keepCommands = 1000

// run parses args, runs the simulator until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("mediasim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats-url", nats.DefaultURL, "NATS server URL")
	user := fs.String("user", "", "NATS user (a principal with media permissions under stated)")
	password := fs.String("password", "", "NATS password")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle that verifies the NATS server's certificate, for a private CA (default: the system's roots)")
	tlsCert := fs.String("tls-cert", "", "PEM client certificate, with --tls-key, for a NATS server that verifies clients")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	prefix := fs.String("prefix", capabilities.DefaultPrefix, "subject prefix")
	sources := fs.String("sources", "front-door,back-yard", "comma-separated source ids")
	readyDelay := fs.Duration("ready-delay", sim.DefaultReadyDelay, "how long a started publication stays PENDING (0: READY at once)")
	failing := fs.String("fail", "", "comma-separated source/stream/variant whose publications turn FAILED (a source of --sources; stream video or audio)")
	verbose := fs.Bool("v", false, "also log every generation")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mediasim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := checkURLs(*url); err != nil {
		fmt.Fprintf(stderr, "mediasim: --nats-url %q: %v\n", *url, err)
		return 2
	}
	// Under stated the user is a principal (its inbox prefix _INBOX.<user> is a subject token); a
	// password without a user would be dropped unsent and the refusal would not say why.
	switch {
	case *user != "" && !wire.ValidPrincipalID(*user):
		fmt.Fprintf(stderr, "mediasim: --user %q is not a principal id ([a-z0-9][a-z0-9_-]{0,62})\n", *user)
		return 2
	case *user == "" && *password != "":
		fmt.Fprintln(stderr, "mediasim: --password needs --user (the principal it belongs to)")
		return 2
	}
	tlsFiles := natstls.Files{CA: *tlsCA, Cert: *tlsCert, Key: *tlsKey, CAName: "--tls-ca", CertName: "--tls-cert", KeyName: "--tls-key"}
	// Read now, so that a file that cannot be used (or a --tls-cert without its --tls-key) is a
	// usage error naming the flag and the file, and again at every connect.
	tlsOpt, err := tlsFiles.Option(nil)
	if err != nil {
		fmt.Fprintf(stderr, "mediasim: %v\n", err)
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Generations only grow, across restarts too (SPEC section 12): count on from the clock, in
	// microseconds, so a restarted simulator announces generations above those of the one it replaces
	// (which would have needed more than a million changes a second to get ahead; in milliseconds a
	// busy one did, and trackers ignored its successor). Until the year 2255 that stays below 2^53.
	if *readyDelay == 0 {
		*readyDelay = time.Nanosecond // the simulator reads 0 as its default
	}
	// It runs until stopped: its record of commands (nobody reads it here) keeps only the newest.
	opts := sim.Options{Prefix: *prefix, ReadyDelay: *readyDelay, Logger: log, After: uint64(time.Now().UnixMicro()),
		KeepCommands: keepCommands}
	for id := range strings.SplitSeq(*sources, ",") {
		if id = strings.TrimSpace(id); id != "" {
			opts.Sources = append(opts.Sources, sim.SourceConfig{SourceID: id})
		}
	}
	if len(opts.Sources) == 0 {
		// An empty --sources (a variable left unset) would run a simulator nobody can publish from.
		fmt.Fprintf(stderr, "mediasim: --sources %q names no source id\n", *sources)
		return 2
	}
	for ref := range strings.SplitSeq(*failing, ",") {
		if ref = strings.TrimSpace(ref); ref == "" {
			continue
		}
		parts := strings.Split(ref, "/")
		if len(parts) != 3 || !capabilities.ValidIdentifier(parts[0]) || !capabilities.ValidIdentifier(parts[1]) || !capabilities.ValidIdentifier(parts[2]) {
			fmt.Fprintf(stderr, "mediasim: --fail %q: want source/stream/variant\n", ref)
			return 2
		}
		// The source and stream must be the simulator's (its sources have the default streams): a
		// typo would otherwise be taken and never fail anything. The variant is made by a start.
		if !slices.ContainsFunc(opts.Sources, func(c sim.SourceConfig) bool { return c.SourceID == parts[0] }) {
			fmt.Fprintf(stderr, "mediasim: --fail %q: no source %q in --sources\n", ref, parts[0])
			return 2
		}
		if !slices.ContainsFunc(sim.DefaultStreams(), func(c sim.StreamConfig) bool { return c.StreamID == parts[1] }) {
			fmt.Fprintf(stderr, "mediasim: --fail %q: no stream %q (the sources have %s)\n", ref, parts[1], streamIDs())
			return 2
		}
		opts.Failing = append(opts.Failing, sim.VariantRef{SourceID: parts[0], StreamID: parts[1], VariantID: parts[2]})
	}
	// Bad flags are usage errors, found before connecting (the simulator checks its options at Start).
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "mediasim: %v\n", err)
		return 2
	}

	// Started before the NATS server is up (before stated, say), it waits for it instead of exiting.
	natsOpts := []nats.Option{nats.Name("keeppeek-mediasim"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(nc *nats.Conn) { log.Info("NATS connected", "url", nc.ConnectedUrlRedacted()) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS not reachable; retrying", "error", err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "error", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	if *user != "" {
		natsOpts = append(natsOpts, nats.UserInfo(*user, *password), nats.CustomInboxPrefix("_INBOX."+*user))
	}
	if tlsOpt != nil {
		natsOpts = append(natsOpts, tlsOpt)
	}
	nc, err := nats.Connect(*url, natsOpts...)
	if err != nil {
		log.Error("connect", "url", *url, "error", err)
		return 1
	}
	defer nc.Close()
	if ok, code := awaitConnection(ctx, nc, log); !ok {
		return code
	}

	// Watched from before Start: a close while it starts is not missed.
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	s := sim.New(nc, opts)
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = s.Start(startCtx)
	cancel()
	if err != nil {
		if ctx.Err() != nil { // stopped as asked while it started: nothing failed
			log.Info("stopping before the simulator served")
			return 0
		}
		log.Error("start", "error", err)
		return 1
	}
	for _, src := range s.Capabilities().Sources {
		log.Info("source", "source_id", src.SourceID, "session_id", src.SessionID, "online", src.Online)
	}
	log.Info("media simulator running", "url", nc.ConnectedUrlRedacted(), "prefix", *prefix, "ready_delay", *readyDelay)
	select {
	case <-ctx.Done():
	case <-closed:
		// NATS closed the connection for good (it refused the credentials on a reconnect: the
		// principal was removed or its password changed). A simulator that can serve nothing more
		// must not look alive to whoever supervises it.
		s.Stop()
		err := nc.LastError()
		if err == nil {
			err = nats.ErrConnectionClosed
		}
		log.Error("NATS closed the connection; nothing can be served any more", "error", err)
		return 1
	}
	log.Info("stopping")
	s.Stop()
	if err := nc.FlushTimeout(2 * time.Second); err != nil {
		log.Warn("flush", "error", err)
	}
	return 0
}

// awaitConnection waits, for as long as it takes, until nc has connected a first time: the start
// that follows is bounded, and would give up on a NATS server that is not up yet. It returns false
// with the exit code when ctx ends first (0: stopped as asked) or when NATS closed the connection for
// good (1: it refused the credentials, say; the error is what NATS said).
func awaitConnection(ctx context.Context, nc *nats.Conn, log *slog.Logger) (bool, int) {
	status := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(status)
	for {
		switch {
		case nc.IsConnected():
			return true, 0
		case nc.IsClosed():
			err := nc.LastError()
			if err == nil {
				err = nats.ErrConnectionClosed
			}
			log.Error("connect", "error", err)
			return false, 1
		}
		select {
		case <-ctx.Done():
			log.Info("stopping before NATS was reached")
			return false, 0
		case <-status:
		}
	}
}

// checkURLs checks --nats-url, a comma-separated list of NATS server URLs, as nats.go reads it (a URL
// without a scheme is nats://), so that a typo is a usage error: nats.go refused some only once asked
// to connect (exit 1, as a server refusing the credentials), and took others, such as a port out of
// range, to retry for ever a server that cannot exist.
func checkURLs(list string) error {
	n := 0
	for u := range strings.SplitSeq(list, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue // nats.go skips it too
		}
		n++
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		parsed, err := neturl.Parse(u)
		if err != nil {
			return err
		}
		switch parsed.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("scheme %q is not nats, tls, ws or wss", parsed.Scheme)
		}
		if p := parsed.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("port %q is not 1 to 65535", p)
			}
		}
	}
	if n == 0 {
		return errors.New("no URL")
	}
	return nil
}

// streamIDs lists the streams of the simulator's sources.
func streamIDs() string {
	var ids []string
	for _, c := range sim.DefaultStreams() {
		ids = append(ids, c.StreamID)
	}
	return strings.Join(ids, ", ")
}
