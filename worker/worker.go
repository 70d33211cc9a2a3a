package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Options configure a Worker.
type Options struct {
	// Conn is the worker's NATS connection, authenticated as Principal with the inbox prefix
	// _INBOX.<principal> (client.Connect makes one). Required.
	Conn *nats.Conn
	// Principal is the NATS user the worker runs as. Required.
	Principal string
	// WorkerID names this process among the principal's workers ([A-Za-z0-9_-]{1,64}). Required.
	// It must be unique among the principal's running processes: two processes with one id share one
	// worker entry, which then takes each one's status and leases in turn (a put at every heartbeat
	// that differs), and nothing detects it. A process restarted under the same id (a pod's name)
	// takes over the entry its predecessor left, with its first_seen_ms, until that entry expired.
	WorkerID string
	// Service is the service the worker belongs to (a principal-id-like name). Default: Principal.
	Service string
	// Prefix is the subject prefix. Default "kp".
	Prefix string
	// HeartbeatInterval is how often heartbeats go out (100 ms to 60 s). Default 1 s. The server
	// keeps the worker's entry for three intervals (at least 1 s) after the last one.
	HeartbeatInterval time.Duration
	// StopTimeout bounds the graceful stop (positive). Default 10 s.
	StopTimeout time.Duration
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
}

// Component is something the worker starts and stops with itself: a reconciler controller, a cache,
// a tracker. Start must return once the component runs; Stop must return once it has stopped. Run
// calls Stop only for a component whose Start returned nil, so a Start that fails must leave nothing
// running, as the Start of reconciler.Controller and of capabilities.Tracker does.
type Component interface {
	Start(ctx context.Context) error
	Stop()
}

// Worker is a running worker process. Create it with New, add components, then Run it.
type Worker struct {
	opts   Options
	client *client.Client

	mu         sync.Mutex
	status     string
	leases     map[string]bool
	components []Component
	goroutines []namedFunc
	lastErr    error
	denied     error // NATS's refusal of the last heartbeat checked (verifyHeartbeat), nil if it went through
	lastBeat   time.Time
	// unreached is the last reachability check's finding (checkReach): why no state server answered
	// the worker, nil when one did (or no check has ended yet).
	unreached error
	running   bool
	kick      chan struct{}
	hbMu      sync.Mutex // one heartbeat at a time, so they reach the server in sequence order
	sequence  int64
	leftOut   int // leases the last heartbeat left out, to log a change once (under hbMu)
	// sent and failed count the heartbeats published and those that could not be (under mu).
	sent, failed uint64
}

type namedFunc struct {
	name string
	fn   func(ctx context.Context) error
}

// New validates the options and makes a Worker.
func New(o Options) (*Worker, error) {
	if o.Conn == nil {
		return nil, errors.New("worker: Options.Conn is required")
	}
	if !wire.ValidPrincipalID(o.Principal) {
		return nil, fmt.Errorf("worker: invalid principal %q", o.Principal)
	}
	if !wire.ValidWatchID(o.WorkerID) {
		return nil, fmt.Errorf("worker: invalid worker id %q ([A-Za-z0-9_-]{1,64})", o.WorkerID)
	}
	if o.Service == "" {
		o.Service = o.Principal
	}
	if !wire.ValidPrincipalID(o.Service) {
		return nil, fmt.Errorf("worker: invalid service %q", o.Service)
	}
	if o.Prefix == "" {
		o.Prefix = wire.DefaultPrefix
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = time.Duration(wire.DefaultHeartbeatIntervalMs) * time.Millisecond
	}
	if ms := o.HeartbeatInterval.Milliseconds(); ms < wire.MinHeartbeatIntervalMs || ms > wire.MaxHeartbeatIntervalMs {
		return nil, fmt.Errorf("worker: heartbeat interval %v is outside 100 ms to 60 s", o.HeartbeatInterval)
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.StopTimeout < 0 {
		return nil, fmt.Errorf("worker: negative StopTimeout %v", o.StopTimeout)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c, err := client.New(o.Conn, o.Principal, client.WithPrefix(o.Prefix), client.WithLogger(o.Logger))
	if err != nil {
		return nil, err
	}
	return &Worker{opts: o, client: c, status: wire.StatusStarting, leases: map[string]bool{}, kick: make(chan struct{}, 1)}, nil
}

// Client is the worker's state store client.
func (w *Worker) Client() *client.Client { return w.client }

// Conn is the worker's NATS connection.
func (w *Worker) Conn() *nats.Conn { return w.opts.Conn }

// ID is the worker id.
func (w *Worker) ID() string { return w.opts.WorkerID }

// Principal is the worker's principal.
func (w *Worker) Principal() string { return w.opts.Principal }

// Logger is the worker's logger.
func (w *Worker) Logger() *slog.Logger { return w.opts.Logger }

// Add registers a component; Run starts components in the order added and stops them in reverse.
// A Run already going on does not start it: components and goroutines registered while the worker
// runs take part in its next Run. A nil component makes Run fail before it starts anything.
func (w *Worker) Add(c Component) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.components = append(w.components, c)
}

// Go registers a goroutine the worker owns: Run starts it after the components and cancels its
// context, and waits for it, when the worker stops: after the heartbeat that says "draining", not as
// soon as Run's ctx ends, so that the fleet learns of the stop before the goroutine releases its
// leases. An error it returns (other than the context's) stops the worker, and Run returns it;
// one it returns as the worker stops is returned by Run too, when nothing failed before. Like Add,
// it takes part in the next Run, not in one going on; a nil fn makes Run fail before it starts
// anything.
func (w *Worker) Go(name string, fn func(ctx context.Context) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.goroutines = append(w.goroutines, namedFunc{name, fn})
}

// HoldLease records that the worker holds the lease key (its heartbeats list it); DropLease forgets
// it. A change is announced at once. key must follow the key rule (SPEC section 1): the server drops
// a heartbeat that lists an invalid key, so a worker listing one would stop being seen alive. Such a
// key is refused: logged and not listed. Heartbeats list the leases in key order, as many as a
// heartbeat holds (64 KiB: some 250 keys of the longest kind); the server's entry lists as many as
// max_document_bytes holds.
func (w *Worker) HoldLease(key string) {
	if !wire.ValidKey(key) {
		w.opts.Logger.Error("worker: HoldLease refused an invalid lease key; it is not listed in heartbeats", "worker", w.opts.WorkerID, "key", key)
		return
	}
	w.setLease(key, true)
}

// DropLease forgets a lease the worker no longer holds.
func (w *Worker) DropLease(key string) { w.setLease(key, false) }

func (w *Worker) setLease(key string, held bool) {
	w.mu.Lock()
	changed := w.leases[key] != held
	if held {
		w.leases[key] = true
	} else {
		delete(w.leases, key)
	}
	w.mu.Unlock()
	if changed {
		w.poke()
	}
}

// Leases lists the leases the worker holds, sorted.
func (w *Worker) Leases() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaseListLocked()
}

func (w *Worker) leaseListLocked() []string {
	out := make([]string, 0, len(w.leases))
	for k := range w.leases {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Status is the worker's current status: starting, ready, draining or stopping.
func (w *Worker) Status() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

func (w *Worker) setStatus(s string) {
	w.mu.Lock()
	w.status = s
	w.mu.Unlock()
	w.poke()
}

func (w *Worker) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Healthy reports nil while the worker runs, its connection is up, NATS did not refuse its last
// checked heartbeat and its last heartbeat went out within two intervals. NATS refuses a publish
// outside the connection's permissions (a Principal that is not the connection's user) after Publish
// has returned nil: without that check a worker whose entry is never written would report itself
// healthy. Each periodic heartbeat is checked anew (see verifyHeartbeat), so a worker whose
// permissions are put right (a reload keeps its connection) is healthy again at its next heartbeat.
// Healthy cannot tell whether a state server hears the heartbeats (a publish that reaches the worker's
// NATS node goes out, heard or not): across a parted NATS route it stays nil while the worker's entry
// expires at the state server. Ready tells.
func (w *Worker) Healthy() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.running:
		return errors.New("not running")
	case !w.opts.Conn.IsConnected():
		return errors.New("not connected to NATS")
	case w.denied != nil:
		return fmt.Errorf("heartbeat refused by NATS: %w", w.denied)
	case w.lastErr != nil:
		return fmt.Errorf("heartbeat: %w", w.lastErr)
	case time.Since(w.lastBeat) > 2*w.opts.HeartbeatInterval:
		return fmt.Errorf("no heartbeat for %v", time.Since(w.lastBeat).Round(time.Millisecond))
	}
	return nil
}

// checkRegistered refuses a nil component or goroutine function: Run would panic on it, a goroutine's
// panic taking the whole process down after the worker announced itself ready.
func checkRegistered(components []Component, goroutines []namedFunc) error {
	for i, c := range components {
		if c == nil {
			return fmt.Errorf("worker: component %d (of %d added) is nil", i+1, len(components))
		}
	}
	for _, g := range goroutines {
		if g.fn == nil {
			return fmt.Errorf("worker: goroutine %q has a nil function", g.name)
		}
	}
	return nil
}

// errConnClosed is Run's error once the worker's NATS connection is closed for good.
var errConnClosed = fmt.Errorf("worker: its NATS connection is closed: %w", nats.ErrConnectionClosed)

// connClosedError is errConnClosed with why the connection closed, when nats.go knows it (its last
// error: NATS refusing the login of a principal removed at a reload, say, which closes the connection
// after the second refusal, or the last dial error once the reconnect attempts ran out). Without it
// the operator reads "connection closed" and looks for a network fault. A refused publish never
// closes a connection, so a LastError that is one says nothing of the close and is left out.
func (w *Worker) connClosedError() error {
	why := w.opts.Conn.LastError()
	if why != nil && !errors.Is(why, nats.ErrConnectionClosed) && !errors.Is(why, nats.ErrPermissionViolation) {
		return fmt.Errorf("worker: its NATS connection is closed (%w): %w", why, nats.ErrConnectionClosed)
	}
	return errConnClosed
}

// startError is Run's error for a component's Start that returned err: nil when the worker was told
// to stop meanwhile and err is only the cancellation (a Start that waits for the store returns its
// context's error), the closed connection when that ended the start, err otherwise.
func (w *Worker) startError(ctx context.Context, connClosed <-chan struct{}, err error) error {
	cancelled := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case isClosed(connClosed) && ctx.Err() == nil:
		return errors.Join(w.connClosedError(), fmt.Errorf("worker: start: %w", err))
	case cancelled && ctx.Err() != nil:
		return nil
	}
	return fmt.Errorf("worker: start: %w", err)
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// heartbeatDenied reports whether err is NATS refusing a publish to subject.
func heartbeatDenied(err error, subject string) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
}

// verifyHeartbeat learns whether NATS refused the heartbeat published after before was read from
// Conn.LastError, and records it for Healthy. NATS refuses a publish asynchronously, and its refusal
// stays the connection's LastError until the connection reconnects, however many heartbeats go
// through after it (a reload that puts the permissions right keeps the connection), while another
// error can take its place although the heartbeats are still refused: LastError alone says neither
// "refused now" nor "allowed now". The server answers a PING only after it has handled what was
// published before it, so once a flush returns, a refusal of this heartbeat is in LastError, as a new
// error value. The flush waits at most half an interval (and not at all while NATS is unreachable, or
// once ctx ends); a check that cannot finish leaves the last one's finding.
func (w *Worker) verifyHeartbeat(ctx context.Context, before error) {
	if !w.opts.Conn.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.HeartbeatInterval/2)
	defer cancel()
	if w.opts.Conn.FlushWithContext(ctx) != nil {
		return
	}
	subject := wire.HeartbeatSubject(w.opts.Prefix, w.opts.Principal, w.opts.WorkerID)
	after := w.opts.Conn.LastError()
	var denied error
	// Both refusals are pointers made by nats.go for each -ERR, so == tells a new one from the old.
	if heartbeatDenied(after, subject) && !(heartbeatDenied(before, subject) && after == before) {
		denied = after
	}
	w.mu.Lock()
	w.denied = denied
	w.mu.Unlock()
}

// Ready reports nil while the worker is ready (Status() is "ready", Healthy is nil) and, as far as it
// can tell, its heartbeats reach a state server; otherwise why not. A heartbeat is a publish that the
// worker's NATS node takes whether or not a state server hears it: across a parted NATS cluster route
// (the worker's node cut off from the state server's, its own connection up) the heartbeats are lost
// without an error, the worker's entry expires at the state server after three intervals (at least
// 1 s), and its leases lapse with their TTLs. So Run asks the state server for its info once per such
// period (the entry's TTL), bounded by that period and the client's request timeout, and Ready reports
// the last request that got no answer ("no state server answers": UNAVAILABLE at once after a cut
// route, a timeout across a frozen one), until one is answered again; a warning is logged when it
// starts and the return of an answer is told. The first answer after a partition that heals is
// followed by the heartbeat that writes the entry anew; Run goes on through it. It is a readiness
// check: the state server's absence (a partition, a restart of stated) makes a worker not ready, not
// dead, and Healthy stays nil meanwhile, since restarting the worker would not help.
func (w *Worker) Ready() error {
	if err := w.Healthy(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.status != wire.StatusReady:
		return fmt.Errorf("status %s", w.status)
	case w.unreached != nil:
		return fmt.Errorf("no state server answers, so the heartbeats reach none (the worker's entry expires): %w", w.unreached)
	}
	return nil
}

// reachPeriod is how often Run checks that a state server answers: the TTL of the worker's entry.
func (w *Worker) reachPeriod() time.Duration {
	return max(3*w.opts.HeartbeatInterval, time.Second)
}

// checkReach asks the state server for its info, once per reachPeriod until ctx ends, while the NATS
// connection is up (Healthy reports it down), and records the finding for Ready, logging a change.
func (w *Worker) checkReach(ctx context.Context, log *slog.Logger) {
	period := w.reachPeriod()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.opts.Conn.IsConnected() {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, min(period, w.client.RequestTimeout()))
		_, err := w.client.Info(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		was := w.unreached
		w.unreached = err
		w.mu.Unlock()
		switch {
		case err != nil && was == nil:
			log.Warn("no state server answers: the heartbeats reach none, and the worker's entry expires there (a NATS route partition, or stated down)",
				"err", err)
		case err == nil && was != nil:
			log.Info("a state server answers again")
		}
	}
}

// HealthHandler serves Healthy over HTTP: 200 "ok", or 503 with the reason. It is a liveness check:
// it says ok while the components start too (a worker waiting for the store is alive, and restarting
// it would not help), and while no state server hears the heartbeats. A readiness check is Ready.
func (w *Worker) HealthHandler() http.Handler { return checkHandler(w.Healthy, "ok") }

// ReadyHandler serves Ready over HTTP: 200 "ready", or 503 with the reason. It is a readiness check:
// 503 while the worker starts or stops, and while no state server answers it.
func (w *Worker) ReadyHandler() http.Handler { return checkHandler(w.Ready, "ready") }

// checkHandler answers 200 with body while check returns nil, else 503 with its error.
func checkHandler(check func() error, body string) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, body)
	})
}

// errNotConnected is heartbeat's error while the NATS connection is down.
var errNotConnected = errors.New("NATS not connected")

// heartbeat publishes one heartbeat with the current status and leases. While the NATS connection is
// down it sends nothing and returns errNotConnected: a connection made by client.Connect has no
// reconnect buffer, so the publish would fail anyway (with nats.go's "outbound buffer limit
// exceeded", which says nothing to a reader), and on one with a buffer an old heartbeat delivered
// at the reconnect tells nothing the first one after it does not (Run sends one at once).
func (w *Worker) heartbeat() error {
	w.hbMu.Lock()
	defer w.hbMu.Unlock()
	if !w.opts.Conn.IsConnected() {
		w.mu.Lock()
		w.lastErr = errNotConnected
		w.failed++
		w.mu.Unlock()
		return errNotConnected
	}
	w.mu.Lock()
	w.sequence++
	hb := wire.Heartbeat{WorkerID: w.opts.WorkerID, Service: w.opts.Service, Sequence: w.sequence,
		SentAtMs: time.Now().UnixMilli(), IntervalMs: w.opts.HeartbeatInterval.Milliseconds(), Status: w.status,
		Leases: w.leaseListLocked()}
	w.mu.Unlock()
	subject := wire.HeartbeatSubject(w.opts.Prefix, w.opts.Principal, w.opts.WorkerID)
	body, _ := json.Marshal(hb)
	if limit := maxHeartbeatBytes - len(subject); len(body) > limit {
		body = w.cutLeases(hb, len(body), limit)
	} else {
		w.leftOut = 0
	}
	err := w.opts.Conn.Publish(subject, body)
	w.mu.Lock()
	w.lastErr = err
	if err == nil {
		w.lastBeat = time.Now()
		w.sent++
	} else {
		w.failed++
	}
	w.mu.Unlock()
	return err
}

// maxHeartbeatBytes bounds a heartbeat message, its subject and body (the worker sends no headers):
// the state server drops a larger one (64 KiB, or four times max_document_bytes when that is more) as
// breaking a rule, and the worker's entry would expire while it runs. A worker status lists only as
// many leases as max_document_bytes holds anyway.
const maxHeartbeatBytes = 65536

// cutLeases returns the body of hb, size bytes encoded, with its lease list cut from the end (it is
// sorted, so the same leases are left out of every heartbeat, and steady heartbeats stay keepalives)
// until it fits in limit bytes. w.hbMu must be held. The leases left out are still held, and their
// entries still say so; only the fleet view does not list them.
func (w *Worker) cutLeases(hb wire.Heartbeat, size, limit int) []byte {
	over, n := size-limit, len(hb.Leases)
	for over > 0 && n > 0 {
		n--
		over -= len(hb.Leases[n]) + 3 // its quotes and comma: a valid key needs no JSON escapes
	}
	left := len(hb.Leases) - n
	hb.Leases = hb.Leases[:n]
	body, _ := json.Marshal(hb)
	warn := left != w.leftOut
	w.leftOut = left
	if warn {
		w.opts.Logger.Warn("worker: more leases than a heartbeat can list; the last are left out of heartbeats",
			"worker", w.opts.WorkerID, "leases", len(hb.Leases)+left, "left_out", left)
	}
	return body
}

// Run starts the components and owned goroutines, heartbeats until ctx ends (or an owned goroutine
// fails, or the NATS connection is closed for good: an error wrapping nats.ErrConnectionClosed and
// the reason nats.go gave, nats.ErrAuthorization for a principal no longer configured, say), then
// stops gracefully: heartbeat draining, stop goroutines and components in reverse order
// (they release their leases), heartbeat stopping. It returns the first error. Heartbeats go out every
// interval from the start to the end, "starting" while components start (however long that takes)
// and "draining" while they stop, so the worker's entry never expires while it runs. While NATS is
// unreachable none is sent (a warning says so once per outage, not at every interval), and the
// first goes out as soon as the connection is back. A stop that
// takes longer than StopTimeout makes Run return with an error while the components' Stop calls go
// on (they are made once StopTimeout has passed even if an owned goroutine has not returned); the
// last heartbeat then still lists the leases they hold, which expire with their TTL if Stop never
// releases them. Run does not wait past StopTimeout for that last heartbeat to be flushed, nor at all
// while NATS is unreachable. A ctx that ends while the components start (or a connection closed
// for good then) stops the worker without starting the remaining components, the owned goroutines or
// announcing "ready"; a Start that then returns its context's error is no failure: Run returns nil
// for a worker told to stop. A Start that fails stops the worker the same way (draining, the
// components started before it stopped within StopTimeout, stopping), and Run returns its error; the
// component whose Start failed is not stopped. A nil component or goroutine function (Add, Go) is
// refused before anything starts or is announced.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("worker: already running")
	}
	components := slices.Clone(w.components)
	goroutines := slices.Clone(w.goroutines)
	if err := checkRegistered(components, goroutines); err != nil {
		w.mu.Unlock()
		return err
	}
	w.running = true
	w.status = wire.StatusStarting // a run after an earlier one starts over, not "stopping"
	w.unreached = nil
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	log := w.opts.Logger.With("worker", w.opts.WorkerID)
	// runCtx is the components' start and the owned goroutines' context. It ends with ctx only while
	// the components start; once they run, Run ends it itself, after the "draining" heartbeat, so that
	// the stop is announced before the goroutines stop and release their leases (a standby would
	// otherwise claim a lease the fleet view still shows this worker "ready" with).
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var startMu sync.Mutex
	starting := true
	defer context.AfterFunc(ctx, func() {
		startMu.Lock()
		defer startMu.Unlock()
		if starting {
			cancel()
		}
	})()
	// A connection closed for good (not one that is reconnecting) ends the run: nothing the worker does
	// can reach the store or the media server any more, and its heartbeats are gone. It also ends the
	// components' start (runCtx), which would otherwise wait for a store it can no longer reach.
	connClosed := make(chan struct{})
	status := w.opts.Conn.StatusChanged(nats.CLOSED)
	defer w.opts.Conn.RemoveStatusListener(status)
	go func() {
		if _, ok := <-status; ok || w.opts.Conn.IsClosed() {
			close(connClosed)
			cancel()
		}
	}()
	if w.opts.Conn.IsClosed() {
		return w.connClosedError()
	}
	// A reconnect sends a heartbeat at once: the worker's entry may have expired while NATS was away.
	reconnected := w.opts.Conn.StatusChanged(nats.CONNECTED)
	defer w.opts.Conn.RemoveStatusListener(reconnected)
	_ = w.heartbeat()
	hbCtx, hbStop := context.WithCancel(context.Background())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		ticker := time.NewTicker(w.opts.HeartbeatInterval)
		defer ticker.Stop()
		// A heartbeat that cannot be sent is warned of once, not at every interval: a worker waiting
		// for NATS (started before it, or cut off) would bury NATS's own reports under one warning
		// per heartbeat. The next failure for another reason is warned of too, and the first
		// heartbeat sent again is told.
		var failing string
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-ticker.C:
			case <-w.kick:
			case _, ok := <-reconnected:
				if !ok {
					reconnected = nil
					continue
				}
			}
			before := w.opts.Conn.LastError()
			if err := w.heartbeat(); err != nil {
				if err.Error() != failing {
					failing = err.Error()
					log.Warn("heartbeat not sent", "err", err)
				} else {
					log.Debug("heartbeat not sent", "err", err)
				}
				continue
			}
			if failing != "" {
				failing = ""
				log.Info("heartbeats sent again")
			}
			w.verifyHeartbeat(hbCtx, before)
		}
	}()
	reachDone := make(chan struct{})
	go func() {
		defer close(reachDone)
		w.checkReach(hbCtx, log)
	}()
	var stopHeartbeats sync.Once
	endHeartbeats := func() { stopHeartbeats.Do(func() { hbStop(); <-hbDone; <-reachDone }) }
	defer endHeartbeats()

	var started []Component
	stopComponents := func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].Stop()
		}
	}
	// A start that fails, or that ends because the worker was told to stop or lost its connection,
	// goes down the same way as a run: draining, the started components stopped within StopTimeout,
	// stopping.
	var runErr error
	for _, c := range components {
		if runCtx.Err() != nil {
			break
		}
		if err := c.Start(runCtx); err != nil {
			runErr = w.startError(ctx, connClosed, err)
			break
		}
		started = append(started, c)
	}
	startMu.Lock()
	starting = false // from now on ctx's end is handled below: draining first, then cancel
	startMu.Unlock()
	errs := make(chan error, len(goroutines))
	var wg sync.WaitGroup
	switch {
	case runErr != nil:
		log.Error("stopping: the start failed", "err", runErr)
	case runCtx.Err() != nil:
		// Told to stop, or cut off, while the components were starting (a Start that returns when
		// its context ends): the worker was never ready. It starts no goroutines and does not
		// announce "ready" on its way down.
		if isClosed(connClosed) && ctx.Err() == nil {
			runErr = w.connClosedError()
			log.Error("stopping: the NATS connection is closed for good", "err", runErr)
		}
	default:
		for _, g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Once the worker stops, the context's error (wrapped or not) is no failure; any
				// other is, and Run returns it (a stop that fails to flush or hand over).
				if err := g.fn(runCtx); err != nil && (runCtx.Err() == nil || !errors.Is(err, runCtx.Err())) {
					errs <- fmt.Errorf("worker: %s: %w", g.name, err)
				}
			}()
		}
		w.setStatus(wire.StatusReady)
		log.Info("worker ready", "principal", w.opts.Principal, "service", w.opts.Service)
		select {
		case <-ctx.Done():
		case runErr = <-errs:
			log.Error("stopping after a failure", "err", runErr)
		case <-connClosed:
			runErr = w.connClosedError()
			log.Error("stopping: the NATS connection is closed for good", "err", runErr)
		}
	}

	w.setStatus(wire.StatusDraining)
	_ = w.heartbeat()
	cancel()
	// Goroutines stop first (they may use the components), then the components, in reverse order.
	// A goroutine that ignores its context past StopTimeout does not hold the components up: they are
	// stopped anyway, so that nothing (a controller's Reconciles, a renewal) runs on unannounced after
	// Run returned.
	stopCtx, stopCancel := context.WithTimeout(context.Background(), w.opts.StopTimeout)
	defer stopCancel()
	goroutinesDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(goroutinesDone)
	}()
	stopping, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-goroutinesDone:
		case <-stopCtx.Done():
		}
		close(stopping)
		stopComponents()
	}()
	select {
	case <-done:
	case <-stopCtx.Done():
		<-stopping // the components' Stop calls have begun
		runErr = errors.Join(runErr, fmt.Errorf("worker: stop took longer than %v", w.opts.StopTimeout))
	}
	if runErr == nil {
		// A goroutine that failed in its own stop: the first such failure is Run's.
		select {
		case runErr = <-errs:
			log.Error("a goroutine failed as the worker stopped", "err", runErr)
		default:
		}
	}
	endHeartbeats()
	w.setStatus(wire.StatusStopping)
	_ = w.heartbeat()
	// Wait for the last heartbeat to leave only within what is left of StopTimeout, and not at all
	// while NATS is unreachable: nats.go's Flush would wait 10 s for a connection that is
	// reconnecting. A heartbeat not flushed here still goes out with the connection's buffer.
	if w.opts.Conn.IsConnected() && stopCtx.Err() == nil {
		_ = w.opts.Conn.FlushWithContext(stopCtx)
	}
	w.mu.Lock()
	unreached := w.unreached
	w.mu.Unlock()
	if unreached != nil {
		log.Warn("stopped while no state server answered: the draining and stopping heartbeats likely reached none, so the fleet learns of the stop only when the worker's entry expires, and leases not released expire with their TTLs",
			"err", unreached)
	}
	log.Info("worker stopped")
	return runErr
}
