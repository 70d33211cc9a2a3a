package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Defaults of Options.
const (
	DefaultMaxConcurrent = 1
	DefaultBaseBackoff   = 50 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultStopTimeout   = 10 * time.Second
)

// ErrStopped is returned by Start when the controller was stopped.
var ErrStopped = errors.New("reconciler: controller stopped")

// ErrAlreadyStarted is returned by a second Start of a controller that was not stopped: one that
// runs, is starting, or whose first Start failed (a Controller is started once; make a new one to
// try again). It is not ErrStopped.
var ErrAlreadyStarted = errors.New("reconciler: controller already started")

// Options configure a Controller. Namespace is required; the rest is optional.
type Options struct {
	// Namespace is the watched namespace, e.g. "service/transcoder-a".
	Namespace string
	// KeyPrefix narrows the watch to keys starting with it, e.g. "intents/" (empty: every key). A watch
	// snapshot is bounded (SPEC section 7.2): a prefix matching more is WATCH_TOO_BROAD at Start. One
	// that outgrows the bound later is followed until the cache has to watch again (a reconnect, say);
	// the cache then keeps its last entries and retries, Cache().Err() says why, and once it follows
	// again every key, and every key gone meanwhile, is reconciled.
	KeyPrefix string
	// MaxConcurrent bounds how many Reconciles (of different keys) run at once. Default 1.
	MaxConcurrent int
	// BaseBackoff is the wait before the first retry of a key whose Reconcile failed; each further
	// failure doubles it, up to MaxBackoff, and a success resets it. Default 50 ms.
	BaseBackoff time.Duration
	// MaxBackoff caps the retry wait. Default 30 s, or BaseBackoff when that is longer. It must not be
	// below BaseBackoff.
	MaxBackoff time.Duration
	// Triggers re-enqueue every known key whenever one of them receives a value: things a Reconcile
	// depends on besides its entry, such as the media server's capabilities (pass the channel of
	// capabilities.Tracker.Subscribe). A closed trigger is ignored from then on, and a nil one
	// altogether.
	Triggers []<-chan struct{}
	// ResyncEvery, when positive, re-enqueues every known key periodically, so drift that no event
	// reports is corrected eventually. Default 0: never.
	ResyncEvery time.Duration
	// Logger logs failed Reconciles and resyncs. Default: discard.
	Logger *slog.Logger
	// WatchID is the id of the cache's watch (the watch_id rule), unique among the principal's live
	// watches. Default: a random one. A fixed id lets a restarted process take over the watch its
	// predecessor left behind; so two controllers that run at once as one principal (a worker and its
	// standby) must not share one: each would take the watch from the other, again and again.
	WatchID string
	// StopTimeout bounds how long Stop waits for running Reconciles once it has cancelled their
	// context, as controller-runtime's manager bounds its graceful shutdown: a Reconcile blocked in a
	// call that ignores its context must not keep the cache (and its watch) alive for ever. A
	// Reconcile still running then is abandoned and logged; when it returns, its outcome schedules
	// nothing. Default DefaultStopTimeout (10 s).
	StopTimeout time.Duration
	// Metrics, when set, receive the controller's figures (see Metrics), labelled with Name. Default:
	// none.
	Metrics *Metrics
	// Name labels the controller's metrics: unique among the running controllers that share Metrics.
	// Default "<Namespace>/<KeyPrefix>" (service/transcoder-a/intents/).
	Name string
	// CheckInterval is how often the cache, when idle, checks that its watch is still live
	// (client.CacheOptions.CheckInterval): across a parted NATS route (the controller's NATS node cut
	// off from the state server's, its own connection up) no message and no status change tells the
	// cache that it follows nothing, and only this check does. Cache().Following() turns false within
	// about two intervals and a request timeout of the partition, and the cache follows again within
	// about an interval of its end. Default client.DefaultCheckInterval (5 s); negative: never check.
	CheckInterval time.Duration
}

// Controller keeps a Cache of the entries under Namespace/KeyPrefix and calls a Reconciler for every
// key that may need work: every key of each snapshot the cache installs (the first one included, and
// keys a resync found gone), every PUT, DELETE and EXPIRE, every trigger fire and every ResyncEvery
// (all known keys), and every Enqueue. Its workqueue deduplicates keys, never runs two Reconciles of
// one key at once, retries failures with per-key exponential backoff and honours Result.
//
// New, then Start, then Stop. Its methods are safe for concurrent use. The zero Controller is not
// usable: make one with New.
type Controller struct {
	c   *client.Client
	r   Reconciler
	o   Options
	log *slog.Logger
	q   *queue

	cache atomic.Pointer[client.Cache]

	ctx    context.Context // the controller's lifetime; Reconciles get it
	cancel context.CancelFunc

	mu      sync.Mutex
	started bool
	stopped bool
	wg      sync.WaitGroup // workers, triggers, ticker
	stop    sync.Once

	knownMu sync.Mutex
	known   map[string]struct{} // the cache's keys, as the handlers saw them
}

// New returns a controller that reconciles the entries of o.Namespace under o.KeyPrefix through c
// with r. It checks the options and starts nothing; see Start. It returns an error naming the
// mistake, and no controller, for a nil client, a nil Reconciler (a nil Func too), an invalid
// Namespace, KeyPrefix or WatchID, a negative MaxConcurrent or duration, a MaxBackoff below
// BaseBackoff, or a Name that another controller sharing Metrics has and has not stopped. It sends
// nothing, so it never returns a store error.
func New(c *client.Client, r Reconciler, o Options) (*Controller, error) {
	switch {
	case c == nil:
		return nil, errors.New("reconciler: nil client")
	case r == nil:
		return nil, errors.New("reconciler: nil Reconciler")
	case isNilFunc(r):
		// A nil Func would panic in every Reconcile, which the controller recovers as a failure and
		// retries with backoff for ever: refuse it here, where the mistake is made.
		return nil, errors.New("reconciler: nil Reconciler (a nil Func)")
	case !wire.ValidNamespace(o.Namespace):
		return nil, fmt.Errorf("reconciler: invalid namespace %q", o.Namespace)
	case !wire.ValidKeyPrefix(o.KeyPrefix):
		return nil, fmt.Errorf("reconciler: invalid key prefix %q", o.KeyPrefix)
	case o.WatchID != "" && !wire.ValidWatchID(o.WatchID):
		return nil, fmt.Errorf("reconciler: invalid watch id %q", o.WatchID)
	case o.MaxConcurrent < 0:
		return nil, fmt.Errorf("reconciler: negative MaxConcurrent %d", o.MaxConcurrent)
	case o.BaseBackoff < 0 || o.MaxBackoff < 0 || o.ResyncEvery < 0 || o.StopTimeout < 0:
		return nil, errors.New("reconciler: negative BaseBackoff, MaxBackoff, ResyncEvery or StopTimeout")
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.BaseBackoff == 0 {
		o.BaseBackoff = DefaultBaseBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.BaseBackoff)
	}
	if o.MaxBackoff < o.BaseBackoff {
		return nil, fmt.Errorf("reconciler: MaxBackoff %v below BaseBackoff %v", o.MaxBackoff, o.BaseBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = o.Namespace + "/" + o.KeyPrefix
	}
	o.Triggers = append([]<-chan struct{}(nil), o.Triggers...)
	var waited func(time.Duration)
	if m := o.Metrics; m != nil {
		w := m.wait.WithLabelValues(o.Name)
		waited = func(d time.Duration) { w.Observe(d.Seconds()) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctrl := &Controller{
		c: c, r: r, o: o, q: newQueue(o.BaseBackoff, o.MaxBackoff, waited),
		log: o.Logger.With("namespace", o.Namespace, "key_prefix", o.KeyPrefix),
		ctx: ctx, cancel: cancel, known: map[string]struct{}{},
	}
	if m := o.Metrics; m != nil {
		if err := m.claim(o.Name, ctrl); err != nil {
			cancel()
			return nil, err
		}
	}
	return ctrl, nil
}

// isNilFunc reports whether r is a Func holding no function.
func isNilFunc(r Reconciler) bool {
	f, ok := r.(Func)
	return ok && f == nil
}

// Start starts the cache and returns once its first snapshot is installed and every key in it is
// enqueued; then it starts the workers, the triggers and the periodic resync. ctx bounds only this
// wait (the controller runs until Stop). Transient failures of the first watch are retried until ctx
// ends, and then ctx's error is returned (wrapped); others are returned at once: the store's refusal
// (its *wire.Error, wrapped: errors.Is(err, wire.ErrPermissionDenied), WATCH_TOO_BROAD, ...) and a
// NATS connection closed for good (wrapping nats.ErrConnectionClosed). Start may be called
// once: a second call, even after a failed Start, returns ErrAlreadyStarted, and a Start after Stop
// (or one that Stop interrupted) returns ErrStopped. A failed Start leaves nothing running (no
// cache, no goroutine), so Stop is then not needed, though harmless.
func (c *Controller) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return ErrStopped
	}
	if c.started {
		c.mu.Unlock()
		return ErrAlreadyStarted
	}
	c.started = true
	c.mu.Unlock()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)() // Stop interrupts the wait
	cache, err := c.c.NewCache(wctx, client.CacheOptions{
		Namespace: c.o.Namespace, KeyPrefix: c.o.KeyPrefix, WatchID: c.o.WatchID, Logger: c.o.Logger,
		CheckInterval: c.o.CheckInterval,
		Handlers: client.Handlers{
			OnPut:    func(e wire.Entry) { c.onChange(e.Key, true) },
			OnDelete: func(key string, _ uint64) { c.onChange(key, false) },
			OnExpire: func(key string, _ uint64) { c.onChange(key, false) },
			OnResync: c.onResync,
		},
	})
	if err != nil {
		if c.ctx.Err() != nil {
			return ErrStopped
		}
		return fmt.Errorf("reconciler: start cache: %w", err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped { // Stop ran while the cache started: it could not close it
		if err := cache.Close(); err != nil {
			c.log.Warn("reconciler: closing the cache", "err", err)
		}
		return ErrStopped
	}
	c.cache.Store(cache)
	c.q.start()
	for range c.o.MaxConcurrent {
		c.goOwned(c.work)
	}
	for _, t := range c.o.Triggers {
		if t != nil {
			c.goOwned(func() { c.follow(t) })
		}
	}
	if c.o.ResyncEvery > 0 {
		c.goOwned(c.tick)
	}
	return nil
}

// goOwned runs f on a goroutine that Stop waits for. c.mu must be held.
func (c *Controller) goOwned(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// Stop stops the controller cleanly: it cancels the context of running Reconciles, drops the queued
// keys, waits for the running Reconciles (and the controller's other goroutines) to return, for at
// most Options.StopTimeout, then closes the cache (its entries stay readable). A Reconcile that
// ignores its cancelled context past StopTimeout is abandoned (logged with its key): it runs on until
// it returns, and its outcome schedules nothing. Closing the cache then unwatches at the store, which
// adds at most a few of the client's request timeouts while the store does not answer (see
// client.Cache.Close). No Reconcile starts after Stop returns, and none whose key a worker takes
// after Stop began. Later calls wait for the first one and return.
//
// Stop waits for the running Reconciles, so a Reconcile must not call it: it would wait the whole
// StopTimeout for itself (and every other Stop caller with it). A Reconcile that wants the
// controller stopped calls go ctrl.Stop(), or, under a worker.Worker, ends the worker's context.
func (c *Controller) Stop() {
	c.stop.Do(func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		c.cancel()
		c.q.shutdown()
		waited := make(chan struct{})
		go func() { // ends when the last Reconcile returns, abandoned or not
			c.wg.Wait()
			close(waited)
		}()
		t := time.NewTimer(c.o.StopTimeout)
		select {
		case <-waited:
		case <-t.C:
			c.log.Warn("reconciler: stopping without the Reconciles that ignore their cancelled context",
				"keys", c.q.inFlight(), "stop_timeout", c.o.StopTimeout)
		}
		t.Stop()
		if k := c.cache.Load(); k != nil {
			if err := k.Close(); err != nil {
				c.log.Warn("reconciler: closing the cache", "err", err)
			}
		}
		if m := c.o.Metrics; m != nil {
			m.release(c.o.Name, c)
		}
	})
}

// Cache returns the controller's cache: the current entries under its prefix, for the Reconciler to
// read (it holds every change that enqueued a key before the key's Reconcile starts). It is nil
// before Start has installed the first snapshot.
func (c *Controller) Cache() *client.Cache { return c.cache.Load() }

// Enqueue asks for a Reconcile of key (in the controller's namespace). A key already waiting is not
// queued twice. Keys enqueued before Start are reconciled once it has started; after Stop, Enqueue
// does nothing. A key that is not a valid key under KeyPrefix is ignored (and logged): the Cache never
// holds it, so a Reconcile would take an entry the store holds for one that is gone. Enqueue never
// blocks, so a Reconcile may call it (for another key, or its own).
func (c *Controller) Enqueue(key string) {
	if !wire.ValidKey(key) || !strings.HasPrefix(key, c.o.KeyPrefix) {
		c.log.Warn("reconciler: Enqueue ignored a key that is not a valid key under the prefix", "key", key)
		return
	}
	c.q.add(key)
}

// enqueueAll enqueues every known key.
func (c *Controller) enqueueAll() {
	c.knownMu.Lock()
	defer c.knownMu.Unlock()
	for k := range c.known {
		c.q.add(k)
	}
}

// onChange handles a PUT (present) or a DELETE or EXPIRE of key.
func (c *Controller) onChange(key string, present bool) {
	c.knownMu.Lock()
	if present {
		c.known[key] = struct{}{}
	} else {
		delete(c.known, key)
	}
	c.knownMu.Unlock()
	c.q.add(key)
}

// onResync handles a snapshot: every key in it and every key it no longer holds needs a look.
func (c *Controller) onResync(snapshot []wire.Entry, rev uint64) {
	c.knownMu.Lock()
	old := c.known
	c.known = make(map[string]struct{}, len(snapshot))
	for _, e := range snapshot {
		c.known[e.Key] = struct{}{}
		c.q.add(e.Key)
	}
	gone := 0
	for k := range old {
		if _, ok := c.known[k]; !ok {
			c.q.add(k)
			gone++
		}
	}
	c.knownMu.Unlock()
	c.log.Debug("reconciler: snapshot enqueued", "revision", rev, "entries", len(snapshot), "gone", gone)
}

// follow re-enqueues every known key on each value of trigger, until Stop or the trigger closes.
func (c *Controller) follow(trigger <-chan struct{}) {
	for {
		select {
		case <-c.ctx.Done():
			return
		case _, ok := <-trigger:
			if !ok {
				return
			}
			c.enqueueAll()
		}
	}
}

// tick re-enqueues every known key every ResyncEvery, until Stop.
func (c *Controller) tick() {
	t := time.NewTicker(c.o.ResyncEvery)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.enqueueAll()
		}
	}
}

// work is one worker: it reconciles keys until the queue shuts down.
func (c *Controller) work() {
	for {
		key, ok := c.q.get()
		if !ok {
			return
		}
		c.process(key)
		c.q.done(key)
	}
}

// process reconciles one key and schedules what its outcome asks for.
func (c *Controller) process(key string) {
	if c.ctx.Err() != nil {
		return
	}
	start := time.Now()
	res, panicked, err := c.reconcile(key)
	took := time.Since(start)
	var result string
	switch {
	case c.ctx.Err() != nil:
		return // stopping: the outcome of a cancelled Reconcile schedules nothing, and is not counted
	case err != nil:
		result = resultError
		d := c.q.addRateLimited(key)
		c.log.Warn("reconciler: reconcile failed; retrying", "key", key, "err", err, "backoff", d,
			"failures", c.q.numFailures(key))
	case res.RequeueAfter > 0:
		result = resultRequeueAfter
		c.q.forget(key)
		c.q.addAfter(key, res.RequeueAfter)
	case res.Requeue:
		result = resultRequeue
		c.q.addRateLimited(key)
	default:
		result = resultSuccess
		c.q.forget(key)
	}
	if m := c.o.Metrics; m != nil {
		m.observe(c.o.Name, took, result, panicked)
	}
}

// reconcile calls the Reconciler, turning a panic into an error (and reporting it).
func (c *Controller) reconcile(key string) (res Result, panicked bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("reconciler: reconcile panicked", "key", key, "panic", p, "stack", string(debug.Stack()))
			res, panicked, err = Result{}, true, fmt.Errorf("reconciler: reconcile of %q panicked: %v", key, p)
		}
	}()
	res, err = c.r.Reconcile(c.ctx, Request{Namespace: c.o.Namespace, Key: key})
	return res, false, err
}
