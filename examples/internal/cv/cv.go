// Package cv is the example computer-vision worker, shared by examples/cvworker and examples/demo. An
// intent in service/<service>/intents/ assigns a model profile (parameters.<service>.model_profile) to
// a stable source and variant; one worker claims the intent's lease, subscribes to the variant once it
// is READY, and emits validated (simulated) detection events to its log. Event truth belongs to an event
// catalog, not to state entries, so events are never written to the store. Health is reported
// separately, by the worker runtime.
package cv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/worker"
)

// Config configures a Worker.
type Config struct {
	Conn      *nats.Conn
	Principal string // an admin principal (service namespaces are admin-written)
	WorkerID  string
	Service   string // default "cv-a"
	// LeaseTTL is the TTL of the intents' leases, 1 s to 24 h (New refuses others). Default 5 s.
	LeaseTTL time.Duration
	// EventEvery is how often a simulated detection is emitted while subscribed. Default 1 s.
	EventEvery time.Duration
	Logger     *slog.Logger
	// Capabilities configures the worker's capabilities tracker (how often it fetches unasked, when a
	// silent media server's snapshot goes stale); zero fields take the tracker's defaults, and its
	// Logger defaults to Logger.
	Capabilities capabilities.TrackerOptions
	// Events, when set, is called for each step worth narrating and for each emitted detection.
	Events func(kind, intent, detail string)
}

// Detection is one simulated model output. Validate enforces what a real event router would.
type Detection struct {
	SourceID   string
	Model      string
	Label      string
	Confidence float64
	AtMs       int64
}

// Validate rejects a detection no consumer should see.
func (d Detection) Validate() error {
	switch {
	case d.SourceID == "" || d.Model == "" || d.Label == "":
		return errors.New("detection: source, model and label are required")
	case d.Confidence < 0 || d.Confidence > 1:
		return fmt.Errorf("detection: confidence %v outside 0 to 1", d.Confidence)
	case d.AtMs <= 0:
		return errors.New("detection: time is required")
	}
	return nil
}

// Worker is a computer-vision worker.
type Worker struct {
	cfg     Config
	ns      string
	w       *worker.Worker
	tracker *capabilities.Tracker
	cmds    *capabilities.Commands
	ctrl    *reconciler.Controller

	mu     sync.Mutex
	active map[string]*job
	wg     sync.WaitGroup
}

type job struct {
	lease          *lease.Lease
	subscriptionID string // "" while the variant is not READY (its publisher went away, say)
	sessionID      string
	model          string
	// What the subscription is to, as the intent named it when it was made: an intent that now names
	// another source, stream or variant (an empty variant_id is the stream's own) ends it.
	sourceID, streamID, variantID string
	stop                          context.CancelFunc
	// unanswered is set while the withdrawn intent's unsubscribe reaches nobody: the first such
	// unsubscribe is warned of (and told), the repeats, one a second for as long as the media server
	// is silent, are logged at Debug, and the answer that ends the outage is told at Info.
	unanswered bool
}

// New builds a CV worker.
func New(cfg Config) (*Worker, error) {
	if cfg.Service == "" {
		cfg.Service = "cv-a"
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	if cfg.EventEvery == 0 {
		cfg.EventEvery = time.Second
	}
	// Refused here, not at the first claim or subscription: a worker whose every claim fails would
	// run "ready" and never act on an intent, and a ticker of a negative period panics.
	switch {
	case cfg.LeaseTTL < lease.MinTTL || cfg.LeaseTTL > lease.MaxTTL:
		return nil, fmt.Errorf("cv: lease TTL %v is outside %v to %v", cfg.LeaseTTL, lease.MinTTL, lease.MaxTTL)
	case cfg.EventEvery < 0:
		return nil, fmt.Errorf("cv: negative EventEvery %v", cfg.EventEvery)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Events == nil {
		cfg.Events = func(string, string, string) {}
	}
	w, err := worker.New(worker.Options{Conn: cfg.Conn, Principal: cfg.Principal, WorkerID: cfg.WorkerID, Service: cfg.Service, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cmds, err := capabilities.NewCommands(cfg.Conn, cfg.Principal)
	if err != nil {
		return nil, err
	}
	c := &Worker{cfg: cfg, ns: "service/" + cfg.Service, w: w, cmds: cmds, active: map[string]*job{},
		tracker: internal.NewTracker(cfg.Conn, cfg.Capabilities, cfg.Logger)}
	changed, _ := c.tracker.Subscribe()
	c.ctrl, err = reconciler.New(w.Client(), c, reconciler.Options{Namespace: c.ns, KeyPrefix: "intents/", WatchID: internal.WatchID("intents", cfg.WorkerID),
		Triggers: []<-chan struct{}{changed}, ResyncEvery: 2 * time.Second, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	w.Add(c.tracker)
	w.Add(stopper{c})
	w.Add(c.ctrl)
	return c, nil
}

// Worker is the CV worker's runtime (health: Worker().HealthHandler()).
func (c *Worker) Worker() *worker.Worker { return c.w }

// Run runs the worker until ctx ends.
func (c *Worker) Run(ctx context.Context) error { return c.w.Run(ctx) }

// stopper ends the jobs on a graceful stop (after the controller has stopped reconciling): all at
// once, each with the time its own requests take (every one bounded by its client's request
// timeout). One deadline shared by them all would leave the last ones unsent on a slow media server:
// subscriptions nobody ends, leases a standby waits out.
type stopper struct{ c *Worker }

func (stopper) Start(context.Context) error { return nil }
func (s stopper) Stop() {
	s.c.mu.Lock()
	jobs := s.c.active
	s.c.active = map[string]*job{}
	s.c.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { s.c.end(context.Background(), j) })
	}
	wg.Wait()
	s.c.wg.Wait()
}

// endRetry is how long a job whose unsubscribe reached nobody waits before it is sent again.
const endRetry = time.Second

// end lets a job go: its detections stop, its subscription ends, its lease is released. None of it is
// abandoned when ctx ends (a stop that comes while an intent is let go): the job is no longer in
// c.active, so nothing else would finish it. Each request is bounded by its client's timeout instead.
func (c *Worker) end(ctx context.Context, j *job) {
	ctx = context.WithoutCancel(ctx)
	j.stop()
	if j.subscriptionID != "" {
		_ = c.cmds.Unsubscribe(ctx, j.subscriptionID)
	}
	c.w.DropLease(j.lease.Key())
	_ = j.lease.Release(ctx)
}

// Reconcile runs the model on the intent's variant while the intent is desired and this worker holds
// its lease.
func (c *Worker) Reconcile(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
	e, ok := c.ctrl.Cache().Get(req.Key)
	var in reconciler.MediaIntent
	var err error
	if ok {
		if in, err = reconciler.DecodeMediaIntent(e); err == nil {
			err = in.Validate()
		}
	}
	var params struct {
		ModelProfile string `json:"model_profile"`
	}
	_ = json.Unmarshal(in.Parameters[c.cfg.Service], &params) // absent or malformed: no model, nothing to run
	model := params.ModelProfile
	c.mu.Lock()
	j := c.active[req.Key]
	c.mu.Unlock()
	if j != nil && (!ok || err != nil || !in.Desired || model == "" || !j.lease.Held()) {
		j.stop()
		if j.subscriptionID != "" {
			uerr := c.cmds.Unsubscribe(context.WithoutCancel(ctx), j.subscriptionID)
			if uerr != nil && !errors.Is(uerr, capabilities.ErrSubscriptionNotFound) {
				// The unsubscribe reached nobody (a silent media server): back with the same session,
				// it would still have the subscription, and forgotten now it would stay there for
				// good. The job keeps it (and its lease, which says it is still ours) and ends it
				// again until the media server answers.
				// Warned of once per outage: it is sent again every endRetry while the media server
				// stays silent, and a warning each time would bury the log (and the narration).
				if !j.unanswered {
					j.unanswered = true
					c.cfg.Logger.Warn("unsubscribe", "intent", req.Key, "err", uerr)
					c.cfg.Events("cv unsubscribe unanswered", req.Key, j.subscriptionID)
				} else {
					c.cfg.Logger.Debug("unsubscribe", "intent", req.Key, "err", uerr)
				}
				j.model = "" // its detections are stopped: desired again, it is subscribed afresh
				return reconciler.Result{RequeueAfter: endRetry}, nil
			}
			if j.unanswered {
				j.unanswered = false
				c.cfg.Logger.Info("unsubscribe answered again", "intent", req.Key, "subscription", j.subscriptionID)
			}
			j.subscriptionID = ""
		}
		c.mu.Lock()
		delete(c.active, req.Key)
		c.mu.Unlock()
		c.end(ctx, j)
		c.cfg.Events("cv stopped", req.Key, "")
		j = nil
	}
	if !ok || err != nil || !in.Desired || model == "" {
		return reconciler.Result{}, nil
	}
	// The view and its staleness are read together: read apart, a confirmation landing in between
	// would pair the stale view (every source offline) with "not stale", and the running
	// subscription would be ended as gone.
	caps, stale := c.tracker.Snapshot()
	src, srcOK := caps.Source(in.SourceID)
	stream, _ := src.StreamByKind(in.MediaKind)
	if in.StreamID != "" { // the intent names its stream: that one, not the first of its kind
		stream, _ = src.Stream(in.StreamID)
	}
	v, vOK := variantFor(stream, in.VariantID)
	ready := srcOK && src.Online && vOK && v.State == capabilities.StateReady
	if j != nil {
		// What follows is the holder's to do: a media command stops waiting once the lease is lost.
		var cancel context.CancelFunc
		ctx, cancel = j.lease.Context(ctx)
		defer cancel()
	}
	if j != nil && j.subscriptionID != "" && stale {
		// The media server does not answer: what it has is unknown, not gone. Silent for a while and
		// back with the same session, it still has the subscription; forgotten now (an unsubscribe
		// that reaches nobody), it would be made a second time and the first left on the media
		// server for good. The job keeps it; the next snapshot decides.
		return reconciler.Result{}, nil
	}
	if j != nil && j.subscriptionID != "" && (!ready || j.sessionID != src.SessionID || j.model != model ||
		j.sourceID != in.SourceID || j.streamID != stream.StreamID || j.variantID != in.VariantID) {
		// The subscription is over (the variant is not READY: its publisher went away, and the media
		// server ended its subscriptions) or must change (a new session, another model, or the intent
		// now names another source, stream or variant).
		// Not given up when ctx ends (the lease's loss, a stop): the id is forgotten below, and an
		// unsubscribe not sent would leave the subscription to nobody.
		if err := c.cmds.Unsubscribe(context.WithoutCancel(ctx), j.subscriptionID); err == nil && j.unanswered {
			// Desired again while its unsubscribe went unanswered: the outage ends here.
			c.cfg.Logger.Info("unsubscribe answered again", "intent", req.Key, "subscription", j.subscriptionID)
		}
		j.unanswered = false // whatever comes of this one, the next subscription's outage is warned of
		j.stop()
		j.subscriptionID = ""
		c.cfg.Events("cv unsubscribed", req.Key, "")
	}
	if j != nil && j.subscriptionID != "" {
		return reconciler.Result{}, nil // running as wanted
	}
	if !ready {
		return reconciler.Result{}, nil // subscribe only to what exists; a capability change wakes us
	}
	if j == nil {
		l, err := lease.Claim(ctx, c.w.Client(), lease.Options{Namespace: c.ns, Key: "leases/" + strings.TrimPrefix(req.Key, "intents/"),
			Holder: c.cfg.WorkerID, TTL: c.cfg.LeaseTTL, Purpose: "cv " + req.Key, Logger: c.cfg.Logger})
		if errors.Is(err, lease.ErrHeld) {
			return reconciler.Result{RequeueAfter: c.cfg.LeaseTTL}, nil
		}
		if err != nil {
			return reconciler.Result{}, err
		}
		c.w.HoldLease(l.Key())
		j = &job{lease: l, stop: func() {}}
		c.mu.Lock()
		c.active[req.Key] = j
		c.mu.Unlock()
		go func() { // a lost lease is noticed at once: the next reconcile lets the job go
			<-l.Lost()
			c.ctrl.Enqueue(req.Key)
		}()
		var cancel context.CancelFunc
		ctx, cancel = l.Context(ctx)
		defer cancel()
	}
	if !j.lease.Held() {
		// Lost while a command was under way: a subscribe now would run the job beside the new
		// holder's. The loss re-enqueues the intent, which lets the job go.
		return reconciler.Result{}, nil
	}
	// Not abandoned when a stop or the lease's loss cancels ctx: the media server would still make the
	// subscription, and nobody would know to end it. The command's own timeout bounds the wait (one
	// answered later is ended then); a lease lost meanwhile re-enqueues the intent, whose next
	// reconcile ends the job.
	rep, err := c.cmds.SubscribeOrUndo(context.WithoutCancel(ctx), capabilities.SubscribeRequest{SessionID: src.SessionID, StreamID: stream.StreamID, VariantID: in.VariantID}, internal.UndoFailed(c.cfg.Logger))
	if errors.Is(err, capabilities.ErrVariantNotReady) || errors.Is(err, capabilities.ErrSourceUnavailable) {
		c.tracker.Refresh() // the snapshot said otherwise: it may be behind (an announcement lost)
	}
	if err != nil {
		c.mu.Lock()
		delete(c.active, req.Key)
		c.mu.Unlock()
		c.w.DropLease(j.lease.Key())
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = j.lease.Release(rctx)
		cancel()
		return reconciler.Result{RequeueAfter: time.Second}, nil
	}
	jctx, stop := context.WithCancel(context.Background())
	j.subscriptionID, j.sessionID, j.model, j.stop = rep.SubscriptionID, src.SessionID, model, stop
	j.sourceID, j.streamID, j.variantID = in.SourceID, stream.StreamID, in.VariantID
	c.cfg.Events("cv subscribed", req.Key, fmt.Sprintf("model %s on %s", model, rep.VariantID))
	c.wg.Add(1)
	go c.emit(jctx, j.lease, req.Key, in.SourceID, model)
	return reconciler.Result{}, nil
}

// variantFor is the variant an intent names, or, when it names none, the stream's own variant: the
// one a subscribe without variant_id gets (SPEC section 12).
func variantFor(st capabilities.Stream, variantID string) (capabilities.Variant, bool) {
	if variantID == "" {
		return st.Original()
	}
	return st.Variant(variantID)
}

// emit produces simulated detections while the job runs and its lease is held: a worker that lost
// the lease stops at once (the next reconcile unsubscribes and lets the lease go). Each detection
// checks Held first: a worker that wakes from a stall longer than its lease (SIGSTOP, a frozen VM)
// finds a tick waiting, and the renewal loop, woken at the same moment, may not have closed Lost
// yet; Held already reads false, on the monotonic clock that ran on through the stall.
func (c *Worker) emit(ctx context.Context, l *lease.Lease, key, source, model string) {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.EventEvery)
	defer t.Stop()
	labels := []string{"person", "car", "package"}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-l.Lost():
			c.cfg.Events("cv lease lost", key, "")
			return
		case now := <-t.C:
			if !l.Held() {
				c.cfg.Events("cv lease lost", key, "")
				return
			}
			d := Detection{SourceID: source, Model: model, Label: labels[n%len(labels)], Confidence: 0.5 + float64(n%5)/10, AtMs: now.UnixMilli()}
			if err := d.Validate(); err != nil {
				c.cfg.Logger.Warn("detection dropped", "err", err)
				continue
			}
			c.cfg.Logger.Info("detection", "source", d.SourceID, "model", d.Model, "label", d.Label, "confidence", d.Confidence)
			c.cfg.Events("detection", key, fmt.Sprintf("%s %.1f", d.Label, d.Confidence))
		}
	}
}
