// Package cv is the example computer-vision worker, shared by examples/cvworker and examples/demo. An
// intent in service/<service>/intents/ assigns a model profile (parameters.<service>.model_profile) to
// a stable source and variant; one worker claims the intent's lease, subscribes to the variant once it
// is READY, and emits validated (simulated) detection events to its log. Event truth belongs to an event
// catalog, not to state entries, so events are never written to the store. Health is reported
// separately, by the worker runtime.
//
// The intent's observed status (status/<the intent key without intents/>, guarded by the lease) names
// the holder and its subscription: the media server does not end a subscription whose subscriber died,
// so the status is what lets another worker (the standby that claims the lease next, or any worker that
// sees the intent withdrawn or deleted, a restarted one of the same id included) end the subscription a
// killed holder left, once its lease has expired, and say stopped in its place.
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
	"github.com/keeppeek/coordination/store/wire"
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
	// Metrics, when set, receive the figures of the worker's controller (reconciler.Options.Metrics).
	Metrics *reconciler.Metrics
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
	// settled holds, per unwanted intent (withdrawn, its model removed, invalid), where the store was
	// found to hold nothing a gone holder left for it.
	settled map[string]internal.Settled
	wg      sync.WaitGroup
}

type job struct {
	lease          *lease.Lease
	subscriptionID string // "" while the variant is not READY (its publisher went away, say)
	sessionID      string
	model          string
	// What the subscription is to, as the intent named it when it was made: an intent that now names
	// another source, stream or variant (an empty variant_id is the stream's own) ends it.
	sourceID, streamID, variantID string
	gotVariant                    string // the variant the media server gave the subscription
	// readySince is the variant's ReadySince when the subscription was made: another value now
	// means a takeover may have ended it unseen (capabilities.Variant.ReadySince).
	readySince uint64
	stop       context.CancelFunc
	// unanswered is set while the withdrawn intent's unsubscribe reaches nobody: the first such
	// unsubscribe is warned of (and told), the repeats, one a second for as long as the media server
	// is silent, are logged at Debug, and the answer that ends the outage is told at Info.
	unanswered bool
	// reported is what the last status written for the job said (statusSig), so that a look that
	// finds nothing changed writes nothing; "" when none was written (or the write failed).
	reported string
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
	c := &Worker{cfg: cfg, ns: "service/" + cfg.Service, w: w, cmds: cmds, active: map[string]*job{}, settled: map[string]internal.Settled{},
		tracker: internal.NewTracker(cfg.Conn, cfg.Capabilities, cfg.Logger)}
	changed, _ := c.tracker.Subscribe()
	c.ctrl, err = reconciler.New(w.Client(), c, reconciler.Options{Namespace: c.ns, KeyPrefix: "intents/", WatchID: internal.WatchID("intents", cfg.WorkerID),
		Triggers: []<-chan struct{}{changed}, ResyncEvery: 2 * time.Second, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	w.Add(c.tracker)
	w.Add(stopper{c})
	w.Add(c.ctrl)
	w.Go("sweep", c.sweep)
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
	for key, j := range jobs {
		wg.Go(func() { s.c.end(context.Background(), key, j, "worker stopping") })
	}
	wg.Wait()
	s.c.wg.Wait()
}

// endRetry is how long a job whose unsubscribe reached nobody waits before it is sent again.
const endRetry = time.Second

// end lets a job go: its detections stop, its subscription ends, its status says stopped, its lease
// is released. None of it is abandoned when ctx ends (a stop that comes while an intent is let go):
// the job is no longer in c.active, so nothing else would finish it. Each request is bounded by its
// client's timeout instead. An unsubscribe that reaches nobody (a silent media server) leaves the
// status naming the subscription: the next holder of the lease ends it.
func (c *Worker) end(ctx context.Context, key string, j *job, why string) {
	ctx = context.WithoutCancel(ctx)
	j.stop()
	ended := true
	if j.subscriptionID != "" {
		if err := c.cmds.Unsubscribe(ctx, j.subscriptionID); err != nil && !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
			c.cfg.Logger.Warn("unsubscribe; the status names the subscription for the next holder to end", "intent", key, "err", err)
			ended = false
		}
	}
	switch {
	case !j.lease.Held(): // the status is the lease holder's to write
	case ended:
		c.report(ctx, key, j, reconciler.ObservedStatus{State: reconciler.StateStopped, Message: why})
	default:
		// Not "active" under a worker that has gone: the subscription may still run, and the status
		// names it for the next holder (or a worker that sees the intent go) to end.
		c.report(ctx, key, j, reconciler.ObservedStatus{State: reconciler.StatePending, SubscriptionID: j.subscriptionID,
			VariantID: j.gotVariant, Message: why + ": the media server did not answer the unsubscribe of " + j.subscriptionID +
				", which may still run"})
	}
	c.w.DropLease(j.lease.Key())
	_ = j.lease.Release(ctx)
}

func leaseKey(intentKey string) string { return "leases/" + strings.TrimPrefix(intentKey, "intents/") }

// statusSig is what a status says, without when.
func statusSig(st reconciler.ObservedStatus) string {
	return strings.Join([]string{string(st.State), st.SubscriptionID, st.VariantID, st.Message}, "|")
}

// report writes the job's status (st completed with the intent, the time and this worker as holder),
// guarded by the job's lease, unless the last one written said the same. The write is not abandoned
// when ctx ends: the store would still commit it.
func (c *Worker) report(ctx context.Context, key string, j *job, st reconciler.ObservedStatus) {
	st.SubjectKey, st.ObservedAtMs, st.Holder = key, time.Now().UnixMilli(), c.cfg.WorkerID
	sig := statusSig(st)
	if j.reported == sig {
		return
	}
	j.reported = ""
	if _, err := j.lease.Put(context.WithoutCancel(ctx), wire.PutRequest{Key: internal.StatusKey(key), Schema: reconciler.ObservedStatusSchema,
		Document: st.Document()}); err != nil {
		c.cfg.Logger.Debug("status not written", "intent", key, "state", st.State, "err", err)
		return
	}
	j.reported = sig
}

// leftOver reports whether a status says a holder is at work on its intent (active, with the
// subscription it made, or pending): once that holder is gone, its subscription is left on the media
// server, and its words would stand for good.
func leftOver(st reconciler.ObservedStatus) bool {
	return st.Holder != "" && st.State != reconciler.StateStopped
}

// endLeftover ends what the status of an intent this worker holds no job for says a gone holder left
// (a holder killed, or stalled past its lease, before it saw the intent withdrawn or deleted): the
// subscription it names is ended and the status said stopped. It acts only as the holder of the
// intent's lease, claimed create-only, so that a holder still alive (which ends its own job) is left
// alone and at most one worker acts. done is true when nothing is left to do; otherwise the intent is
// looked at again after the returned wait (the lease's TTL while it is held).
func (c *Worker) endLeftover(ctx context.Context, key string) (done bool, again time.Duration, err error) {
	st, _, ok, err := internal.ReadStatus(ctx, c.w.Client(), c.ns, key)
	if err != nil {
		return false, 0, err
	}
	if !ok || !leftOver(st) {
		// Nothing reported. But while the lease is held, its holder may be subscribing (a slow media
		// server) and die before it reports: looked at again once the lease can have gone.
		_, err := c.w.Client().Get(ctx, c.ns, leaseKey(key))
		switch {
		case errors.Is(err, wire.ErrNotFound):
			return true, 0, nil
		case err != nil:
			return false, 0, err
		}
		return false, c.cfg.LeaseTTL, nil
	}
	l, err := lease.Claim(ctx, c.w.Client(), lease.Options{Namespace: c.ns, Key: leaseKey(key), Holder: c.cfg.WorkerID,
		TTL: c.cfg.LeaseTTL, Purpose: "cv end " + key, Logger: c.cfg.Logger})
	if errors.Is(err, lease.ErrHeld) {
		return false, c.cfg.LeaseTTL, nil // its holder ends its own job, or its lease expires first
	}
	if err != nil {
		return false, 0, err
	}
	ctx = context.WithoutCancel(ctx) // held now: what follows is finished, and the lease released
	defer func() { _ = l.Release(ctx) }()
	// Read again under the lease: no holder's write can land after the claim.
	st, rev, ok, err := internal.ReadStatus(ctx, c.w.Client(), c.ns, key)
	if err != nil {
		return false, 0, err
	}
	if !ok || !leftOver(st) {
		return true, 0, nil
	}
	if done, err := c.endSubscriptionOf(ctx, key, st); !done {
		return false, endRetry, err
	}
	msg := st.Holder + ", which is gone, had no subscription"
	if st.SubscriptionID != "" {
		msg = "subscription " + st.SubscriptionID + " of " + st.Holder + ", which is gone, ended"
	}
	expected := int64(rev)
	if _, err := l.Put(ctx, wire.PutRequest{Key: internal.StatusKey(key), Schema: reconciler.ObservedStatusSchema, ExpectedRevision: &expected,
		Document: reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StateStopped, ObservedAtMs: time.Now().UnixMilli(),
			Holder: c.cfg.WorkerID, VariantID: st.VariantID, Message: msg}.Document()}); err != nil {
		c.cfg.Logger.Debug("status not written", "intent", key, "err", err)
		return false, endRetry, nil
	}
	c.cfg.Events("cv stopped", key, msg)
	return true, 0, nil
}

// sweep enqueues, once at start, every intent whose status says a holder is at work on it: a holder
// killed before it saw its intent deleted left its subscription named by a status nobody would look
// at again (a worker restarted with the holder's id, say).
func (c *Worker) sweep(ctx context.Context) error {
	return internal.SweepStatuses(ctx, c.w.Client(), c.ns, leftOver, c.ctrl.Enqueue, endRetry, c.cfg.Logger)
}

// endSubscriptionOf ends the subscription a status names that no job of this worker holds: a gone
// holder's (or an earlier process of this worker id's). done is false when the media server did not
// answer: the subscription may still be there.
func (c *Worker) endSubscriptionOf(ctx context.Context, key string, st reconciler.ObservedStatus) (done bool, err error) {
	if st.SubscriptionID == "" || st.State == reconciler.StateStopped {
		return true, nil
	}
	if err := c.cmds.Unsubscribe(context.WithoutCancel(ctx), st.SubscriptionID); err != nil && !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
		c.cfg.Logger.Warn("the subscription a gone holder left: unsubscribe", "intent", key, "subscription", st.SubscriptionID, "holder", st.Holder, "err", err)
		return false, nil
	}
	c.cfg.Events("cv unsubscribed", key, "subscription "+st.SubscriptionID+" left by "+st.Holder)
	return true, nil
}

// Reconcile runs the model on the intent's variant while the intent is desired and this worker holds
// its lease.
func (c *Worker) Reconcile(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
	// The epoch first: a resync between the two reads pairs the new entry with the old epoch, which
	// only makes the look below happen again, never be skipped.
	epoch := c.ctrl.Cache().Epoch()
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
			if j.lease.Held() {
				// Its detections are stopped, and an unsubscribe a slow media server answers late
				// would leave "active" standing meanwhile: the status says it is being ended (and
				// still names it, for the next holder to end should this one die).
				c.report(ctx, req.Key, j, reconciler.ObservedStatus{State: reconciler.StatePending, SubscriptionID: j.subscriptionID,
					VariantID: j.gotVariant, Message: "intent no longer desired: ending subscription " + j.subscriptionID})
			}
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
		why := "intent no longer desired"
		if ok && err == nil && in.Desired && model != "" {
			why = "lease lost"
		}
		c.end(ctx, req.Key, j, why)
		c.cfg.Events("cv stopped", req.Key, "")
		j = nil
	}
	if !ok || err != nil || !in.Desired || model == "" {
		// Not this worker's job: but a holder that died before it saw the intent go left its
		// subscription on the media server, and nobody else would ever end it.
		c.mu.Lock()
		settled := ok && c.settled[req.Key] == internal.Settled{Epoch: epoch, Revision: e.Revision}
		c.mu.Unlock()
		if settled {
			return reconciler.Result{}, nil
		}
		done, again, err := c.endLeftover(ctx, req.Key)
		if err != nil || !done {
			return reconciler.Result{RequeueAfter: again}, err
		}
		c.mu.Lock()
		if ok { // looked at once per revision of the intent, not at every resync
			c.settled[req.Key] = internal.Settled{Epoch: epoch, Revision: e.Revision}
		} else {
			delete(c.settled, req.Key)
		}
		c.mu.Unlock()
		return reconciler.Result{}, nil
	}
	c.mu.Lock()
	delete(c.settled, req.Key)
	c.mu.Unlock()
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
	if j != nil && j.subscriptionID != "" && (!ready || j.sessionID != src.SessionID || j.readySince != v.ReadySince || j.model != model ||
		j.sourceID != in.SourceID || j.streamID != stream.StreamID || j.variantID != in.VariantID) {
		// The subscription is over (the variant is not READY: its publisher went away, and the media
		// server ended its subscriptions; or READY again after a takeover, seen or not) or must
		// change (a new session, another model, or the intent now names another source, stream or
		// variant).
		// Not given up when ctx ends (the lease's loss, a stop): an unsubscribe not sent would leave
		// the subscription to nobody.
		j.stop()
		// The status says so first: the subscription may be gone already (a restarted media server,
		// a source reconnected), and an unsubscribe (or the subscribe after it) that a slow media
		// server takes its time over would leave "active" standing for it meanwhile. It still names
		// the subscription, for the next holder to end should this one die before it is ended.
		c.report(ctx, req.Key, j, reconciler.ObservedStatus{State: reconciler.StatePending, SubscriptionID: j.subscriptionID,
			VariantID: j.gotVariant, Message: "ending subscription " + j.subscriptionID})
		uerr := c.cmds.Unsubscribe(context.WithoutCancel(ctx), j.subscriptionID)
		if uerr != nil && !errors.Is(uerr, capabilities.ErrSubscriptionNotFound) {
			// Unanswered (a slow media server): it may still be there, and forgotten now it would be
			// left for good beside the next one. Kept (its detections stopped), ended again later.
			c.cfg.Logger.Warn("unsubscribe", "intent", req.Key, "subscription", j.subscriptionID, "err", uerr)
			j.model = ""
			return reconciler.Result{RequeueAfter: endRetry}, nil
		}
		if j.unanswered {
			// Desired again while its unsubscribe went unanswered: the outage ends here.
			c.cfg.Logger.Info("unsubscribe answered again", "intent", req.Key, "subscription", j.subscriptionID)
		}
		j.unanswered = false // the next subscription's outage is warned of
		j.subscriptionID = ""
		c.cfg.Events("cv unsubscribed", req.Key, "")
	}
	if j != nil && j.subscriptionID != "" {
		// Running as wanted; said again in case the write after the subscribe did not get through.
		c.report(ctx, req.Key, j, reconciler.ObservedStatus{State: reconciler.StateActive, SubscriptionID: j.subscriptionID,
			VariantID: j.gotVariant, Message: "model " + j.model})
		return reconciler.Result{}, nil
	}
	if !ready {
		if j != nil && !stale {
			c.report(ctx, req.Key, j, reconciler.ObservedStatus{State: reconciler.StatePending, VariantID: in.VariantID,
				Message: "waiting for the variant to be READY"})
		}
		return reconciler.Result{}, nil // subscribe only to what exists; a capability change wakes us
	}
	claimedOver := false // the status found at the claim says someone (a gone holder) is at work
	if j == nil {
		l, err := lease.Claim(ctx, c.w.Client(), lease.Options{Namespace: c.ns, Key: leaseKey(req.Key),
			Holder: c.cfg.WorkerID, TTL: c.cfg.LeaseTTL, Purpose: "cv " + req.Key, Logger: c.cfg.Logger})
		if errors.Is(err, lease.ErrHeld) {
			return reconciler.Result{RequeueAfter: c.cfg.LeaseTTL}, nil
		}
		if err != nil {
			return reconciler.Result{}, err
		}
		// Read under the lease (no former holder's write can land after the claim): a holder that died
		// with a subscription, or an earlier process of this worker id, left it on the media server.
		// Ended first, or the job would run beside it for good.
		st, _, found, rerr := internal.ReadStatus(ctx, c.w.Client(), c.ns, req.Key)
		if rerr == nil && found {
			claimedOver = st.State != reconciler.StateStopped
			var done bool
			done, rerr = c.endSubscriptionOf(ctx, req.Key, st)
			if rerr == nil && !done {
				rerr = errors.New("cv: the media server did not answer the unsubscribe of a gone holder's subscription")
			}
		}
		if rerr != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = l.Release(rctx)
			cancel()
			c.cfg.Logger.Debug("lease let go", "intent", req.Key, "err", rerr)
			return reconciler.Result{RequeueAfter: endRetry}, nil
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
	if j.lease.Held() && (j.reported != "" || claimedOver) {
		// The status names what is gone (a subscription ended above, a gone holder's ended at the
		// claim): until the subscribe is answered, which a slow media server takes its time over (or
		// never, in time), it would go on saying so.
		c.report(ctx, req.Key, j, reconciler.ObservedStatus{State: reconciler.StatePending, VariantID: in.VariantID,
			Message: "subscribing on session " + src.SessionID})
	}
	if !j.lease.Held() {
		// Lost while a command was under way, or while the report above hung (a state server that
		// does not answer): a subscribe now would run the job beside the new holder's. Looked at
		// right before the subscribe. The loss re-enqueues the intent, which lets the job go.
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
	j.sourceID, j.streamID, j.variantID, j.gotVariant, j.readySince = in.SourceID, stream.StreamID, in.VariantID, rep.VariantID, v.ReadySince
	// Recorded before anything else: a holder killed from here on leaves the subscription named, for
	// the next holder (or a worker that sees the intent go) to end.
	c.report(ctx, req.Key, j, reconciler.ObservedStatus{State: reconciler.StateActive, SubscriptionID: rep.SubscriptionID,
		VariantID: rep.VariantID, Message: "model " + model})
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
// yet; Held already reads false, on the lease's clock, which ran on through the stall.
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
