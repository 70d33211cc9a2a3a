// Package transcode is the example transcoder worker of the seed's two-stage flow, shared by
// examples/transcoder (one process) and examples/demo (several in one process). It watches publish
// intents under intents/ of its service namespace, claims leases/<source>-<kind>-<variant> create-only
// with a TTL, resolves the intent's stable source_id to the media server's current session, starts the
// publication with the intent's recording_mode, waits for the actual variant to be READY, and writes
// observed status under status/ guarded by its lease. A standby stays idle until the lease goes. A
// publication whose holder died before it saw its intent withdrawn or changed is stopped, once that
// holder's lease has expired, by a worker that saw the change (see examples/transcoder/README.md),
// or that started after it and finds the old output in the store (its lease, or the intent's
// status); a pending or failed status such a holder left, having published nothing, is said stopped
// the same way. A lease is acted on only while the intent it was claimed for is the store's, and an
// output is claimed only while the store holds no other output's lease for the intent.
//
// A holder that loses its lease (cut off from the state server by a parted NATS route, say, while it
// still reaches the media server) sends no start: it stops its own publication by its id, once (or
// again until the media server answers), and writes no status, which is the new holder's to write;
// the new holder's start of the same variant takes it over (same principal) should that stop not have
// reached the media server. It claims nothing until the state server answers again.
package transcode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/examples/internal"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// Config configures a Transcoder.
type Config struct {
	// Conn is connected as Principal (an admin principal: service namespaces are admin-written).
	Conn      *nats.Conn
	Principal string
	// WorkerID names this process; Service names the service namespace service/<Service>.
	WorkerID string
	Service  string
	// LeaseTTL is the TTL of the per-output leases, 1 s to 24 h (New refuses others). Default 5 s.
	LeaseTTL time.Duration
	// HeartbeatInterval of the worker. Default 1 s.
	HeartbeatInterval time.Duration
	Logger            *slog.Logger
	// Capabilities configures the worker's capabilities tracker (how often it fetches unasked, when a
	// silent media server's snapshot goes stale); zero fields take the tracker's defaults, and its
	// Logger defaults to Logger.
	Capabilities capabilities.TrackerOptions
	// Metrics, when set, receive the figures of the worker's controller (reconciler.Options.Metrics).
	Metrics *reconciler.Metrics
	// Events, when set, is called for each step worth narrating (the demo prints them), from one
	// goroutine at a time.
	Events func(Event)
}

// Event is a step of the flow. "standby" (the intent's lease is another worker's) and "invalid" (the
// intent cannot be served) are states an intent is found in again at every reconcile (every
// capability change, every resync): each is told when the intent enters it, and again only after
// another step of the intent, or with another detail. "status" is told for each status written; its
// detail is the state, then the message if there is one.
type Event struct {
	WorkerID string
	Kind     string // "lease claimed", "standby", "publication started", "publication stopped", "publication gone", "capability ready", "status", "stopped", "invalid"
	Intent   string
	Detail   string
}

// Transcoder is one transcoder worker.
type Transcoder struct {
	cfg     Config
	ns      string
	w       *worker.Worker
	tracker *capabilities.Tracker
	cmds    *capabilities.Commands
	ctrl    *reconciler.Controller

	leaseFired chan struct{}
	mu         sync.Mutex
	held       map[string]*binding         // by intent key
	lastStatus map[string]statusMemo       // intent key -> the last status this worker wrote
	outputs    map[string]output           // intent key -> the output this worker last saw it want published
	settled    map[string]internal.Settled // intent key -> where the unwanted intent had nothing left to stop
	told       map[string]string           // intent key -> kind and detail of its last event told, but "status" and "capability ready"
}

// output is an actual output an intent asked for: its lease and its variant.
type output struct{ leaseKey, variantID string }

// statusMemo is what a worker remembers of the last status it wrote for an intent: what it said (sig,
// to skip a rewrite that would say the same; "" once the binding that wrote it is gone) and the
// entry's revision (so that "stopped" is written only over that status, never over a newer one).
type statusMemo struct {
	sig string
	rev uint64
}

// binding is what this worker holds for one intent.
type binding struct {
	lease         *lease.Lease
	leaseKey      string
	sessionID     string
	publicationID string
	variantID     string
	startedGen    uint64    // capabilities generation when the publication was started
	seenGen       uint64    // generation of a snapshot that showed the publication's variant as ours; 0: none yet
	retryAt       time.Time // after a FAILED publication: no new start before then
	// What the publication was started with: a change in the intent restarts it.
	streamID, outputProfile, recordingMode string
	// stopUnanswered is set while the publication's stop_publication reaches nobody: the first such
	// stop is warned of, the repeats (one every stopRetry for as long as the media server is silent)
	// are logged at Debug, and the answer that ends the outage is told at Info.
	stopUnanswered bool
}

// New builds a transcoder; Run runs it.
func New(cfg Config) (*Transcoder, error) {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 5 * time.Second
	}
	// Refused here, not at the first claim: a worker whose every claim fails would run "ready" and
	// never act on an intent.
	if cfg.LeaseTTL < lease.MinTTL || cfg.LeaseTTL > lease.MaxTTL {
		return nil, fmt.Errorf("transcode: lease TTL %v is outside %v to %v", cfg.LeaseTTL, lease.MinTTL, lease.MaxTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Events == nil {
		cfg.Events = func(Event) {}
	}
	// The releaser lets bindings go concurrently: their events still reach Events one at a time.
	events, eventsMu := cfg.Events, new(sync.Mutex)
	cfg.Events = func(e Event) {
		eventsMu.Lock()
		defer eventsMu.Unlock()
		events(e)
	}
	w, err := worker.New(worker.Options{Conn: cfg.Conn, Principal: cfg.Principal, WorkerID: cfg.WorkerID, Service: cfg.Service,
		HeartbeatInterval: cfg.HeartbeatInterval, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cmds, err := capabilities.NewCommands(cfg.Conn, cfg.Principal)
	if err != nil {
		return nil, err
	}
	t := &Transcoder{cfg: cfg, ns: "service/" + cfg.Service, w: w, cmds: cmds,
		tracker:    internal.NewTracker(cfg.Conn, cfg.Capabilities, cfg.Logger),
		leaseFired: make(chan struct{}, 1), held: map[string]*binding{}, lastStatus: map[string]statusMemo{},
		outputs: map[string]output{}, settled: map[string]internal.Settled{}, told: map[string]string{}}
	capsChanged, _ := t.tracker.Subscribe()
	t.ctrl, err = reconciler.New(w.Client(), t, reconciler.Options{Namespace: t.ns, KeyPrefix: "intents/", WatchID: internal.WatchID("intents", cfg.WorkerID),
		Triggers: []<-chan struct{}{capsChanged, t.leaseFired}, ResyncEvery: 10 * time.Second, Logger: cfg.Logger, Metrics: cfg.Metrics})
	if err != nil {
		return nil, err
	}
	w.Add(t.tracker)
	w.Add(&leaseWatch{t: t})
	w.Add(releaser{t})
	w.Add(t.ctrl)
	return t, nil
}

// Worker is the transcoder's worker runtime.
func (t *Transcoder) Worker() *worker.Worker { return t.w }

// Run runs the transcoder until ctx ends, then stops gracefully (releasing its leases).
func (t *Transcoder) Run(ctx context.Context) error { return t.w.Run(ctx) }

// Holds reports the intents this worker holds the lease of.
func (t *Transcoder) Holds() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k, b := range t.held {
		if b.lease.Held() {
			out = append(out, k)
		}
	}
	return out
}

// event tells a step of the flow, unless it is a state the intent was last told in (see Event).
func (t *Transcoder) event(kind, intent, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	if kind != "status" && kind != "capability ready" { // reports of a write: each says something new
		t.mu.Lock()
		again := t.told[intent] == kind+"|"+detail
		t.told[intent] = kind + "|" + detail
		t.mu.Unlock()
		if again && (kind == "standby" || kind == "invalid") {
			return
		}
	}
	t.cfg.Events(Event{WorkerID: t.cfg.WorkerID, Kind: kind, Intent: intent, Detail: detail})
}

// leaseWatch re-enqueues every intent when a lease of the service is deleted or expires, so a standby
// tries its create-only claim at once (and looks again for a publication a dead holder left); and
// when its cache resyncs (a sequence gap, a reconnect, a stated restart), since a lease that went in
// the gap reaches it as a snapshot without the key, not as a delete or an expire.
type leaseWatch struct {
	t     *Transcoder
	cache *client.Cache
}

func (lw *leaseWatch) Start(ctx context.Context) error {
	fire := func() {
		// A lease gone may be a holder that died before it stopped what an unwanted intent had it
		// publish: the intents settled before are looked at again.
		lw.t.mu.Lock()
		clear(lw.t.settled)
		lw.t.mu.Unlock()
		select {
		case lw.t.leaseFired <- struct{}{}:
		default:
		}
	}
	c, err := lw.t.w.Client().NewCache(ctx, client.CacheOptions{Namespace: lw.t.ns, KeyPrefix: "leases/", WatchID: internal.WatchID("leases", lw.t.cfg.WorkerID), Handlers: client.Handlers{
		OnDelete: func(string, uint64) { fire() },
		OnExpire: func(string, uint64) { fire() },
		OnResync: func([]wire.Entry, uint64) { fire() },
	}})
	lw.cache = c
	return err
}

func (lw *leaseWatch) Stop() {
	if lw.cache != nil {
		lw.cache.Close()
	}
}

// releaser stops the publications and releases the leases on a graceful stop (after the controller
// has stopped reconciling). The bindings are let go all at once, each with the time its own requests
// take (every one bounded by its client's request timeout): one deadline shared by them all would
// leave the last ones unsent on a slow media server, their publications holding their variants for
// good.
type releaser struct{ t *Transcoder }

func (releaser) Start(context.Context) error { return nil }
func (r releaser) Stop() {
	r.t.mu.Lock()
	held := r.t.held
	r.t.held = map[string]*binding{}
	r.t.mu.Unlock()
	var wg sync.WaitGroup
	for key, b := range held {
		wg.Go(func() {
			// The worker is going: a publication the media server does not hear the stop of is let go
			// all the same (stopPublication logged it), its lease released, but its status names it
			// (letGoUnstopped): it may still run, and whoever looks at the intent next ends it.
			if err := r.t.stopPublication(context.Background(), key, b); err != nil {
				r.t.letGoUnstopped(context.Background(), key, b, err)
				return
			}
			r.t.letGo(context.Background(), key, b, "worker stopping")
		})
	}
	wg.Wait()
}

// stopRetry is how long a withdrawn intent whose stop_publication reached nobody waits before the
// stop is sent again.
const stopRetry = time.Second

// failedPause is how long a publication the media server reported FAILED waits before it is started again.
const failedPause = 2 * time.Second

// LeaseKey is the lease of an intent's actual output: leases/<source>-<kind>-<variant>. Source and
// variant ids may each be 128 bytes (SPEC section 13), which can make that longer than a key may be
// (256 bytes): such a key is shortened, its end replaced by a hash of the whole, so that every
// output still has a lease of its own that the store accepts.
func LeaseKey(in reconciler.MediaIntent) string {
	k := "leases/" + in.SourceID + "-" + in.MediaKind + "-" + in.VariantID
	if len(k) <= wire.MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return k[:wire.MaxKeyLen-17] + "-" + hex.EncodeToString(sum[:8])
}

// Reconcile brings one intent's actual state towards its desired state.
func (t *Transcoder) Reconcile(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
	// The epoch first: a resync between the two reads pairs the new entry with the old epoch, which
	// only makes the look below happen again, never be skipped.
	epoch := t.ctrl.Cache().Epoch()
	e, ok := t.ctrl.Cache().Get(req.Key)
	var in reconciler.MediaIntent
	var err error
	if ok {
		in, err = reconciler.DecodeMediaIntent(e)
		if err == nil {
			err = in.Validate()
		}
	}
	// A subscribe intent is for viewers: one that was a publish intent lets its publication go.
	publish := ok && err == nil && in.Role == reconciler.RolePublish
	if publish && in.VariantID == "" {
		err = &reconciler.ValidationError{Field: "variant_id", Message: "a transcoder publish intent names the output variant"}
	}
	if !ok || err != nil || !publish || !in.Desired {
		t.mu.Lock()
		b := t.held[req.Key]
		delete(t.held, req.Key)
		t.mu.Unlock()
		var requeue time.Duration
		t.mu.Lock()
		settled := ok && t.settled[req.Key] == internal.Settled{Epoch: epoch, Revision: e.Revision}
		t.mu.Unlock()
		if b == nil && !settled {
			// Not ours: but a holder that died (or stalled past its lease) before it saw the intent go
			// left its publication running, and nobody else would ever stop it.
			if out, known := t.lastOutput(req.Key, in, ok && err == nil && in.Role == reconciler.RolePublish); known && !t.stopOrphan(ctx, req.Key, out) {
				requeue = t.cfg.LeaseTTL
			}
		}
		if requeue == 0 {
			t.mu.Lock()
			delete(t.outputs, req.Key)
			if ok { // looked at once per revision of the intent, not at every resync
				t.settled[req.Key] = internal.Settled{Epoch: epoch, Revision: e.Revision}
			} else {
				delete(t.settled, req.Key)
			}
			t.mu.Unlock()
		}
		if b != nil {
			if err := t.stopBinding(ctx, req.Key, b, "intent no longer desired"); err != nil {
				// The stop_publication reached nobody (a silent media server): the publication still
				// holds the variant, on a session that may come back. Forgotten now, it would stay
				// there for good: keep the binding (its lease held) and say so, and stop it again
				// until the media server answers.
				t.mu.Lock()
				t.held[req.Key] = b
				t.mu.Unlock()
				t.writeStatus(ctx, b, req.Key, reconciler.ObservedStatus{SubjectKey: req.Key, State: reconciler.StatePending,
					ObservedAtMs: time.Now().UnixMilli(), Holder: t.cfg.WorkerID, VariantID: b.variantID, PublicationID: b.publicationID,
					Message: "stopping: the media server does not answer; publication " + b.publicationID + " kept until it does"})
				return reconciler.Result{RequeueAfter: stopRetry}, nil
			}
		}
		if !ok { // deleted: nothing more will be written for it
			t.mu.Lock()
			delete(t.lastStatus, req.Key)
			delete(t.told, req.Key)
			t.mu.Unlock()
		}
		if err != nil {
			var ve *reconciler.ValidationError
			if errors.As(err, &ve) {
				t.event("invalid", req.Key, "%v", err)
				t.writeStatus(ctx, nil, req.Key, reconciler.InvalidStatus(req.Key, err, time.Now()))
				// Never retried for itself (a coordinator must fix the intent); only an orphan not
				// yet stopped brings it back.
				return reconciler.Result{RequeueAfter: requeue}, nil
			}
		}
		return reconciler.Result{RequeueAfter: requeue}, nil
	}
	cur := output{leaseKey: LeaseKey(in), variantID: in.VariantID}
	t.mu.Lock()
	old, known := t.outputs[req.Key]
	b := t.held[req.Key]
	t.mu.Unlock()
	if !known && b == nil {
		// This worker has not seen the intent name any output before (it started after the change,
		// say): the store tells whether another output is still held or published for it.
		if old, known, err = t.formerOutput(ctx, req.Key, in, cur); err != nil {
			return reconciler.Result{}, err
		}
	}
	if known && old.leaseKey != cur.leaseKey && (b == nil || b.leaseKey != old.leaseKey) {
		// The intent names another output now, and this worker did not hold the old one (its holder,
		// which did, stops it itself, in claim). The new output is claimed here only once the old
		// one's lease is no longer held for the intent: its holder may still be starting (and then
		// report) the old publication, over the new holder's status; or it died before it saw the
		// change, and its publication is stopped once its lease expires. A status about the new
		// output would no longer name it.
		if !t.stopOrphan(ctx, req.Key, old) {
			return reconciler.Result{RequeueAfter: t.cfg.LeaseTTL}, nil
		}
	}
	t.mu.Lock()
	t.outputs[req.Key] = cur
	delete(t.settled, req.Key)
	t.mu.Unlock()
	b, err = t.claim(ctx, req.Key, in, e.Revision)
	var restored *lease.RestoreWaitError
	if errors.As(err, &restored) {
		return reconciler.Result{RequeueAfter: restored.RetryAfter}, nil
	}
	if errors.Is(err, errStaleIntent) {
		// The cache's update enqueues the key again; this requeue is only a backstop.
		return reconciler.Result{RequeueAfter: t.cfg.LeaseTTL}, nil
	}
	if err != nil || b == nil {
		return reconciler.Result{}, err // standby (b nil) waits for the lease to go
	}
	b.stopUnanswered = false // desired again: the silence a later stop meets is warned of afresh
	return t.publish(ctx, req.Key, in, b)
}

// formerOutput is, for a worker that has not seen the intent key name an output before, the output
// other than cur that the store says is still the intent's: one whose lease is held for the intent
// (its holder, alive or not, may still be starting its publication, or be about to stop it), else
// one of another variant whose publication the intent's status names and does not report stopped
// (its holder died before it saw the intent change, and the new holder's first status would erase
// that record). Without it, a worker started after the change would claim and publish cur at once,
// next to the old publication, and nobody would ever stop that one. found is false when there is
// none; an error says the store could not be read.
func (t *Transcoder) formerOutput(ctx context.Context, key string, in reconciler.MediaIntent, cur output) (out output, found bool, err error) {
	var st reconciler.ObservedStatus
	e, err := t.w.Client().Get(ctx, t.ns, internal.StatusKey(key))
	switch {
	case errors.Is(err, wire.ErrNotFound):
	case err != nil:
		return output{}, false, err
	case e.Schema == reconciler.ObservedStatusSchema:
		_ = json.Unmarshal(e.Document, &st)
	}
	// The output the status names, as a lease key of the intent's source and kind.
	named := in
	named.VariantID = st.VariantID
	if other, err := t.otherLease(ctx, cur.leaseKey, purposePublish+key); err != nil {
		return output{}, false, err
	} else if other != "" {
		out = output{leaseKey: other}
		if st.VariantID != "" && LeaseKey(named) == other {
			out.variantID = st.VariantID // so that its publication is stopped if its holder is gone
		}
		return out, true, nil
	}
	if st.PublicationID != "" && st.State != reconciler.StateStopped && st.VariantID != "" && st.VariantID != cur.variantID {
		return output{leaseKey: LeaseKey(named), variantID: st.VariantID}, true, nil
	}
	return output{}, false, nil
}

// lastOutput is the output the intent was last seen to want published by this worker, else the one
// its document still names (fromDoc: a valid publish intent that is only no longer desired, say: a
// worker started after its holder died has seen no other).
func (t *Transcoder) lastOutput(key string, in reconciler.MediaIntent, fromDoc bool) (output, bool) {
	t.mu.Lock()
	out, known := t.outputs[key]
	t.mu.Unlock()
	if known {
		return out, true
	}
	if fromDoc && in.SourceID != "" && in.MediaKind != "" && in.VariantID != "" {
		return output{leaseKey: LeaseKey(in), variantID: in.VariantID}, true
	}
	return output{}, false
}

// Lease purposes: a holder's, and a worker's that stops what a gone holder left.
const (
	purposePublish = "publish "
	purposeStop    = "stop "
)

// stopOrphan stops the publication that a gone holder of out left for the intent key: a holder
// killed (or stalled past its lease) before it saw the intent withdrawn, deleted or pointed at
// another output; a pending or failed status it left with nothing published is said stopped. It reports whether nothing is left to do: there was no such publication (and
// out's lease is not held for the intent: its holder may yet report one), or it is stopped, or out's
// lease serves another intent. false means out's lease is still held for this intent (by a live
// holder, which stops its publication itself, or a dead one whose lease has not expired yet), or the
// store or the media server did not answer: try again later.
//
// It acts only as the holder of out's lease, claimed create-only, so that at most one worker does,
// and only on what the intent's status names: a publication of out's variant, not stopped (reported
// by another worker, or by an earlier process of this worker's id), while no worker holds another
// output's lease for the intent (whose status it would be). The "stopped" it writes is guarded by
// the lease and compare-and-set on the status read.
func (t *Transcoder) stopOrphan(ctx context.Context, key string, out output) bool {
	c := t.w.Client()
	stKey := internal.StatusKey(key)
	// read returns the intent's status; ok false when there is none (or none of a worker's); err
	// when the store could not be read, which says nothing.
	read := func(ctx context.Context) (st reconciler.ObservedStatus, rev uint64, ok bool, err error) {
		return internal.ReadStatus(ctx, c, t.ns, key)
	}
	// A status of this worker's id is no exception: this worker holds no binding of out (its
	// callers see to that), so the publication is of an earlier process of the same id, restarted.
	orphan := func(st reconciler.ObservedStatus) bool {
		return st.PublicationID != "" && st.State != reconciler.StateStopped && st.VariantID == out.variantID
	}
	// Nor is a report of out's variant by a holder that published nothing (pending on its source,
	// failed on the media server's refusal): what it says is over once the holder is gone, and the
	// intent's status would say it for good.
	leftOver := func(st reconciler.ObservedStatus) bool {
		return orphan(st) || st.Holder != "" && st.VariantID == out.variantID &&
			(st.State == reconciler.StatePending || st.State == reconciler.StateFailed)
	}
	// The lease first, then the status: a holder reports what it published before its lease can
	// go, so a status read once the lease is gone names whatever it left.
	held, err := t.leaseHeldFor(ctx, out.leaseKey, key)
	if err != nil {
		return false
	}
	if st, _, ok, err := read(ctx); err != nil {
		return false
	} else if !ok || !leftOver(st) {
		// The usual case: the holder let go and reported it, or nothing was published. But while
		// out's lease is still held for the intent, its holder may be starting the publication (a
		// slow media server) and die before it reports it: the status says nothing yet, and an
		// intent forgotten now (deleted, or claimed for another output) would never be looked at
		// again. Looked at again once the lease is gone (its delete or expiry re-enqueues the
		// intent; a deleted one comes back after LeaseTTL).
		return !held
	}
	l, err := lease.Claim(ctx, c, lease.Options{Namespace: t.ns, Key: out.leaseKey, Holder: t.cfg.WorkerID,
		TTL: t.cfg.LeaseTTL, Purpose: purposeStop + key, Logger: t.cfg.Logger})
	if errors.Is(err, lease.ErrHeld) {
		p, ok, perr := t.leasePurpose(ctx, out.leaseKey)
		// Another intent's output now: not this intent's to stop.
		return perr == nil && ok && p != purposePublish+key && p != purposeStop+key
	}
	if err != nil {
		t.cfg.Logger.Warn("orphaned publication: claim", "intent", key, "lease", out.leaseKey, "err", err)
		return false
	}
	ctx = context.WithoutCancel(ctx) // held now: what follows is finished, and the lease released
	defer func() { _ = l.Release(ctx) }()
	st, rev, ok, err := read(ctx)
	if err != nil {
		return false
	}
	if !ok || !leftOver(st) {
		return true
	}
	if other, err := t.otherLease(ctx, out.leaseKey, purposePublish+key); err != nil || other != "" {
		return err == nil // the status may be the other output's holder's; an unread lease list says nothing
	}
	msg := st.Holder + ", which is gone, had published nothing"
	if orphan(st) {
		if err := t.cmds.StopPublication(ctx, st.PublicationID); err != nil && !errors.Is(err, capabilities.ErrPublicationNotFound) {
			t.cfg.Logger.Warn("orphaned publication: stop", "intent", key, "publication", st.PublicationID, "err", err)
			return false
		}
		t.event("publication stopped", key, "%s, left by %s", st.PublicationID, st.Holder)
		msg = "publication " + st.PublicationID + " of " + st.Holder + ", which is gone, stopped"
	}
	expected := int64(rev)
	if _, err := l.Put(ctx, wire.PutRequest{Key: stKey, Schema: reconciler.ObservedStatusSchema, ExpectedRevision: &expected,
		Document: reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StateStopped, ObservedAtMs: time.Now().UnixMilli(),
			Holder: t.cfg.WorkerID, VariantID: out.variantID, Message: msg}.Document()}); err != nil {
		t.cfg.Logger.Debug("orphaned publication: status not written", "intent", key, "err", err)
	} else {
		t.event("status", key, "%s (%s)", reconciler.StateStopped, msg)
	}
	t.mu.Lock()
	delete(t.lastStatus, key) // written by this worker outside any binding: the next one writes afresh
	t.mu.Unlock()
	return true
}

// leaseHeldFor reports whether the lease leaseKey is held for the intent key: by a holder that
// publishes the intent's output, or by a worker that stops what such a holder left. A lease that is
// missing is not held (nil error); one that cannot be read is an error, which says nothing.
func (t *Transcoder) leaseHeldFor(ctx context.Context, leaseKey, key string) (bool, error) {
	p, ok, err := t.leasePurpose(ctx, leaseKey)
	return ok && (p == purposePublish+key || p == purposeStop+key), err
}

// leasePurpose reads the purpose of the lease leaseKey; ok is false when there is no such entry or it
// is not JSON; an error says it could not be read.
func (t *Transcoder) leasePurpose(ctx context.Context, leaseKey string) (purpose string, ok bool, err error) {
	e, err := t.w.Client().Get(ctx, t.ns, leaseKey)
	if errors.Is(err, wire.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	var d wire.LeaseDocument
	if json.Unmarshal(e.Document, &d) != nil {
		return "", false, nil
	}
	return d.Purpose, true, nil
}

// otherLease returns the key of a lease other than leaseKey held with one of purposes ("" if none),
// read from the store (not the lease cache, which may lag behind a status just read).
func (t *Transcoder) otherLease(ctx context.Context, leaseKey string, purposes ...string) (string, error) {
	after := ""
	for {
		page, err := t.w.Client().List(ctx, wire.ListRequest{Namespace: t.ns, KeyPrefix: "leases/", AfterKey: after, Limit: 256})
		if err != nil {
			return "", err
		}
		for _, e := range page.Entries {
			var d wire.LeaseDocument
			if e.Key != leaseKey && json.Unmarshal(e.Document, &d) == nil && slices.Contains(purposes, d.Purpose) {
				return e.Key, nil
			}
		}
		if page.NextAfterKey == "" {
			return "", nil
		}
		after = page.NextAfterKey
	}
}

// errStaleIntent is claim's error when the intent in the store is not the one the claim was made
// for (rev): this worker's cache is behind.
var errStaleIntent = errors.New("transcode: the cached intent is behind the store")

// claim returns the binding this worker holds for the intent, claiming its lease if it is free; nil
// (and no error) when another worker holds it. rev is the revision of the intent as cached, which in
// is: a lease claimed while the store holds another revision is released at once (errStaleIntent).
func (t *Transcoder) claim(ctx context.Context, key string, in reconciler.MediaIntent, rev uint64) (*binding, error) {
	leaseKey := LeaseKey(in)
	t.mu.Lock()
	b := t.held[key]
	t.mu.Unlock()
	if b != nil && b.lease.Held() && b.leaseKey == leaseKey {
		return b, nil
	}
	if b != nil { // lost, or the intent now names another output
		t.mu.Lock()
		delete(t.held, key)
		t.mu.Unlock()
		if err := t.stopBinding(ctx, key, b, "lease lost or output changed"); err != nil {
			// Not forgotten while the media server is silent: retried (with backoff) until it answers.
			t.mu.Lock()
			t.held[key] = b
			t.mu.Unlock()
			return nil, err
		}
	}
	// Nor is this output claimed while a lease of another output is held for the intent, read from
	// the store: its holder may not have seen the intent change yet (its cache behind: a watch that
	// died with a killed stated is noticed at the next liveness check) and publishes that output on
	// until it does, or a worker is stopping what a gone holder of it left. What this worker last saw
	// the intent name says nothing about that: the intent may have named the other output meanwhile,
	// unseen here, and this one again since. Read before the claim, not after it: a claim let go
	// again would wake every worker's lease watch, this one's too, and so claim again, and again. A
	// holder that claims the other output after this read made its claim after the change this
	// worker saw, so its own check of the intent below lets it go unused. The other lease's release
	// or expiry brings the intent back (leaseWatch).
	if other, err := t.otherLease(ctx, leaseKey, purposePublish+key, purposeStop+key); err != nil {
		return nil, fmt.Errorf("transcode: read the leases before claiming %s: %w", leaseKey, err)
	} else if other != "" {
		t.event("standby", key, "%s waits until %s, held for the intent by another worker, is let go", leaseKey, other)
		return nil, nil
	}
	l, err := lease.Claim(ctx, t.w.Client(), lease.Options{Namespace: t.ns, Key: leaseKey, Holder: t.cfg.WorkerID,
		TTL: t.cfg.LeaseTTL, Purpose: purposePublish + key, Logger: t.cfg.Logger})
	var restored *lease.RestoreWaitError
	if errors.As(err, &restored) {
		// A holder from before a restore may still publish this output: Reconcile looks again.
		t.event("standby", key, "%s may be held by a worker from before the restore", leaseKey)
		return nil, err
	}
	if errors.Is(err, lease.ErrHeld) {
		t.event("standby", key, "%s is held by another worker", leaseKey)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The lease is free because its holder let it go or died; what it let go for may be a change of
	// the intent that this worker's cache has not applied yet (its updates come on another watch than
	// the lease's, and a process that was stalled has a backlog of both). Claimed for the intent as
	// it was, the old output would be published next to the new one. The claim committed after
	// whatever freed the lease, so the intent read now is at least as new as that change.
	if e, err := t.w.Client().Get(ctx, t.ns, key); err != nil || e.Revision != rev {
		_ = l.Release(context.WithoutCancel(ctx))
		if err != nil && !errors.Is(err, wire.ErrNotFound) {
			return nil, fmt.Errorf("transcode: read intent %s after claiming %s: %w", key, leaseKey, err)
		}
		t.cfg.Logger.Debug("lease let go: the cached intent is behind the store", "intent", key, "lease", leaseKey, "cached_revision", rev)
		return nil, errStaleIntent
	}
	b = &binding{lease: l, leaseKey: leaseKey}
	t.mu.Lock()
	t.held[key] = b
	t.mu.Unlock()
	t.w.HoldLease(leaseKey)
	t.event("lease claimed", key, "%s at revision %d", leaseKey, l.Revision())
	go func() { // a lost lease is noticed at once
		<-l.Lost()
		t.ctrl.Enqueue(key)
	}()
	return b, nil
}

// stopRunning stops the publication b runs, if any, saying why.
func (t *Transcoder) stopRunning(ctx context.Context, key string, b *binding, why string) error {
	if b.publicationID == "" {
		return nil
	}
	if err := t.cmds.StopPublication(ctx, b.publicationID); err != nil && !errors.Is(err, capabilities.ErrPublicationNotFound) {
		return err
	}
	t.event("publication stopped", key, "%s", why)
	b.publicationID = ""
	return nil
}

// publish resolves the source, starts the publication when needed and reports what exists.
func (t *Transcoder) publish(ctx context.Context, key string, in reconciler.MediaIntent, b *binding) (reconciler.Result, error) {
	// What follows is the holder's to do: it stops waiting once the lease is lost (a media command on a
	// slow server can outlive it), and a start is sent only while the lease is held.
	ctx, cancel := b.lease.Context(ctx)
	defer cancel()
	st := reconciler.ObservedStatus{SubjectKey: key, ObservedAtMs: time.Now().UnixMilli(), Holder: t.cfg.WorkerID, VariantID: in.VariantID}
	caps := t.tracker.Current()
	src, ok := caps.Source(in.SourceID)
	if !ok || !src.Online {
		st.State, st.Message = reconciler.StatePending, "waiting for source "+in.SourceID
		t.writeStatus(ctx, b, key, st)
		return reconciler.Result{}, nil // a capability change re-enqueues
	}
	stream, ok := streamFor(src, in)
	if !ok {
		// The intent now names a stream the source lacks: what runs is not what it asks for, and the
		// failed status names no publication, so nobody would stop it later.
		if err := t.stopRunning(ctx, key, b, "the intent names a stream the source lacks"); err != nil {
			return reconciler.Result{}, err
		}
		st.State, st.Message = reconciler.StateFailed, "the source has no "+in.MediaKind+" stream"
		t.writeStatus(ctx, b, key, st)
		return reconciler.Result{}, nil
	}
	if b.streamID != stream.StreamID || b.outputProfile != in.OutputProfile || b.recordingMode != in.RecordingMode {
		// The intent changed what is published: stop the running publication, start the new one.
		why := fmt.Sprintf("the intent changed (recording %s, profile %s)", in.RecordingMode, in.OutputProfile)
		if err := t.stopRunning(ctx, key, b, why); err != nil {
			return reconciler.Result{}, err
		}
	}
	if b.publicationID != "" && b.seenGen > 0 && caps.Generation > b.seenGen && b.sessionID == src.SessionID {
		// A snapshot newer than one that showed our variant no longer does (or names another
		// publisher): the publication is gone on the same session (stopped by its id by another
		// process of the principal, an old lease holder say). Waiting for it to be READY would wait
		// for ever: start it again.
		if v, ok := stream.Variant(b.variantID); !ok || v.Publisher != t.cfg.Principal {
			t.event("publication gone", key, "%s is no longer published on session %s", b.variantID, b.sessionID)
			b.publicationID, b.seenGen = "", 0
		}
	}
	if b.publicationID == "" || b.sessionID != src.SessionID {
		if !slices.Contains(src.Publication.RecordingModes, in.RecordingMode) {
			// SPEC section 12: the media server says what it can do; a command it rules out is not
			// sent. Only a start is ruled out: a publication running when the source stopped offering
			// the mode is still reported, and stopped, as what the media server shows of it.
			st.State, st.ErrorCode = reconciler.StateFailed, string(capabilities.CodeRecordingModeInvalid)
			st.Message = fmt.Sprintf("source %s offers recording modes %v, not %q", in.SourceID, src.Publication.RecordingModes, in.RecordingMode)
			t.writeStatus(ctx, b, key, st)
			return reconciler.Result{}, nil // a capability change or an intent change re-enqueues
		}
		if wait := time.Until(b.retryAt); wait > 0 {
			// A capability change (the failed publication's own stop, say) does not cut the pause short.
			return reconciler.Result{RequeueAfter: wait}, nil
		}
		if b.lease.Held() && t.lastNamesPublication(key) {
			// The status reports a publication that is gone (the media server restarted, the source
			// reconnected, the variant went) or being replaced: until the start below is answered,
			// which a slow media server takes its time over, it would go on saying so.
			pst := st
			pst.State, pst.Message = reconciler.StatePending, "starting the publication on session "+src.SessionID
			t.writeStatus(ctx, b, key, pst)
		}
		if !b.lease.Held() {
			// Lost while stopping, say, or while the write above hung (a state server that does not
			// answer): a start now would take the variant over from the new holder (same principal).
			// Looked at right before the start. The loss re-enqueues the intent; claim then stops
			// what is ours.
			return reconciler.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		gen := caps.Generation
		// Not abandoned when a stop cancels ctx: the media server would still make the publication,
		// and nobody would know to stop it. The command's own timeout bounds the wait (one answered
		// later is stopped then).
		rep, err := t.cmds.StartPublicationOrUndo(context.WithoutCancel(ctx), capabilities.StartPublicationRequest{SessionID: src.SessionID, StreamID: stream.StreamID,
			VariantID: in.VariantID, OutputProfile: in.OutputProfile, RecordingMode: in.RecordingMode}, internal.UndoFailed(t.cfg.Logger))
		switch {
		case errors.Is(err, capabilities.ErrSourceUnavailable):
			st.State, st.Message, st.ErrorCode = reconciler.StatePending, "source session changed; re-resolving", string(capabilities.CodeOf(err))
			t.writeStatus(ctx, b, key, st)
			// The snapshot said the session was online: it is behind (an announcement lost). The
			// fetch's new generation re-enqueues the intent.
			t.tracker.Refresh()
			return reconciler.Result{}, nil
		case errors.Is(err, capabilities.ErrPublicationConflict), errors.Is(err, capabilities.ErrRecordingModeInvalid):
			st.State, st.Message, st.ErrorCode = reconciler.StateFailed, err.Error(), string(capabilities.CodeOf(err))
			t.writeStatus(ctx, b, key, st)
			return reconciler.Result{RequeueAfter: 5 * time.Second}, nil
		case err != nil:
			return reconciler.Result{}, err
		}
		b.publicationID, b.sessionID, b.variantID, b.startedGen, b.seenGen = rep.PublicationID, src.SessionID, rep.VariantID, gen, 0
		b.streamID, b.outputProfile, b.recordingMode = stream.StreamID, in.OutputProfile, in.RecordingMode
		t.event("publication started", key, "%s on session %s, recording %s", rep.VariantID, src.SessionID, in.RecordingMode)
	}
	st.PublicationID = b.publicationID
	v, ok := stream.Variant(b.variantID)
	fresh := caps.Generation > b.startedGen // a snapshot taken before our start says nothing about it
	if fresh && ok && v.Publisher == t.cfg.Principal && b.seenGen == 0 {
		b.seenGen = caps.Generation
	}
	switch {
	case !fresh:
		st.State, st.Message = reconciler.StatePending, "publication started; waiting for the media server"
	case ok && v.State == capabilities.StateReady && v.Publisher == t.cfg.Principal:
		st.State = reconciler.StateActive
	case ok && v.State == capabilities.StateFailed && fresh:
		st.State, st.Message = reconciler.StateFailed, "the media server reports the variant FAILED"
		// The failed publication still holds the variant: stop it, so that nothing of ours is left
		// on the media server if the intent goes before the next start; then start again after a
		// pause.
		if err := t.cmds.StopPublication(ctx, b.publicationID); err != nil && !errors.Is(err, capabilities.ErrPublicationNotFound) {
			return reconciler.Result{}, err
		}
		b.publicationID, b.retryAt = "", time.Now().Add(failedPause)
		t.writeStatus(ctx, b, key, st)
		return reconciler.Result{RequeueAfter: failedPause}, nil
	default:
		st.State, st.Message = reconciler.StatePending, "waiting for the variant to be READY"
	}
	t.writeStatus(ctx, b, key, st)
	return reconciler.Result{}, nil
}

func streamFor(src capabilities.Source, in reconciler.MediaIntent) (capabilities.Stream, bool) {
	if in.StreamID != "" {
		return src.Stream(in.StreamID)
	}
	return src.StreamByKind(in.MediaKind)
}

// writeStatus writes the intent's observed status under status/, guarded by the lease when b is set,
// skipping a write that would say what the last one said while the store still says it.
//
// The write is not abandoned when ctx ends (a stop, the lease's loss): the store would still commit a
// put whose answer nobody waits for, maybe after the status a later write says (the releaser's
// "stopped"). It waits for its answer instead, bounded by the client's request timeout; a lease lost
// meanwhile is the guard's to decide, and one known lost sends nothing.
func (t *Transcoder) writeStatus(ctx context.Context, b *binding, key string, st reconciler.ObservedStatus) {
	t.putStatus(ctx, b, key, st, false)
}

// putStatus is writeStatus; onlyOverOurs makes the put a compare-and-set on the revision of the last
// status this worker wrote (create-only if it wrote none), so that it never replaces a status another
// worker wrote since: another output's lease holder, after the intent changed its output.
func (t *Transcoder) putStatus(ctx context.Context, b *binding, key string, st reconciler.ObservedStatus, onlyOverOurs bool) {
	ctx = context.WithoutCancel(ctx)
	doc := st.Document()
	sig := statusSig(doc)
	t.mu.Lock()
	last, known := t.lastStatus[key]
	t.mu.Unlock()
	if last.sig == sig {
		replaced, rev := t.statusReplaced(ctx, key, sig)
		if !replaced {
			if rev != 0 {
				t.mu.Lock()
				t.lastStatus[key] = statusMemo{sig: sig, rev: rev}
				t.mu.Unlock()
			}
			return
		}
	}
	req := wire.PutRequest{Namespace: t.ns, Key: internal.StatusKey(key), Schema: reconciler.ObservedStatusSchema, Document: doc}
	if onlyOverOurs {
		expected := int64(0)
		if known {
			expected = int64(last.rev)
		}
		req.ExpectedRevision = &expected
	}
	var e wire.Entry
	var err error
	if b != nil {
		e, err = b.lease.Put(ctx, req)
	} else {
		e, err = t.w.Client().Put(ctx, req)
	}
	if onlyOverOurs && errors.Is(err, wire.ErrConflict) {
		t.cfg.Logger.Debug("status not written: another worker reported since", "intent", key, "state", st.State)
		return
	}
	if err != nil {
		t.cfg.Logger.Warn("status not written", "intent", key, "state", st.State, "err", err)
		return
	}
	t.mu.Lock()
	t.lastStatus[key] = statusMemo{sig: sig, rev: e.Revision}
	t.mu.Unlock()
	if st.State == reconciler.StateActive {
		t.event("capability ready", key, "%s READY, published by %s", st.VariantID, t.cfg.Principal)
	}
	if st.Message == "" {
		t.event("status", key, "%s", st.State)
	} else {
		t.event("status", key, "%s %s", st.State, st.Message)
	}
}

// lastNamesPublication reports whether the last status this worker wrote for the intent key names
// a publication.
func (t *Transcoder) lastNamesPublication(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := strings.SplitN(t.lastStatus[key].sig, "|", 3)
	return len(parts) > 1 && parts[1] != ""
}

// statusSig is what a status document says, without when: two documents with one sig say the same.
// Its second field is the publication id (lastNamesPublication reads it).
func statusSig(doc json.RawMessage) string {
	var st wire.ObservedStatus
	_ = json.Unmarshal(doc, &st)
	return strings.Join([]string{string(st.State), st.PublicationID, st.Message, st.ErrorCode, st.Holder, st.VariantID,
		st.SubscriptionID}, "|")
}

// statusReplaced reports whether the intent's status entry no longer says sig, which this worker last
// wrote: another worker wrote over it since, or it was deleted. A holder of the intent's former
// output that had not yet seen the change, or a worker behind on an intent that was invalid, writes
// over the current holder's report; unless the holder says it again, the status stays wrong for as
// long as nothing changes here. What is compared is what the entry says, not its revision, which a
// restore voids. The same words from another worker (every worker reports an invalid intent) are not
// written again: each would then write over the others' at every look. A store that cannot be read
// says nothing (false). Otherwise rev is the entry's revision, which the "stopped" of letGo is written
// over.
func (t *Transcoder) statusReplaced(ctx context.Context, key, sig string) (replaced bool, rev uint64) {
	e, err := t.w.Client().Get(ctx, t.ns, internal.StatusKey(key))
	switch {
	case errors.Is(err, wire.ErrNotFound):
		return true, 0
	case err != nil:
		return false, 0
	}
	return statusSig(e.Document) != sig, e.Revision
}

// stopBinding stops the publication, reports stopped and releases the lease. The "stopped" is written
// only over the last status this worker wrote: after the intent changed its output, the holder of the
// new output's lease (a standby that claimed it while our stop was under way) may have reported
// already, and a "stopped" guarded by the old lease would bury that report.
//
// None of it is abandoned when ctx ends (a stop that comes while the intent is let go): the binding is
// no longer in t.held, so nothing else would finish it; a stop_publication not sent would leave the
// publication holding the variant, a status not written would say active, a lease not released would
// keep the output from a standby for its TTL. Each request is bounded by its client's timeout instead.
//
// A stop_publication that gets no answer (a silent media server) is returned, and nothing else is
// done: the publication may still hold the variant, so the lease stays held and no "stopped" is
// written; the caller keeps the binding and stops it again later.
func (t *Transcoder) stopBinding(ctx context.Context, key string, b *binding, why string) error {
	ctx = context.WithoutCancel(ctx)
	if err := t.stopPublication(ctx, key, b); err != nil {
		return err
	}
	t.letGo(ctx, key, b, why)
	return nil
}

// stopPublication stops the binding's publication, if any. Our own publication goes, by its id,
// whether or not the lease is still held: left running after a loss it would hold the variant
// against the new holder (a CONFLICT when it publishes as another principal); one the new holder
// already replaced is not found, which is fine.
func (t *Transcoder) stopPublication(ctx context.Context, key string, b *binding) error {
	if b.publicationID == "" {
		return nil
	}
	if err := t.cmds.StopPublication(ctx, b.publicationID); err != nil && !errors.Is(err, capabilities.ErrPublicationNotFound) {
		if !b.stopUnanswered {
			b.stopUnanswered = true
			t.cfg.Logger.Warn("stop publication", "intent", key, "err", err)
		} else {
			t.cfg.Logger.Debug("stop publication", "intent", key, "err", err)
		}
		return err
	}
	if b.stopUnanswered {
		b.stopUnanswered = false
		t.cfg.Logger.Info("stop publication answered again", "intent", key, "publication", b.publicationID)
	}
	return nil
}

// letGo is the rest of stopBinding, once the publication is stopped: "stopped" over our last status,
// the lease released.
func (t *Transcoder) letGo(ctx context.Context, key string, b *binding, why string) {
	t.release(ctx, key, b, reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StateStopped,
		ObservedAtMs: time.Now().UnixMilli(), Message: why, Holder: t.cfg.WorkerID}, why)
}

// letGoUnstopped lets the binding go on a worker's way out although the media server did not answer
// the stop of its publication (stopErr): the publication may still run. "stopped" would name no
// publication, and once the intent was withdrawn nobody would ever end it; the status names it,
// pending, so that a worker that takes the intent up ends it (stopOrphan), or, still desired, its
// next holder takes the variant over.
func (t *Transcoder) letGoUnstopped(ctx context.Context, key string, b *binding, stopErr error) {
	t.release(ctx, key, b, reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StatePending,
		ObservedAtMs: time.Now().UnixMilli(), Holder: t.cfg.WorkerID, PublicationID: b.publicationID, VariantID: b.variantID,
		Message: "worker stopping: the media server did not answer the stop of publication " + b.publicationID +
			", which may still run (" + stopErr.Error() + ")"}, "worker stopping, publication "+b.publicationID+" not stopped")
}

// release writes st over our last status (while the lease is held: the status is the holder's to
// write) and releases the binding's lease.
func (t *Transcoder) release(ctx context.Context, key string, b *binding, st reconciler.ObservedStatus, why string) {
	ctx = context.WithoutCancel(ctx)
	if b.lease.Held() {
		t.putStatus(ctx, b, key, st, true)
	}
	_ = b.lease.Release(ctx)
	t.w.DropLease(b.leaseKey)
	t.mu.Lock()
	if m, ok := t.lastStatus[key]; ok {
		t.lastStatus[key] = statusMemo{rev: m.rev} // the next binding writes whatever it finds
	}
	t.mu.Unlock()
	t.event("stopped", key, "%s", why)
}
