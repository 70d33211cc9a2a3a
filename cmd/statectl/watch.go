package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Re-watch backoff: the first retry waits watchBackoff, each further one twice as long, up to
// maxWatchBackoff.
const (
	watchBackoff    = 100 * time.Millisecond
	maxWatchBackoff = 5 * time.Second
)

func (a *app) cmdWatch(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	count := fs.Int("count", 0, "")
	pos, err := a.parse(cmd, fs, args, 1, 2)
	if err != nil {
		return err
	}
	if *count < 0 {
		return usageErrorf("--count must not be negative")
	}
	w := &watcher{a: a, ns: pos[0], count: *count, idBase: "statectl-" + randomHex(6)}
	if len(pos) == 2 {
		w.prefix = pos[1]
	}
	wctx := ctx
	if a.g.timeoutSet {
		// --timeout is how long to watch; each request keeps the default bound (the deadline still
		// cuts it short).
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, a.g.timeout)
		defer cancel()
		a.requestTimeout = defaultTimeout
	}
	// A pipe whose reader went away (`| head -1`) ends the watch, even when it has nothing to print
	// (which would end it with SIGPIPE): the shell waits for it to end the pipeline.
	wctx, stopWatch := context.WithCancelCause(wctx)
	defer stopWatch(nil)
	onReaderGone(wctx, a.stdoutFile, func() { stopWatch(errOutputGone) })
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	w.cn, w.c = cn, cn.c
	a.setLeftBehind("the watch stays registered on the server until it closes it for want of acks (ACK_TIMEOUT)")
	err = w.run(wctx)
	if errors.Is(context.Cause(wctx), errOutputGone) {
		return errOutputGone // the watch was unwatched; whatever else went wrong, nobody reads it
	}
	if err != nil {
		return err
	}
	if w.count > 0 && w.printed < w.count {
		if ctx.Err() != nil {
			// The count is the answer a script waits for: an interrupt before it is no success.
			return &cliError{code: exitInterrupted, label: "INTERRUPTED",
				err: fmt.Errorf("watch: interrupted after %d of %d messages", w.printed, w.count)}
		}
		return &cliError{code: exitFailure, label: "TIMEOUT",
			err: fmt.Errorf("watch: %d of %d messages within --timeout %v", w.printed, w.count, a.g.timeout)}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// watcher prints one raw watch, and watches again whenever the watch can no longer be trusted.
type watcher struct {
	a      *app
	cn     *conn // its NATS permission violations end a watch request at once
	c      *client.Client
	ns     string
	prefix string
	count  int // stop after this many printed messages; 0: never

	idBase      string // each incarnation gets its own watch id, so no leftover of one reaches the next
	incarnation int
	seq         uint64 // highest printed (and acknowledged) watch_sequence of the current incarnation
	reconnects  uint64 // the connection's reconnect count when the current incarnation started
	printed     int
}

// requestTimeout bounds one request of the watcher.
func (w *watcher) requestTimeout() time.Duration {
	if w.a.requestTimeout > 0 {
		return w.a.requestTimeout
	}
	return w.a.g.timeout
}

func (w *watcher) done() bool { return w.count > 0 && w.printed >= w.count }

// run watches until ctx ends, the count is reached, or the watch fails for good. It returns nil when
// ctx ends after the first watch opened.
func (w *watcher) run(ctx context.Context) error {
	nc := w.c.Conn()
	status := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(status)
	wt, err := w.open(ctx) // the first watch fails at once: bad arguments, no permission, no server
	if err != nil {
		// Also when ctx ended before any answer, as for any other command: interrupted (Ctrl-C) is
		// INTERRUPTED (exit 130), the --timeout deadline TIMEOUT (exit 3).
		return err
	}
	for {
		reason, closed, err := w.follow(ctx, wt, status)
		w.stop(ctx, wt, closed)
		if err != nil || reason == "" {
			return err
		}
		w.notice("%s; watching again", reason)
		if wt, err = w.reopen(ctx, status); wt == nil {
			return err
		}
	}
}

// open starts a new incarnation and prints its snapshot. The watch request is bounded by the request
// timeout (ctx may be the whole --timeout), and a request NATS refuses is PERMISSION_DENIED at once,
// as for every other command.
func (w *watcher) open(ctx context.Context) (*client.Watch, error) {
	w.incarnation++
	id := fmt.Sprintf("%s-%d", w.idBase, w.incarnation)
	var wt *client.Watch
	rctx, cancel := context.WithTimeout(ctx, w.requestTimeout())
	err := w.cn.state(rctx, func(ctx context.Context) (err error) {
		wt, err = w.c.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: w.ns, KeyPrefix: w.prefix})
		return err
	})
	cancel()
	if err != nil {
		if wire.CodeOf(err) == "" && !w.c.Conn().IsClosed() {
			// No answer: the watch may have been registered all the same. Remove it, or it would
			// hold a watch slot until the server closes it for want of acks. The unwatch waits for
			// the watch request's late reply first (Client.Unwatch), for up to a second: the
			// connection closes when statectl returns, and a watch registered after an unwatch that
			// overtook its request would stay. A server slower than that is not waited for (the
			// watch ended at --timeout, or was interrupted).
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = w.c.Unwatch(uctx, id)
			cancel()
		}
		return nil, err
	}
	w.seq, w.reconnects = 0, w.c.Conn().Stats().Reconnects
	if err := w.printSnapshot(wt.Snapshot()); err != nil {
		_ = wt.Stop(ctx)
		return nil, err
	}
	return wt, nil
}

// reopen watches again until it works, backing off, and returns nil when ctx ends first (with the
// error when the failure is one retrying cannot mend).
func (w *watcher) reopen(ctx context.Context, status chan nats.Status) (*client.Watch, error) {
	backoff := watchBackoff
	for {
		if !w.awaitConnection(ctx, status) {
			return nil, nil
		}
		drain(status)
		wt, err := w.open(ctx)
		if err == nil {
			return wt, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		switch wire.CodeOf(err) {
		case wire.CodePermissionDenied, wire.CodeInvalidArgument, wire.CodeWatchTooBroad:
			return nil, err
		}
		if w.c.Conn().IsClosed() {
			return nil, &cliError{code: exitConnection, label: "CONNECTION", err: errors.New("watch: the NATS connection is closed")}
		}
		w.notice("watch failed: %v; retrying in %v", err, backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// awaitConnection returns once the NATS connection is up (a request sent while it reconnects would
// sit in the reconnect buffer until its deadline), false when ctx ends first.
func (w *watcher) awaitConnection(ctx context.Context, status chan nats.Status) bool {
	nc := w.c.Conn()
	if nc.IsConnected() || nc.IsClosed() {
		return true
	}
	w.notice("waiting for the NATS connection")
	poll := time.NewTicker(250 * time.Millisecond) // in case the CONNECTED event was drained already
	defer poll.Stop()
	for !nc.IsConnected() && !nc.IsClosed() {
		select {
		case <-ctx.Done():
			return false
		case <-status:
		case <-poll.C:
		}
	}
	return true
}

func drain(status chan nats.Status) {
	for {
		select {
		case <-status:
		default:
			return
		}
	}
}

// follow prints the incarnation's messages and acknowledges each update. It returns why the watch
// must start again ("" when it is done: ctx ended or the count is reached), whether the server closed
// it, or an error that ends the command.
func (w *watcher) follow(ctx context.Context, wt *client.Watch, status chan nats.Status) (reason string, closed bool, err error) {
	// An ack answered NOT_FOUND means the server closed the watch (OVERFLOW, say) after sending what is
	// still queued here: those updates and the CLOSED message are printed, without acks, for as long as
	// a request may take; then the watch starts again. So does one answered UNAVAILABLE: a stated that
	// is stopping (SIGTERM) refuses requests, or no longer takes them (no responders), before it
	// closes its watches with SHUTDOWN, and that close, which counts towards --count and says why the
	// watch starts again, would otherwise be lost to a race with the ack.
	var gone <-chan time.Time
	var ackFailed string
	// While nothing comes, the watch is checked every checkInterval, as a Cache checks its own: a
	// stated restarted behind an external NATS server has forgotten it without a message reaching
	// this connection, and an update lost in a NATS cluster shows no sequence gap while none follows.
	check := time.NewTimer(checkInterval)
	defer check.Stop()
	var probed <-chan time.Time // set while an update the server said it sent is awaited
	var probe uint64
	for {
		select {
		case <-ctx.Done():
			return "", false, nil
		case <-gone:
			return ackFailed, false, nil
		case <-probed:
			if w.seq < probe {
				return fmt.Sprintf("update %d was sent but never arrived", probe), false, nil
			}
			probed = nil
		case <-check.C:
			if gone != nil || probed != nil {
				check.Reset(checkInterval)
				continue
			}
			reason, sent, wait, err := w.check(ctx, wt)
			if wait {
				// Refused by a stopping stated: its close may still come, as after a refused ack.
				ackFailed, gone = reason, time.After(w.requestTimeout())
				check.Reset(checkInterval)
				continue
			}
			if reason != "" || err != nil {
				return reason, false, err
			}
			if sent {
				probe, probed = w.seq+1, time.After(w.requestTimeout())
			}
			check.Reset(checkInterval)
		case s := <-status:
			switch {
			case s == nats.CLOSED:
				return "", false, &cliError{code: exitConnection, label: "CONNECTION", err: errors.New("watch: the NATS connection closed")}
			case w.c.Conn().Stats().Reconnects != w.reconnects:
				return "the NATS connection was re-established (updates may have been lost)", false, nil
			}
		case m, ok := <-wt.Messages():
			if !check.Stop() {
				select {
				case <-check.C:
				default:
				}
			}
			check.Reset(checkInterval)
			if !ok {
				if err := wt.Err(); err != nil {
					return "the watch ended: " + err.Error(), false, nil
				}
				return "the watch ended", false, nil
			}
			if m.Kind == wire.UpdateClosed {
				if err := w.print(m); err != nil {
					return "", true, err
				}
				if w.done() {
					return "", true, nil
				}
				return fmt.Sprintf("the server closed the watch (%s)", m.Reason), true, nil
			}
			if m.WatchSequence != w.seq+1 {
				return fmt.Sprintf("sequence gap: update %d after %d", m.WatchSequence, w.seq), false, nil
			}
			if err := w.print(m); err != nil {
				return "", false, err
			}
			w.seq = m.WatchSequence
			if w.done() {
				return "", false, nil // no ack: the watch is unwatched now
			}
			if gone != nil {
				continue // the watch is gone: its close is on its way
			}
			// Bounded like every request (ctx may be the whole --timeout): an ack nobody answers
			// (a stated that hangs) is given up, and the watch starts again.
			actx, cancel := context.WithTimeout(ctx, w.requestTimeout())
			err := wt.Ack(actx, w.seq)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return "", false, nil
				}
				ackFailed = fmt.Sprintf("ack %d failed: %v", w.seq, err)
				if !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, wire.ErrUnavailable) {
					return ackFailed, false, nil
				}
				gone = time.After(w.requestTimeout())
			}
		}
	}
}

// checkInterval is how long a watch that receives nothing waits before it checks that it is still
// live (client.DefaultCheckInterval, as a Cache).
var checkInterval = client.DefaultCheckInterval

// check asks the server whether the watch still exists and whether it sent an update past the last
// one printed, by acknowledging one past it (SPEC 7.5: above the highest sent is INVALID_ARGUMENT,
// and changes nothing). sent is true when the server took it: that update was sent, and is awaited.
// A reason says why the watch starts again (the server no longer has it, or did not answer); with
// wait, only once what the server still sends has been printed, for as long as a request may take
// (a check refused UNAVAILABLE: a stated that is stopping refuses requests before it closes its
// watches with SHUTDOWN).
func (w *watcher) check(ctx context.Context, wt *client.Watch) (reason string, sent, wait bool, err error) {
	actx, cancel := context.WithTimeout(ctx, w.requestTimeout())
	err = wt.Ack(actx, w.seq+1)
	cancel()
	switch {
	case err == nil:
		return "", true, false, nil
	case errors.Is(err, wire.ErrInvalidArgument):
		return "", false, false, nil // nothing sent past what was printed
	case ctx.Err() != nil:
		return "", false, false, nil
	case errors.Is(err, wire.ErrNotFound):
		return "the server no longer has the watch (stated restarted?)", false, false, nil
	}
	return fmt.Sprintf("checking the watch failed: %v", err), false, errors.Is(err, wire.ErrUnavailable), nil
}

// stop ends an incarnation. A watch the server closed is gone: only the subscription is released
// (the unwatch is not waited for).
func (w *watcher) stop(ctx context.Context, wt *client.Watch, closed bool) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(w.requestTimeout(), 2*time.Second))
	if closed {
		cancel()
	}
	defer cancel()
	_ = wt.Stop(sctx)
}

// notice says what the watcher does: on stdout between the tables, on stderr with --json (stdout
// then holds only wire JSON).
func (w *watcher) notice(format string, args ...any) {
	var out io.Writer = w.a.stdout
	if w.a.g.json {
		out = w.a.stderr
	}
	fmt.Fprintf(out, "statectl: watch: "+format+"\n", args...)
}

func (w *watcher) printSnapshot(s *wire.WatchState) error {
	out := w.a.stdout
	if w.a.g.json {
		return writeJSON(out, s)
	}
	fmt.Fprintf(out, "snapshot of %s prefix %q at revision %d: %d entries\n", s.Namespace, s.KeyPrefix, s.SnapshotRevision, len(s.Entries))
	if len(s.Entries) == 0 {
		return nil
	}
	return writeEntryTable(out, s.Entries)
}

// print prints one update or close, and counts it.
func (w *watcher) print(m wire.WatchMessage) error {
	w.printed++
	out := w.a.stdout
	if w.a.g.json {
		return writeJSON(out, m)
	}
	var err error
	switch m.Kind {
	case wire.UpdateClosed:
		_, err = fmt.Fprintf(out, "CLOSED  %s: %s\n", m.Reason, m.Message)
	case wire.UpdatePut:
		e := m.Entry
		_, err = fmt.Fprintf(out, "PUT     %s  seq %d  revision %d  schema %s  owner %s  expires %s  size %d\n",
			m.Key, m.WatchSequence, m.Revision, e.Schema, e.Owner, formatTime(e.ExpiresAtMs), len(e.Document))
	default:
		_, err = fmt.Fprintf(out, "%-7s %s  seq %d  revision %d\n", m.Kind, m.Key, m.WatchSequence, m.Revision)
	}
	return err
}
