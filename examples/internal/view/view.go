// Package view is the example viewer, shared by examples/viewer and examples/demo: a user principal
// stores a subscription intent in its own namespace (user/<id>) naming the variant it wants, then
// subscribes only once the media server says that variant is READY. The intent never grants media
// access by itself: the subscribe command does, against capabilities that exist.
//
// Its status names it (holder, its worker id) and its subscription. The media server does not end a
// subscription whose subscriber died: a viewer restarted with the same worker id ends what the status
// says its earlier process left (a subscription, a "pending"), for intents still wanted, withdrawn or
// deleted, before it subscribes again.
package view

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
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// Config configures a Viewer.
type Config struct {
	Conn      *nats.Conn
	Principal string // the user; its namespace is user/<Principal>
	WorkerID  string
	Logger    *slog.Logger
	// Capabilities configures the worker's capabilities tracker (how often it fetches unasked, when a
	// silent media server's snapshot goes stale); zero fields take the tracker's defaults, and its
	// Logger defaults to Logger.
	Capabilities capabilities.TrackerOptions
	// Metrics, when set, receive the figures of the viewer's controller (reconciler.Options.Metrics).
	Metrics *reconciler.Metrics
	// Events, when set, is called for each step worth narrating, from one goroutine at a time.
	Events func(kind, intent, detail string)
}

// Viewer subscribes to what its subscription intents ask for, once it exists.
type Viewer struct {
	cfg     Config
	ns      string
	w       *worker.Worker
	tracker *capabilities.Tracker
	cmds    *capabilities.Commands
	ctrl    *reconciler.Controller

	mu         sync.Mutex
	subs       map[string]subscription // intent key -> current subscription
	lastStatus map[string]statusMemo   // intent key -> the last status written
	// looked holds the intents whose status in the store this process has read once: what an earlier
	// process of this worker id left is ended at the first look only.
	looked map[string]bool
}

// statusMemo is what the viewer remembers of the last status it wrote for an intent: what it said
// (sig, to skip a rewrite that would say the same) and the variant it named (a stop reports a
// pending intent stopped with it).
type statusMemo struct{ sig, variantID string }

// subscription is a subscription the viewer holds for an intent: its id, the session it was made
// on, the variant the media server gave, and what the intent named when it was made (source, stream
// and variant_id, empty for the stream's own): an intent that now names another is another
// subscription.
type subscription struct {
	id, sessionID, variantID        string
	sourceID, streamID, wantVariant string
	// readySince is the variant's ReadySince when the subscription was made: another value now
	// means a takeover may have ended it unseen (capabilities.Variant.ReadySince).
	readySince uint64
	// unanswered is set while the withdrawn intent's unsubscribe reaches nobody: the first such
	// unsubscribe is warned of, the repeats (one every endRetry for as long as the media server is
	// silent) are logged at Debug, and the answer that ends the outage is told at Info.
	unanswered bool
}

// New builds a viewer.
func New(cfg Config) (*Viewer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Events == nil {
		cfg.Events = func(string, string, string) {}
	}
	// The ender ends subscriptions concurrently: their events still reach Events one at a time.
	events, eventsMu := cfg.Events, new(sync.Mutex)
	cfg.Events = func(kind, intent, detail string) {
		eventsMu.Lock()
		defer eventsMu.Unlock()
		events(kind, intent, detail)
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = "viewer"
	}
	w, err := worker.New(worker.Options{Conn: cfg.Conn, Principal: cfg.Principal, WorkerID: cfg.WorkerID, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cmds, err := capabilities.NewCommands(cfg.Conn, cfg.Principal)
	if err != nil {
		return nil, err
	}
	v := &Viewer{cfg: cfg, ns: "user/" + cfg.Principal, w: w, cmds: cmds, subs: map[string]subscription{}, lastStatus: map[string]statusMemo{},
		looked: map[string]bool{}, tracker: internal.NewTracker(cfg.Conn, cfg.Capabilities, cfg.Logger)}
	changed, _ := v.tracker.Subscribe()
	v.ctrl, err = reconciler.New(w.Client(), v, reconciler.Options{Namespace: v.ns, KeyPrefix: "intents/", WatchID: internal.WatchID("intents", cfg.WorkerID),
		Triggers: []<-chan struct{}{changed}, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	w.Add(v.tracker)
	w.Add(ender{v})
	w.Add(v.ctrl)
	w.Go("sweep", v.sweep)
	return v, nil
}

// sweep enqueues, once at start, every intent whose status says an earlier process of this worker
// id was at work on it: one deleted while that process was dead left its subscription (and its
// words) for nobody to end.
func (v *Viewer) sweep(ctx context.Context) error {
	return internal.SweepStatuses(ctx, v.w.Client(), v.ns, v.leftOver, v.ctrl.Enqueue, endRetry, v.cfg.Logger)
}

// leftOver reports whether a status found in the store, before this process wrote any for its
// intent, is an earlier process's of this worker id that does not say stopped.
func (v *Viewer) leftOver(st reconciler.ObservedStatus) bool {
	return st.Holder == v.cfg.WorkerID && st.State != reconciler.StateStopped
}

// endLeftover, at the first look at an intent for which this process holds nothing, ends the
// subscription its status says an earlier process of this worker id made (killed, it could not), and
// takes that status as the last one written, so that a withdrawn intent is reported stopped and a
// wanted one reported afresh. again is positive while the media server does not answer the
// unsubscribe: the subscription may still be there, and a new one beside it would double it.
func (v *Viewer) endLeftover(ctx context.Context, key string) (again time.Duration, err error) {
	v.mu.Lock()
	_, written := v.lastStatus[key]
	done := written || v.looked[key]
	v.mu.Unlock()
	if done {
		return 0, nil
	}
	e, err := v.w.Client().Get(ctx, v.ns, internal.StatusKey(key))
	var st reconciler.ObservedStatus
	switch {
	case errors.Is(err, wire.ErrNotFound):
	case err != nil:
		return 0, err
	case e.Schema == reconciler.ObservedStatusSchema && json.Unmarshal(e.Document, &st) == nil && v.leftOver(st):
		if st.SubscriptionID != "" {
			if err := v.cmds.Unsubscribe(ctx, st.SubscriptionID); err != nil && !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
				v.cfg.Logger.Warn("the subscription an earlier process left: unsubscribe", "intent", key, "subscription", st.SubscriptionID, "err", err)
				return endRetry, nil
			}
			v.cfg.Events("unsubscribed", key, st.SubscriptionID+", left by an earlier process")
		}
		v.mu.Lock()
		if _, ok := v.lastStatus[key]; !ok {
			v.lastStatus[key] = statusMemo{sig: sigOf(st), variantID: st.VariantID}
		}
		v.mu.Unlock()
	}
	v.mu.Lock()
	v.looked[key] = true
	v.mu.Unlock()
	return 0, nil
}

// ender ends the viewer's subscriptions on a graceful stop (after the controller has stopped
// reconciling): left behind, each restart of a viewer would add subscriptions on the media server.
// They end all at once, each with the time its own requests take (every one bounded by its client's
// request timeout): one deadline shared by them all would leave the last ones unsent on a slow media
// server, and their statuses active. An intent still waiting for its variant is reported stopped
// too: its "pending" would say that a viewer gone for good still waits.
type ender struct{ v *Viewer }

func (ender) Start(context.Context) error { return nil }
func (e ender) Stop() {
	e.v.mu.Lock()
	subs := e.v.subs
	e.v.subs = map[string]subscription{}
	waiting := map[string]string{} // intent key -> variant, of the statuses not stopped and of no subscription
	for key, m := range e.v.lastStatus {
		if _, ok := subs[key]; !ok && !m.stopped() {
			waiting[key] = m.variantID
		}
	}
	e.v.mu.Unlock()
	var wg sync.WaitGroup
	for key, s := range subs {
		wg.Go(func() { e.v.end(context.Background(), key, s, "viewer stopping") })
	}
	for key, variantID := range waiting {
		wg.Go(func() {
			st := reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StateStopped, ObservedAtMs: time.Now().UnixMilli(),
				Message: "viewer stopping", VariantID: variantID}
			if err := e.v.status(context.Background(), key, st); err != nil {
				e.v.cfg.Logger.Warn("status not written", "intent", key, "err", err)
			}
		})
	}
	wg.Wait()
}

// endRetry is how long a withdrawn intent whose unsubscribe reached nobody waits before it is sent
// again.
const endRetry = time.Second

// end unsubscribes and reports the intent's subscription stopped. An unsubscribe that reaches no
// media server (a silent one, which back with the same session still has the subscription) is not
// reported stopped: the status goes on naming the subscription, which this viewer, restarted with
// the same worker id, ends. One that a media server took and did not answer in time (a slow one) is
// carried out late: it is reported stopped.
func (v *Viewer) end(ctx context.Context, key string, s subscription, why string) {
	err := v.cmds.Unsubscribe(ctx, s.id)
	switch {
	case err == nil || errors.Is(err, capabilities.ErrSubscriptionNotFound):
	case errors.Is(err, context.DeadlineExceeded):
		v.cfg.Logger.Warn("unsubscribe", "intent", key, "err", err)
	default:
		v.cfg.Logger.Warn("unsubscribe", "intent", key, "err", err)
		st := reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StatePending, ObservedAtMs: time.Now().UnixMilli(),
			SubscriptionID: s.id, VariantID: s.variantID,
			Message: why + ": the media server does not answer; subscription " + s.id + " is ended when this viewer is back"}
		if err := v.status(ctx, key, st); err != nil {
			v.cfg.Logger.Warn("status not written", "intent", key, "err", err)
		}
		return
	}
	v.ended(ctx, key, s, why)
}

// ended reports the intent's subscription stopped, once it is unsubscribed.
func (v *Viewer) ended(ctx context.Context, key string, s subscription, why string) {
	v.cfg.Events("unsubscribed", key, s.id)
	st := reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StateStopped, ObservedAtMs: time.Now().UnixMilli(),
		Message: why, VariantID: s.variantID}
	if err := v.status(ctx, key, st); err != nil {
		v.cfg.Logger.Warn("status not written", "intent", key, "err", err)
	}
}

// Worker is the viewer's worker runtime.
func (v *Viewer) Worker() *worker.Worker { return v.w }

// Run runs the viewer until ctx ends.
func (v *Viewer) Run(ctx context.Context) error { return v.w.Run(ctx) }

// Want writes (or replaces) the subscription intent for a variant of a source: the viewer's choice.
func (v *Viewer) Want(ctx context.Context, sourceID, mediaKind, variantID string) (string, error) {
	key := "intents/" + sourceID + "-" + mediaKind + "-" + variantID
	doc, _ := json.Marshal(wire.MediaIntent{Role: wire.RoleSubscribe, Desired: true, SourceID: sourceID, MediaKind: mediaKind, VariantID: variantID})
	_, err := v.w.Client().Put(ctx, wire.PutRequest{Namespace: v.ns, Key: key, Schema: wire.SchemaMediaIntent, Document: doc})
	return key, err
}

// Subscription returns the subscription id held for an intent.
func (v *Viewer) Subscription(intentKey string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.subs[intentKey]
	return s.id, ok
}

// Reconcile subscribes to the intent's variant once it is READY on the source's current session.
//
// Its commands and status writes are not abandoned when a stop cancels ctx: the media server or the
// store carries out a request whose answer the viewer stopped waiting for, and the viewer would not
// know of it: a subscription the ender cannot end, left on the media server; an "active" status
// committed after the ender's "stopped". Each waits for its answer instead, bounded by its client's
// request timeout, and the stop waits for this Reconcile.
func (v *Viewer) Reconcile(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
	ctx = context.WithoutCancel(ctx)
	e, ok := v.ctrl.Cache().Get(req.Key)
	var in reconciler.MediaIntent
	var err error
	if ok {
		if in, err = reconciler.DecodeMediaIntent(e); err == nil {
			err = in.Validate()
		}
	}
	v.mu.Lock()
	cur, subscribed := v.subs[req.Key]
	v.mu.Unlock()
	if !subscribed {
		if again, err := v.endLeftover(ctx, req.Key); err != nil || again > 0 {
			return reconciler.Result{RequeueAfter: again}, err
		}
	}
	if !ok || err != nil || !in.Desired || in.Role != reconciler.RoleSubscribe {
		if subscribed {
			// Said first: an unsubscribe that a slow media server answers late (or a restarted one
			// never) would leave "active" standing meanwhile. It still names the subscription, which
			// this viewer, restarted with the same worker id, ends.
			ending := reconciler.ObservedStatus{SubjectKey: req.Key, State: reconciler.StatePending, ObservedAtMs: time.Now().UnixMilli(),
				SubscriptionID: cur.id, VariantID: cur.variantID, Message: "intent no longer desired: ending subscription " + cur.id}
			if !v.lastSaysEnding(req.Key, cur.id) {
				if err := v.status(ctx, req.Key, ending); err != nil {
					v.cfg.Logger.Warn("status not written", "intent", req.Key, "err", err)
				}
			}
			if err := v.cmds.Unsubscribe(ctx, cur.id); err != nil && !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
				// The unsubscribe reached nobody (a silent media server): back with the same session,
				// it would still have the subscription, and forgotten now it would stay there for
				// good. Keep it, say so, and end it again until the media server answers.
				if !cur.unanswered {
					v.cfg.Logger.Warn("unsubscribe", "intent", req.Key, "err", err)
					cur.unanswered = true
					v.mu.Lock()
					if _, ok := v.subs[req.Key]; ok { // not taken by a stop meanwhile
						v.subs[req.Key] = cur
					}
					v.mu.Unlock()
				} else {
					v.cfg.Logger.Debug("unsubscribe", "intent", req.Key, "err", err)
				}
				status := reconciler.ObservedStatus{SubjectKey: req.Key, State: reconciler.StatePending, ObservedAtMs: time.Now().UnixMilli(),
					SubscriptionID: cur.id, VariantID: cur.variantID,
					Message: "the media server does not answer; ending subscription " + cur.id + " once it does"}
				if err := v.status(ctx, req.Key, status); err != nil {
					v.cfg.Logger.Warn("status not written", "intent", req.Key, "err", err)
				}
				return reconciler.Result{RequeueAfter: endRetry}, nil
			}
			if cur.unanswered {
				v.cfg.Logger.Info("unsubscribe answered again", "intent", req.Key, "subscription", cur.id)
			}
			v.mu.Lock()
			delete(v.subs, req.Key)
			v.mu.Unlock()
			v.ended(ctx, req.Key, cur, "intent no longer desired")
		} else if last, found := v.reportedMemo(req.Key); found { // a pending status would say the viewer still waits
			variantID := in.VariantID
			if variantID == "" {
				variantID = last.variantID // deleted: the one the status named
			}
			if err := v.status(ctx, req.Key, reconciler.ObservedStatus{SubjectKey: req.Key, State: reconciler.StateStopped,
				ObservedAtMs: time.Now().UnixMilli(), Message: "intent no longer desired", VariantID: variantID}); err != nil {
				return reconciler.Result{}, err
			}
		}
		if !ok {
			// Deleted, and its status says so: nothing more is written for it. What this process
			// remembers of it goes with it, or a viewer that runs for months would hold every intent
			// ever seen. Should the key come back, its status is read afresh (endLeftover).
			v.forget(req.Key)
		}
		return reconciler.Result{}, nil
	}
	if subscribed && cur.unanswered {
		// Desired again before its unsubscribe was answered: a later withdrawal is another outage,
		// warned of again.
		cur.unanswered = false
		v.mu.Lock()
		if _, ok := v.subs[req.Key]; ok {
			v.subs[req.Key] = cur
		}
		v.mu.Unlock()
	}
	// The view and its staleness are read together: read apart, a confirmation landing in between
	// would pair the stale view (every source offline) with "not stale", and the live subscription
	// would be ended as gone.
	caps, stale := v.tracker.Snapshot()
	src, srcOK := caps.Source(in.SourceID)
	status := reconciler.ObservedStatus{SubjectKey: req.Key, ObservedAtMs: time.Now().UnixMilli(), VariantID: in.VariantID}
	stream, ok := src.StreamByKind(in.MediaKind)
	if in.StreamID != "" {
		stream, ok = src.Stream(in.StreamID)
	}
	var variant capabilities.Variant
	var vok bool
	if in.VariantID == "" { // the stream's own variant, which a subscribe without variant_id gets
		variant, vok = stream.Original()
	} else {
		variant, vok = stream.Variant(in.VariantID)
	}
	online := srcOK && src.Online
	live := online && ok && vok && variant.State == capabilities.StateReady
	if subscribed && stale {
		// The media server does not answer: what it has is unknown, not gone. Silent for a while and
		// back with the same session, it still has the subscription; forgotten now (an unsubscribe
		// that reaches nobody), it would be made a second time and the first left on the media server
		// for good. Keep it, and say that it is unconfirmed; the next snapshot decides.
		status.State, status.SubscriptionID, status.VariantID = reconciler.StatePending, cur.id, cur.variantID
		status.Message = "the media server does not answer; keeping subscription " + cur.id
		return reconciler.Result{}, v.status(ctx, req.Key, status)
	}
	same := subscribed && cur.sourceID == in.SourceID && cur.streamID == stream.StreamID && cur.wantVariant == in.VariantID
	if same && cur.sessionID == src.SessionID && live && cur.readySince == variant.ReadySince {
		// Said again in case a stale snapshot made the status pending meanwhile (a rewrite that says
		// the same is skipped).
		status.State, status.SubscriptionID, status.VariantID = reconciler.StateActive, cur.id, cur.variantID
		return reconciler.Result{}, v.status(ctx, req.Key, status)
	}
	if subscribed {
		// The source went offline or has a new session, or the variant went away or back to PENDING
		// (a new publisher took it over), or is READY again after a takeover that the snapshots read
		// here skipped (its ReadySince moved on): the media server has ended this subscription. Or
		// the intent now names another source, stream or variant: this one is not wanted any more.
		// End it, and subscribe (again) when the variant wanted is READY.
		// The status says so first: the subscription may be gone already (a restarted media server,
		// a source reconnected), and an unsubscribe (or the subscribe after it) that a slow media
		// server takes its time over would leave "active" standing for it meanwhile. It still names
		// the subscription, which this viewer, restarted with the same worker id, ends.
		ending := status
		ending.State, ending.SubscriptionID, ending.VariantID = reconciler.StatePending, cur.id, cur.variantID
		ending.Message = "ending subscription " + cur.id
		if !v.lastSaysEnding(req.Key, cur.id) { // a retry: the status says so already
			if err := v.status(ctx, req.Key, ending); err != nil {
				v.cfg.Logger.Warn("status not written", "intent", req.Key, "err", err)
			}
		}
		err := v.cmds.Unsubscribe(ctx, cur.id)
		switch {
		case err == nil || errors.Is(err, capabilities.ErrSubscriptionNotFound):
		case errors.Is(err, context.DeadlineExceeded):
			// Taken by a slow media server, which carries it out late (as end does).
			v.cfg.Logger.Warn("unsubscribe", "intent", req.Key, "err", err)
		default:
			// The unsubscribe reached nobody (a media server gone silent before the snapshot reads
			// as stale): back with the same session, it still has the subscription, and forgotten
			// now it would stay there for good beside the next one, named by no status. Kept, and
			// ended again until the media server answers (NOT_FOUND once it ended it itself).
			status.State, status.SubscriptionID, status.VariantID = reconciler.StatePending, cur.id, cur.variantID
			status.Message = "the media server does not answer; ending subscription " + cur.id + " once it does"
			if v.lastSig(req.Key) != sigOf(status) { // warned of once per outage, not at every retry
				v.cfg.Logger.Warn("unsubscribe", "intent", req.Key, "err", err)
			} else {
				v.cfg.Logger.Debug("unsubscribe", "intent", req.Key, "err", err)
			}
			if err := v.status(ctx, req.Key, status); err != nil {
				v.cfg.Logger.Warn("status not written", "intent", req.Key, "err", err)
			}
			return reconciler.Result{RequeueAfter: endRetry}, nil
		}
		v.mu.Lock()
		delete(v.subs, req.Key)
		v.mu.Unlock()
		v.cfg.Events("subscription ended", req.Key, cur.id)
	}
	if !online {
		status.State, status.Message = reconciler.StatePending, "waiting for source "+in.SourceID
		return reconciler.Result{}, v.status(ctx, req.Key, status)
	}
	if !live {
		// The intent is only a wish: nothing is sent until the capability says the variant exists.
		wanted := in.VariantID
		if wanted == "" {
			wanted = "the " + in.MediaKind + " stream's own variant"
		}
		status.State, status.Message = reconciler.StatePending, "waiting for "+wanted+" to be READY"
		return reconciler.Result{}, v.status(ctx, req.Key, status)
	}
	if v.lastNamesSubscription(req.Key) {
		// The status names a subscription that is gone (ended above, or an earlier process's): until
		// the subscribe is answered, which a slow media server takes its time over (or never, in
		// time), it would go on saying so.
		subscribing := status
		subscribing.State, subscribing.Message = reconciler.StatePending, "subscribing on session "+src.SessionID
		if err := v.status(ctx, req.Key, subscribing); err != nil {
			v.cfg.Logger.Warn("status not written", "intent", req.Key, "err", err)
		}
	}
	rep, err := v.cmds.SubscribeOrUndo(ctx, capabilities.SubscribeRequest{SessionID: src.SessionID, StreamID: stream.StreamID, VariantID: in.VariantID}, internal.UndoFailed(v.cfg.Logger))
	if errors.Is(err, capabilities.ErrVariantNotReady) || errors.Is(err, capabilities.ErrSourceUnavailable) {
		v.tracker.Refresh() // the snapshot said otherwise: it may be behind (an announcement lost)
		return reconciler.Result{RequeueAfter: time.Second}, nil
	}
	if err != nil {
		return reconciler.Result{}, err
	}
	v.mu.Lock()
	v.subs[req.Key] = subscription{id: rep.SubscriptionID, sessionID: src.SessionID, variantID: rep.VariantID,
		sourceID: in.SourceID, streamID: stream.StreamID, wantVariant: in.VariantID, readySince: variant.ReadySince}
	v.mu.Unlock()
	v.cfg.Events("viewer subscribed", req.Key, fmt.Sprintf("%s as %s", rep.VariantID, rep.SubscriptionID))
	status.State, status.SubscriptionID, status.VariantID = reconciler.StateActive, rep.SubscriptionID, rep.VariantID
	return reconciler.Result{}, v.status(ctx, req.Key, status)
}

// forget drops what the viewer remembers of the intent key, once it is deleted and ended.
func (v *Viewer) forget(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.lastStatus, key)
	delete(v.looked, key)
}

// reportedMemo returns the last status written of the intent, if there is one and it does not say
// stopped.
func (v *Viewer) reportedMemo(intentKey string) (statusMemo, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	last, ok := v.lastStatus[intentKey]
	return last, ok && !last.stopped()
}

// lastSig returns what the last status written of the intent said ("" for none).
func (v *Viewer) lastSig(intentKey string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastStatus[intentKey].sig
}

// lastNamesSubscription reports whether the last status written of the intent (or an earlier
// process's, taken as it) names a subscription.
func (v *Viewer) lastNamesSubscription(intentKey string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	parts := strings.SplitN(v.lastStatus[intentKey].sig, "|", 3)
	return len(parts) > 1 && parts[1] != ""
}

// lastSaysEnding reports whether the last status written of the intent says pending while it names
// subscription id: that it is being ended (a retry of an unanswered unsubscribe says so already).
func (v *Viewer) lastSaysEnding(intentKey, id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.HasPrefix(v.lastStatus[intentKey].sig, string(reconciler.StatePending)+"|"+id+"|")
}

func (m statusMemo) stopped() bool {
	return strings.HasPrefix(m.sig, string(reconciler.StateStopped)+"|")
}

// sigOf is what a status says, without when: a rewrite that says the same is skipped. Its second
// field is the subscription id (lastNamesSubscription reads it).
func sigOf(st reconciler.ObservedStatus) string {
	return string(st.State) + "|" + st.SubscriptionID + "|" + st.Message
}

// status writes the intent's status, naming this viewer (its worker id) as the holder, unless the
// last one written said the same.
func (v *Viewer) status(ctx context.Context, intentKey string, st reconciler.ObservedStatus) error {
	st.Holder = v.cfg.WorkerID
	sig := sigOf(st)
	v.mu.Lock()
	same := v.lastStatus[intentKey].sig == sig
	v.mu.Unlock()
	if same {
		return nil
	}
	_, err := v.w.Client().Put(ctx, wire.PutRequest{Namespace: v.ns, Key: internal.StatusKey(intentKey),
		Schema: reconciler.ObservedStatusSchema, Document: st.Document()})
	if err == nil {
		v.mu.Lock()
		v.lastStatus[intentKey] = statusMemo{sig: sig, variantID: st.VariantID}
		v.mu.Unlock()
	}
	return err
}
