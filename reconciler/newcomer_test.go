package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// The program a newcomer writes from the README and the packages' docs alone: a coordinator puts a
// desired publication; two workers of one service run a reconciler controller each; the one that
// claims the intent's lease checks the media server can do it, starts the publication, waits for the
// variant to be READY and writes an active status on the lease's behalf; stopping it hands the intent
// over to the other one, which takes the publication over and reports it active in its own name.

const ncTimeout = 10 * time.Second

func ncCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), ncTimeout)
	t.Cleanup(cancel)
	return ctx
}

const (
	ncNamespace = "service/transcoder-a"
	ncPrincipal = "transcoder-a"
)

// publisher is the newcomer's worker: a Reconciler over the controller's cache, holding one lease
// per intent it acts on.
type publisher struct {
	w       *worker.Worker
	c       *client.Client
	tracker *capabilities.Tracker
	cmds    *capabilities.Commands
	ctrl    *reconciler.Controller

	mu     sync.Mutex
	leases map[string]*lease.Lease // by intent key
}

func intentName(key string) string { return strings.TrimPrefix(key, "intents/") }

// Reconcile dispatches by key: the controller watches the whole namespace, so that the release or
// expiry of a lease (a key outside intents/) wakes the standbys waiting for it.
func (p *publisher) Reconcile(ctx context.Context, req reconciler.Request) (reconciler.Result, error) {
	switch {
	case strings.HasPrefix(req.Key, "leases/"):
		p.ctrl.Enqueue("intents/" + strings.TrimPrefix(req.Key, "leases/"))
		return reconciler.Result{}, nil
	case strings.HasPrefix(req.Key, "intents/"):
		return p.reconcileIntent(ctx, req.Key)
	}
	return reconciler.Result{}, nil // our own status entries
}

func (p *publisher) reconcileIntent(ctx context.Context, key string) (reconciler.Result, error) {
	e, ok := p.ctrl.Cache().Get(key)
	if !ok {
		p.release(ctx, key) // the intent is gone
		return reconciler.Result{}, nil
	}
	mi, err := reconciler.DecodeMediaIntent(e)
	if err == nil {
		err = mi.Validate()
	}
	if ve := (*reconciler.ValidationError)(nil); errors.As(err, &ve) {
		st := reconciler.InvalidStatus(key, err, time.Now())
		_, err := p.c.Put(ctx, wire.PutRequest{Namespace: ncNamespace, Key: "status/" + key,
			Schema: reconciler.ObservedStatusSchema, Document: st.Document()})
		return reconciler.Result{}, err
	}
	if !mi.Desired || mi.Role != reconciler.RolePublish {
		p.release(ctx, key)
		return reconciler.Result{}, nil
	}

	l, err := p.claim(ctx, key)
	if errors.Is(err, lease.ErrHeld) {
		return reconciler.Result{}, nil // a standby: the lease's DELETE or EXPIRE brings the key back
	}
	if err != nil {
		return reconciler.Result{}, err
	}

	// Can the media server do it?
	caps, stale := p.tracker.Snapshot()
	src, ok := caps.Source(mi.SourceID)
	if stale || !ok || !src.Online {
		return reconciler.Result{}, p.status(ctx, l, key, reconciler.ObservedStatus{State: reconciler.StatePending,
			Message: "source not online"}) // the capabilities trigger brings the key back
	}
	if !src.AllowsRecordingMode(mi.RecordingMode) {
		return reconciler.Result{}, p.status(ctx, l, key, reconciler.ObservedStatus{State: reconciler.StateFailed,
			ErrorCode: string(capabilities.CodeRecordingModeInvalid), Message: "recording mode not allowed"})
	}
	stream, ok := src.StreamByKind(mi.MediaKind)
	if mi.StreamID != "" {
		stream, ok = src.Stream(mi.StreamID)
	}
	if !ok {
		return reconciler.Result{}, p.status(ctx, l, key, reconciler.ObservedStatus{State: reconciler.StateFailed,
			Message: "no such stream"})
	}

	// Act: a READY variant of ours is already there (ours, or our predecessor's: same principal).
	if v, ok := stream.Variant(mi.VariantID); ok && v.Publisher == p.cmds.Principal() && v.State == capabilities.StateReady {
		return reconciler.Result{}, p.status(ctx, l, key, reconciler.ObservedStatus{State: reconciler.StateActive,
			VariantID: v.VariantID})
	}
	wctx, cancel := l.Context(ctx) // stop waiting once the lease is no longer ours
	defer cancel()
	rep, err := p.cmds.StartPublication(wctx, capabilities.StartPublicationRequest{
		SessionID: src.SessionID, StreamID: stream.StreamID, VariantID: mi.VariantID,
		OutputProfile: mi.OutputProfile, RecordingMode: mi.RecordingMode,
	})
	if err != nil {
		return reconciler.Result{}, err
	}
	if _, err := p.tracker.WaitReady(wctx, mi.SourceID, stream.StreamID, rep.VariantID); err != nil {
		return reconciler.Result{}, err
	}
	return reconciler.Result{}, p.status(ctx, l, key, reconciler.ObservedStatus{State: reconciler.StateActive,
		PublicationID: rep.PublicationID, VariantID: rep.VariantID})
}

// claim returns the lease of key's intent, claiming it when this worker does not hold it.
func (p *publisher) claim(ctx context.Context, key string) (*lease.Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.leases[key]; l != nil && l.Held() {
		return l, nil
	}
	l, err := lease.Claim(ctx, p.c, lease.Options{Namespace: ncNamespace, Key: "leases/" + intentName(key),
		Holder: p.w.ID(), TTL: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	p.leases[key] = l
	p.w.HoldLease(l.Key())
	go func() { // a lost lease is looked at again
		<-l.Lost()
		p.ctrl.Enqueue(key)
	}()
	return l, nil
}

func (p *publisher) release(ctx context.Context, key string) {
	p.mu.Lock()
	l := p.leases[key]
	delete(p.leases, key)
	p.mu.Unlock()
	if l != nil {
		_ = l.Release(ctx)
		p.w.DropLease(l.Key())
	}
}

// status writes the intent's observed status on the lease's behalf: a former holder cannot.
func (p *publisher) status(ctx context.Context, l *lease.Lease, key string, st reconciler.ObservedStatus) error {
	st.SubjectKey, st.ObservedAtMs, st.Holder = key, time.Now().UnixMilli(), p.w.ID()
	_, err := l.Put(ctx, wire.PutRequest{Key: "status/" + key, Schema: reconciler.ObservedStatusSchema,
		Document: st.Document()})
	return err
}

// Start and Stop make the publisher a worker component that releases its leases when the worker
// stops (after the controller, added later, has stopped), so that a standby takes over at once.
func (p *publisher) Start(context.Context) error { return nil }

func (p *publisher) Stop() {
	p.mu.Lock()
	keys := make([]string, 0, len(p.leases))
	for k := range p.leases {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, k := range keys {
		p.release(ctx, k)
	}
}

// startPublisher builds and runs one worker; the returned stop ends it and waits for Run.
func startPublisher(t *testing.T, env *testenv.Env, id string) (stop func() error) {
	t.Helper()
	nc := env.Connect(t, ncPrincipal)
	w, err := worker.New(worker.Options{Conn: nc, Principal: ncPrincipal, WorkerID: id,
		HeartbeatInterval: 200 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler)}) // the worker's default is slog.Default()
	if err != nil {
		t.Fatal(err)
	}
	tracker := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
	capsChanged, unsubscribe := tracker.Subscribe()
	t.Cleanup(unsubscribe)
	cmds, err := capabilities.NewCommands(nc, ncPrincipal)
	if err != nil {
		t.Fatal(err)
	}
	p := &publisher{w: w, c: w.Client(), tracker: tracker, cmds: cmds, leases: map[string]*lease.Lease{}}
	p.ctrl, err = reconciler.New(w.Client(), p, reconciler.Options{Namespace: ncNamespace,
		Triggers: []<-chan struct{}{capsChanged}, WatchID: "publisher-" + id})
	if err != nil {
		t.Fatal(err)
	}
	w.Add(tracker) // started in order, stopped in reverse
	w.Add(p)
	w.Add(p.ctrl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(ncTimeout):
				runErr = errors.New("worker did not stop")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitStatus waits, through a cache, for the status of key to satisfy ok.
func waitStatus(t *testing.T, cache *client.Cache, key string, ok func(reconciler.ObservedStatus) bool) reconciler.ObservedStatus {
	t.Helper()
	ctx := ncCtx(t)
	for {
		rev := cache.Revision()
		if e, found := cache.Get("status/" + key); found {
			var st reconciler.ObservedStatus
			if err := json.Unmarshal(e.Document, &st); err != nil {
				t.Fatal(err)
			}
			if ok(st) {
				return st
			}
		}
		if err := cache.WaitForRevision(ctx, rev+1); err != nil {
			t.Fatalf("waiting for the status of %s: %v", key, err)
		}
	}
}

func TestNewcomerProgram(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{
		{ID: "coordinator", Admin: true}, {ID: ncPrincipal, Admin: true}}})

	media := sim.New(env.Connect(t, "media"), sim.Options{Sources: sim.Sources("front-door"),
		ReadyDelay: 20 * time.Millisecond})
	if err := media.Start(ncCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(media.Stop)

	stopA := startPublisher(t, env, "tx-1")

	// The coordinator.
	cc, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	in := coordinator.PublishIntent("front-door", coordinator.MediaKindVideo, coordinator.RecordingDisabled)
	in.VariantID, in.OutputProfile = "browser-h264-720p", "browser-h264-720p"
	if _, err := co.PutIntent(ncCtx(t), ncNamespace, "intents/front-door", in); err != nil {
		t.Fatal(err)
	}
	view, err := cc.NewCache(ncCtx(t), client.CacheOptions{Namespace: ncNamespace, KeyPrefix: "status/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = view.Close() })

	st := waitStatus(t, view, "intents/front-door", func(s reconciler.ObservedStatus) bool {
		return s.State == reconciler.StateActive
	})
	if st.Holder != "tx-1" || st.VariantID != "browser-h264-720p" {
		t.Fatalf("status %+v, want active by tx-1 of browser-h264-720p", st)
	}
	pubs := media.Publications()
	if len(pubs) != 1 || pubs[0].RecordingMode != "disabled" || pubs[0].Principal != ncPrincipal {
		t.Fatalf("publications %+v", pubs)
	}

	// A standby starts; stopping tx-1 hands the intent over.
	startPublisher(t, env, "tx-2")
	fleet, err := co.WatchFleet(ncCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	for !fleet.Alive(ncPrincipal, "tx-2") {
		select {
		case <-fleet.Changes():
		case <-time.After(ncTimeout):
			t.Fatal("timed out waiting for tx-2 in the fleet")
		}
	}
	if h, ok := fleet.Holder("leases/front-door"); ok && h.WorkerID != "tx-1" {
		t.Fatalf("lease listed by %s, want tx-1", h.WorkerID)
	}
	if err := stopA(); err != nil {
		t.Fatalf("worker tx-1: %v", err)
	}
	st = waitStatus(t, view, "intents/front-door", func(s reconciler.ObservedStatus) bool {
		return s.State == reconciler.StateActive && s.Holder == "tx-2"
	})
	if pubs := media.Publications(); len(pubs) != 1 {
		t.Fatalf("publications after the handover %+v, want one", pubs)
	}
}
