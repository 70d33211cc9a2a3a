// Command demo is the newcomer's tour of the coordination plane, all in one process on the embedded
// defaults: it starts stated (embedded NATS, a temporary data directory), the media server simulator,
// a coordinator, two transcoders, a viewer and a computer-vision worker; writes a publish intent and a
// subscription intent; narrates each step with a timestamp, in the order the steps happen; then
// kills the active transcoder and shows the standby taking over once the lease expires. It exits 0
// once the standby's publication is READY and the viewer and the CV worker have subscribed to it
// again; Ctrl-C, SIGTERM or SIGHUP (its terminal closed) before that
// stops everything, removes the data directory and exits 130. --keep leaves everything running for
// exploring with statectl (then Ctrl-C ends it, exit 0).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/examples/internal/view"
	"github.com/keeppeek/coordination/internal/stated"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

const (
	principal = "dev" // the embedded defaults: one admin principal, no credentials
	service   = "transcoder-a"
	source    = "front-door"
	variant   = "browser-h264-720p"
	leaseTTL  = 2 * time.Second
)

func main() {
	keep := flag.Bool("keep", false, "leave everything running after the tour (Ctrl-C to stop)")
	verbose := flag.Bool("v", false, "show the components' logs")
	timeout := flag.Duration("timeout", 50*time.Second, "give up after this long (positive)")
	internal.ParseFlags()
	if *timeout <= 0 {
		// Bad usage, as a positional argument is: taken, it would end the tour before stated started
		// and blame stated for it.
		internal.UsageError("--timeout %v: must be positive", *timeout)
	}
	if err := run(*keep, *verbose, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		if errors.Is(err, errInterrupted) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// errInterrupted is run's error when Ctrl-C or SIGTERM stopped the tour before its end: whatever
// failed then failed because everything was being stopped, not on its own (a wait "not in time").
var errInterrupted = errors.New("interrupted before the tour completed; everything stopped")

// errOutputGone is run's error when the narration could not be written: nobody reads the output any
// more, so the tour stopped everything.
var errOutputGone = errors.New("the output's reader is gone; everything stopped")

func run(keep, verbose bool, timeout time.Duration) (err error) {
	n := newNarrator(os.Stdout)
	say := n.say
	// A terminal closed under the demo (SIGHUP) stops it as Ctrl-C does: killed outright, it left its
	// data directory behind. Under nohup, which ignores SIGHUP, it runs on, as nohup asks (taking
	// SIGHUP would undo nohup's ignoring it).
	var sigCtx context.Context
	var stopSignals context.CancelFunc
	if signal.Ignored(syscall.SIGHUP) {
		sigCtx, stopSignals = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	} else {
		sigCtx, stopSignals = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	}
	defer stopSignals()
	defer func() { // last: after everything stopped
		if err != nil && sigCtx.Err() != nil {
			err = errInterrupted
		}
	}()
	// A reader of the output that goes away (`demo | head`, a pager quit early) stops the tour: the
	// narration's write fails instead of SIGPIPE killing the demo before it removed its data
	// directory. Taking SIGPIPE changes nothing else: a write to any other broken pipe or socket
	// fails with EPIPE either way.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	outCtx, outGone := context.WithCancelCause(sigCtx)
	defer outGone(nil)
	n.lost = func(err error) { outGone(fmt.Errorf("%w: %w", errOutputGone, err)) }
	defer func() { // after everything stopped
		if err != nil && sigCtx.Err() == nil && errors.Is(context.Cause(outCtx), errOutputGone) {
			err = context.Cause(outCtx)
		}
	}()
	ctx, cancel := context.WithTimeout(outCtx, timeout)
	defer cancel()
	defer func() { // after everything stopped: a wait the --timeout ended says so ("context deadline exceeded" blamed stated)
		if err != nil && context.Cause(ctx) == context.DeadlineExceeded {
			err = fmt.Errorf("%w (gave up at --timeout %v)", err, timeout)
		}
	}()
	logOut := io.Discard
	if verbose {
		logOut = os.Stderr
	}
	logger := slog.New(slog.NewTextHandler(logOut, nil))

	// 1. stated on the embedded defaults (free ports when the default ones are taken). Nothing connects
	// before it is ready: a client dialled earlier could reach whatever else listens on the address.
	dir, err := os.MkdirTemp("", "keeppeek-demo-")
	if err != nil {
		return fmt.Errorf("cannot make a temporary data directory in %s (set TMPDIR to change it): %w", os.TempDir(), err)
	}
	defer os.RemoveAll(dir)
	cfg := stated.DefaultConfig()
	cfg.DataDir = dir
	cfg.NATS.Listen = listenAddr(stated.DefaultNATSListen)
	cfg.HTTPListen = listenAddr(stated.DefaultHTTPListen)
	stopStated, err := startStated(ctx, cfg, logOut)
	if err != nil {
		return err
	}
	defer stopStated()
	url := "nats://" + cfg.NATS.Listen
	connect := func(name string) (*nats.Conn, error) {
		return client.Connect(url, principal, nats.Name(name), nats.RetryOnFailedConnect(true), nats.ReconnectWait(100*time.Millisecond))
	}
	adminConn, err := connect("demo-coordinator")
	if err != nil {
		return err
	}
	defer adminConn.Close()
	admin, err := client.New(adminConn, principal)
	if err != nil {
		return err
	}
	if err := waitServed(ctx, admin); err != nil {
		return err
	}
	say("stated: NATS %s, HTTP http://%s, data in %s (principal %q, no credentials)", url, cfg.HTTPListen, dir, principal)

	// 2. The media server simulator.
	simConn, err := connect("demo-mediasim")
	if err != nil {
		return err
	}
	defer simConn.Close()
	media := sim.New(simConn, sim.Options{Sources: sim.Sources(source), ReadyDelay: 400 * time.Millisecond, Logger: logger})
	if err := media.Start(ctx); err != nil {
		return err
	}
	defer media.Stop()
	say("media server simulator: source %q online", source)

	// 3. Workers: two transcoders, a viewer and a CV worker, each on its own connection.
	var wg sync.WaitGroup
	var workMu sync.Mutex
	type runner struct {
		name   string
		conn   *nats.Conn
		cancel context.CancelFunc
		killed atomic.Bool // its end is the kill's doing, told by the KILLED line
	}
	runners := map[string]*runner{}
	startRunner := func(name string, run func(ctx context.Context) error, conn *nats.Conn) {
		rctx, rcancel := context.WithCancel(context.Background())
		workMu.Lock()
		runners[name] = &runner{name: name, conn: conn, cancel: rcancel}
		r := runners[name]
		workMu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(rctx); err != nil && rctx.Err() == nil && !r.killed.Load() {
				say("%s stopped: %v", name, err)
			}
		}()
	}
	defer func() {
		workMu.Lock()
		for _, r := range runners {
			r.cancel()
		}
		workMu.Unlock()
		wg.Wait()
		for _, r := range runners {
			r.conn.Close()
		}
	}()
	// Before the workers stop (defers run last first): what they report while stopping is not part
	// of the tour, whether it ended or was interrupted.
	defer n.hush()
	for _, id := range []string{"tx-1", "tx-2"} {
		nc, err := connect("demo-" + id)
		if err != nil {
			return err
		}
		t, err := transcode.New(transcode.Config{Conn: nc, Principal: principal, WorkerID: id, Service: service, LeaseTTL: leaseTTL,
			HeartbeatInterval: 500 * time.Millisecond, Logger: logger, Events: n.transcoder})
		if err != nil {
			return err
		}
		startRunner(id, t.Run, nc)
	}
	say("transcoders tx-1 and tx-2 started (lease TTL %v)", leaseTTL)
	viewerConn, err := connect("demo-viewer")
	if err != nil {
		return err
	}
	viewer, err := view.New(view.Config{Conn: viewerConn, Principal: principal, WorkerID: "viewer-1", Logger: logger, Events: n.viewer})
	if err != nil {
		return err
	}
	startRunner("viewer-1", viewer.Run, viewerConn)
	cvConn, err := connect("demo-cv")
	if err != nil {
		return err
	}
	cvWorker, err := cv.New(cv.Config{Conn: cvConn, Principal: principal, WorkerID: "cv-1", Logger: logger, EventEvery: 500 * time.Millisecond,
		Events: n.cv})
	if err != nil {
		return err
	}
	startRunner("cv-1", cvWorker.Run, cvConn)
	say("viewer-1 and cv-1 started")

	// 4. The coordinator writes the intents.
	coord, err := coordinator.New(admin)
	if err != nil {
		return err
	}
	intentKey := "intents/" + source + "-video-" + variant
	pub := coordinator.PublishIntent(source, coordinator.MediaKindVideo, coordinator.RecordingDisabled)
	pub.VariantID, pub.OutputProfile = variant, variant
	// The coordinator's writes are told before any reaction to them: the narration is held until the
	// write is acknowledged and told.
	err = n.while(func(say func(string, ...any)) error {
		e, err := coord.PutIntent(ctx, "service/"+service, intentKey, pub)
		if err != nil {
			return fmt.Errorf("publish intent: %w", err)
		}
		say("coordinator: intent written: service/%s %s at revision %d (publish %s as %s, recording disabled)", service, intentKey, e.Revision, source, variant)
		return nil
	})
	if err != nil {
		return err
	}
	// The viewer's write goes over the viewer's connection, not through its reconciling (whose
	// callbacks wait for the narration): holding the narration cannot hold the write up.
	err = n.while(func(say func(string, ...any)) error {
		if _, err := viewer.Want(ctx, source, "video", variant); err != nil {
			return fmt.Errorf("viewer intent: %w", err)
		}
		say("viewer-1: subscription intent written in user/%s: wants %s", principal, variant)
		return nil
	})
	if err != nil {
		return err
	}
	cvIntent := coordinator.SubscribeIntent(source, coordinator.MediaKindVideo)
	cvIntent.VariantID = variant
	cvIntent.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	err = n.while(func(say func(string, ...any)) error {
		if _, err := coord.PutIntent(ctx, "service/cv-a", "intents/"+source+"-people", cvIntent); err != nil {
			return fmt.Errorf("cv intent: %w", err)
		}
		say("coordinator: model-profile intent written: service/cv-a person-detector on %s", variant)
		return nil
	})
	if err != nil {
		return err
	}

	// 5. Wait until a publication is READY and the viewer subscribed (the workers tell each step).
	active, err := n.waitReady(ctx, "", true)
	if err != nil {
		return err
	}

	// 6. Kill the active transcoder: its connection drops, its lease is no longer renewed. The line is
	// told before anything that follows the kill.
	workMu.Lock()
	victim := runners[active]
	workMu.Unlock()
	killedAt := time.Now()
	_ = n.while(func(say func(string, ...any)) error {
		victim.killed.Store(true)
		victim.conn.Close()
		victim.cancel()
		say("KILLED %s (connection dropped, lease not released); the standby waits for the lease to expire", active)
		return nil
	})
	standby, err := n.waitReady(ctx, active, false)
	if err != nil {
		return err
	}
	tookOver := time.Since(killedAt)
	// 7. The takeover ended the old publication's subscriptions: the tour ends once the viewer and the
	// CV worker have subscribed to the new one.
	if err := n.waitSubscribedAgain(ctx, standby); err != nil {
		return err
	}
	say("failover complete: %s took over %v after the kill; viewer-1 and cv-1 subscribed again", standby, tookOver.Round(time.Millisecond))
	n.hush()

	if keep {
		// The commands are relative to the repository's root: from another directory (examples/, say)
		// ./cmd/statectl is not there.
		say("still running. Try, from the repository's root:")
		say("  go run ./cmd/statectl --nats-url %s ls service/%s", url, service)
		say("  go run ./cmd/statectl --nats-url %s workers", url)
		say("  go run ./cmd/statectl --nats-url %s watch system workers/", url)
		say("Ctrl-C to stop")
		<-sigCtx.Done()
	}
	say("done")
	return nil
}

// waitServed waits until the state service answers info with the state-store feature.
func waitServed(ctx context.Context, c *client.Client) error {
	for {
		info, err := c.Info(ctx)
		if err == nil {
			for _, f := range info.Features {
				if f == wire.FeatureStateStore {
					return nil
				}
			}
			return errors.New("stated is up but its store is not served")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stated did not answer: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listenAddr is addr when it is free, else a free loopback port.
func listenAddr(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return addr
		}
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startStated runs stated on cfg in this process and returns once stated's own log says it is ready:
// its NATS server listens on cfg.NATS.Listen and its store is open. stop stops it and waits until it
// has stopped. When stated cannot start (an address taken since listenAddr found it free, a data
// directory it cannot use), its own error is returned at once. Asking the NATS address whether a
// state service answers, instead, waited for the whole --timeout and hid the reason (stated's log
// goes nowhere without -v), or, with another stated on the address, took that one for the demo's.
func startStated(ctx context.Context, cfg *stated.Config, logOut io.Writer) (stop func(), err error) {
	w := &readyWatch{out: logOut, ready: make(chan struct{})}
	serverCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stated.Serve(serverCtx, cfg, nil, w) }()
	select {
	case <-w.ready:
		var once sync.Once
		return func() { once.Do(func() { cancel(); <-done }) }, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("it stopped before it was ready")
		}
		return nil, fmt.Errorf("stated did not start: %w", err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, fmt.Errorf("stated did not start: %w", ctx.Err())
	}
}

// readyWatch passes stated's log on to out and closes ready at the line stated logs once it serves
// (as internal/e2e waits for it). Only this process's stated writes here: a line read from the
// network could come from another stated on the same address.
type readyWatch struct {
	out   io.Writer
	once  sync.Once
	ready chan struct{}
}

func (w *readyWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`msg="stated ready"`)) { // slog's text handler writes one record per Write
		w.once.Do(func() { close(w.ready) })
	}
	return w.out.Write(p)
}
