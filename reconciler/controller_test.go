package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

const (
	testNS     = "service/transcoder-a"
	testPrefix = "intents/"
)

var admin = policy.Principal{ID: "coordinator", Admin: true}

// setup starts a state service and returns it with a client of the admin principal "coordinator".
func setup(t *testing.T) (*testenv.Env, *client.Client) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	c, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return env, c
}

// intentDoc is a valid keeppeek.media-intent.v1 publish document; n varies its priority.
func intentDoc(n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video",`+
		`"variant_id":"browser-h264-720p","output_profile":"browser-h264-720p","priority":%d,"recording_mode":"disabled"}`, n%1001))
}

// putIntent writes an intent under key (relative to testPrefix) and returns its revision.
func putIntent(t *testing.T, c *client.Client, key string, n int, ttlMs int64) uint64 {
	t.Helper()
	req := wire.PutRequest{Namespace: testNS, Key: testPrefix + key, Schema: MediaIntentSchema, Document: intentDoc(n)}
	if ttlMs > 0 {
		req.TTLMs = &ttlMs
	}
	e, err := c.Put(ctxT(t), req)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return e.Revision
}

func deleteKey(t *testing.T, c *client.Client, key string) uint64 {
	t.Helper()
	rev, err := c.Delete(ctxT(t), wire.DeleteRequest{Namespace: testNS, Key: testPrefix + key})
	if err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
	return rev
}

// call is one Reconcile as a probe saw it.
type call struct {
	key     string
	present bool   // the key was in the cache
	rev     uint64 // its entry's revision when present
	start   time.Time
	end     time.Time
}

// probe is a Reconciler that reports every call, reading the key from the controller's cache, and
// behaves as its behave function (if any) says. It counts calls and overlapping calls of a key.
type probe struct {
	t      *testing.T
	ctrl   *Controller
	calls  chan call
	behave func(ctx context.Context, c call, n int) (Result, error) // n: 1 for the key's first call

	mu       sync.Mutex
	count    map[string]int
	inflight map[string]int

	overlaps   atomic.Int64 // calls that began while another of the same key ran
	running    atomic.Int64
	maxRunning atomic.Int64
}

func newProbe(t *testing.T) *probe {
	return &probe{t: t, calls: make(chan call, 4096), count: map[string]int{}, inflight: map[string]int{}}
}

func (p *probe) Reconcile(ctx context.Context, req Request) (Result, error) {
	if req.Namespace != testNS {
		p.t.Errorf("Reconcile with namespace %q, want %q", req.Namespace, testNS)
	}
	now := p.running.Add(1)
	for {
		m := p.maxRunning.Load()
		if now <= m || p.maxRunning.CompareAndSwap(m, now) {
			break
		}
	}
	p.mu.Lock()
	p.count[req.Key]++
	n := p.count[req.Key]
	p.inflight[req.Key]++
	if p.inflight[req.Key] > 1 {
		p.overlaps.Add(1)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[req.Key]--
		p.mu.Unlock()
		p.running.Add(-1)
	}()

	c := call{key: req.Key, start: time.Now()}
	if e, ok := p.ctrl.Cache().Get(req.Key); ok {
		c.present, c.rev = true, e.Revision
	}
	var res Result
	var err error
	if p.behave != nil {
		res, err = p.behave(ctx, c, n)
	}
	c.end = time.Now()
	select {
	case p.calls <- c:
	case <-ctx.Done():
	}
	return res, err
}

func (p *probe) countOf(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[key]
}

// start creates and starts a controller over testNS/testPrefix with p, stopped at cleanup.
func (p *probe) start(t *testing.T, c *client.Client, o Options) *Controller {
	t.Helper()
	o.Namespace, o.KeyPrefix = testNS, testPrefix
	ctrl, err := New(c, p, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.ctrl = ctrl
	t.Cleanup(ctrl.Stop)
	if err := ctrl.Start(ctxT(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return ctrl
}

// next returns the next call.
func (p *probe) next(t *testing.T) call {
	t.Helper()
	return recv(t, p.calls, "a Reconcile")
}

// until returns calls until one satisfies cond, which it returns last.
func (p *probe) until(t *testing.T, what string, cond func(call) bool) []call {
	t.Helper()
	var seen []call
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case c := <-p.calls:
			seen = append(seen, c)
			if cond(c) {
				return seen
			}
		case <-timer.C:
			t.Fatalf("timed out waiting for %s; saw %+v", what, seen)
		}
	}
}

// barrier enqueues a key outside the store and returns the calls until it is reconciled. With one
// worker and a FIFO queue, everything queued before it has been reconciled by then.
func (p *probe) barrier(t *testing.T, name string) []call {
	t.Helper()
	key := testPrefix + "zz-barrier-" + name
	p.ctrl.Enqueue(key)
	seen := p.until(t, "barrier "+name, func(c call) bool { return c.key == key })
	return seen[:len(seen)-1]
}

func keysOf(calls []call) []string {
	var ks []string
	for _, c := range calls {
		ks = append(ks, c.key)
	}
	slices.Sort(ks)
	return ks
}

func TestControllerReconcilesEachExistingKeyOnceAtStart(t *testing.T) {
	_, c := setup(t)
	revs := map[string]uint64{}
	for i, k := range []string{"a", "b", "c"} {
		revs[testPrefix+k] = putIntent(t, c, k, i, 0)
	}
	// Outside the prefix: never reconciled.
	if _, err := c.Put(ctxT(t), wire.PutRequest{Namespace: testNS, Key: "leases/a", Schema: "keeppeek.lease.v1",
		Document: json.RawMessage(`{"holder":"w1","claimed_at_ms":1}`)}); err != nil {
		t.Fatal(err)
	}
	p := newProbe(t)
	ctrl := p.start(t, c, Options{})
	if k := ctrl.Cache(); k == nil || len(k.List()) != 3 {
		t.Fatalf("cache after Start: %v", k)
	}
	got := p.barrier(t, "start")
	if ks := keysOf(got); !slices.Equal(ks, []string{"intents/a", "intents/b", "intents/c"}) {
		t.Fatalf("reconciled %v at start, want each of intents/a, b, c once", ks)
	}
	for _, cl := range got {
		if !cl.present || cl.rev != revs[cl.key] {
			t.Fatalf("Reconcile of %s saw present=%v rev=%d, want its entry at revision %d", cl.key, cl.present, cl.rev, revs[cl.key])
		}
	}
}

func TestControllerReconcilesPutDeleteExpire(t *testing.T) {
	_, c := setup(t)
	p := newProbe(t)
	p.start(t, c, Options{})

	rev := putIntent(t, c, "a", 1, 0)
	p.until(t, "the put of a", func(cl call) bool { return cl.key == "intents/a" && cl.present && cl.rev == rev })
	rev = putIntent(t, c, "a", 2, 0)
	p.until(t, "the update of a", func(cl call) bool { return cl.key == "intents/a" && cl.present && cl.rev == rev })
	deleteKey(t, c, "a")
	p.until(t, "the delete of a", func(cl call) bool { return cl.key == "intents/a" && !cl.present })

	putIntent(t, c, "leased", 3, 1000)
	p.until(t, "the put of leased", func(cl call) bool { return cl.key == "intents/leased" && cl.present })
	p.until(t, "the expiry of leased", func(cl call) bool { return cl.key == "intents/leased" && !cl.present })
	if _, ok := p.ctrl.Cache().Get("intents/leased"); ok {
		t.Fatal("expired key still cached")
	}
}

// TestControllerOneReconcilePerKey drives many changes and enqueues of a few keys through several
// workers: no key is ever reconciled twice at once, no more than MaxConcurrent run at once, and
// every key's last Reconcile sees its last write.
func TestControllerOneReconcilePerKey(t *testing.T) {
	const (
		workers   = 4
		nkeys     = 4
		writes    = 8
		enqueuers = 8
		enqueues  = 200
	)
	_, c := setup(t)
	p := newProbe(t)
	p.behave = func(ctx context.Context, _ call, _ int) (Result, error) {
		for range 20 {
			runtime.Gosched() // widen the window for an overlap
		}
		return Result{}, nil
	}
	ctrl := p.start(t, c, Options{MaxConcurrent: workers})

	var wg sync.WaitGroup
	for e := range enqueuers {
		wg.Go(func() {
			for i := range enqueues {
				ctrl.Enqueue(fmt.Sprintf("%sk%d", testPrefix, (e+i)%nkeys))
			}
		})
	}
	final := map[string]uint64{}
	for w := range writes {
		for k := range nkeys {
			final[fmt.Sprintf("%sk%d", testPrefix, k)] = putIntent(t, c, fmt.Sprintf("k%d", k), w, 0)
		}
	}
	wg.Wait()
	last := map[string]uint64{}
	caughtUp := func() bool {
		for k, r := range final {
			if last[k] != r {
				return false
			}
		}
		return true
	}
	p.until(t, "every key's last write", func(cl call) bool {
		last[cl.key] = max(last[cl.key], cl.rev)
		return caughtUp()
	})
	if n := p.overlaps.Load(); n != 0 {
		t.Fatalf("%d Reconciles overlapped another of the same key", n)
	}
	if m := p.maxRunning.Load(); m > workers {
		t.Fatalf("%d Reconciles ran at once, MaxConcurrent is %d", m, workers)
	}
	t.Logf("max running %d", p.maxRunning.Load())
}

// TestControllerDifferentKeysConcurrently: with MaxConcurrent 2, the Reconciles of a and b run at the
// same time (each waits for the other to begin).
func TestControllerDifferentKeysConcurrently(t *testing.T) {
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	putIntent(t, c, "b", 2, 0)
	begun := map[string]chan struct{}{"intents/a": make(chan struct{}), "intents/b": make(chan struct{})}
	other := map[string]string{"intents/a": "intents/b", "intents/b": "intents/a"}
	p := newProbe(t)
	p.behave = func(ctx context.Context, cl call, n int) (Result, error) {
		if n != 1 {
			return Result{}, nil
		}
		close(begun[cl.key])
		ctx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		select {
		case <-begun[other[cl.key]]:
			return Result{}, nil
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%s never ran alongside %s", cl.key, other[cl.key])
		}
	}
	p.start(t, c, Options{MaxConcurrent: 2})
	for range 2 {
		if cl := p.next(t); cl.end.Sub(cl.start) >= testTimeout {
			t.Fatalf("%s waited for the other key until its timeout", cl.key)
		}
	}
	if p.maxRunning.Load() != 2 {
		t.Fatalf("max running %d, want 2", p.maxRunning.Load())
	}
}

func TestControllerRetriesWithGrowingBackoff(t *testing.T) {
	const (
		base     = 20 * time.Millisecond
		failures = 3
	)
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	p := newProbe(t)
	p.behave = func(ctx context.Context, cl call, n int) (Result, error) {
		if cl.key == "intents/a" && n <= failures {
			return Result{}, fmt.Errorf("attempt %d fails", n)
		}
		return Result{}, nil
	}
	ctrl := p.start(t, c, Options{BaseBackoff: base, MaxBackoff: time.Second})
	var attempts []call
	for len(attempts) < failures+1 {
		if cl := p.next(t); cl.key == "intents/a" {
			attempts = append(attempts, cl)
		}
	}
	for i := 1; i < len(attempts); i++ {
		gap := attempts[i].start.Sub(attempts[i-1].end)
		if want := base << (i - 1); gap < want {
			t.Fatalf("attempt %d began %v after attempt %d failed, before its backoff %v", i+1, gap, i, want)
		}
	}
	// After the success the key's failures are forgotten (the barrier runs after a is done).
	p.barrier(t, "after-success")
	if n := ctrl.q.numFailures("intents/a"); n != 0 {
		t.Fatalf("failures of a after a success = %d, want 0", n)
	}
	if n := p.countOf("intents/a"); n != failures+1 {
		t.Fatalf("a reconciled %d times, want %d", n, failures+1)
	}
}

func TestControllerPanicIsAnError(t *testing.T) {
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	p := newProbe(t)
	p.behave = func(ctx context.Context, cl call, n int) (Result, error) {
		if n == 1 {
			panic("boom")
		}
		return Result{}, nil
	}
	p.start(t, c, Options{BaseBackoff: time.Millisecond})
	// The panicking call never reports; the retry does.
	if cl := p.next(t); cl.key != "intents/a" || p.countOf("intents/a") != 2 {
		t.Fatalf("after a panic: %+v, %d calls", cl, p.countOf("intents/a"))
	}
}

func TestControllerRequeue(t *testing.T) {
	const after = 100 * time.Millisecond
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	p := newProbe(t)
	p.behave = func(ctx context.Context, cl call, n int) (Result, error) {
		switch {
		case cl.key != "intents/a":
			return Result{}, nil
		case n == 1:
			return Result{RequeueAfter: after}, nil
		case n == 2:
			return Result{Requeue: true}, nil
		}
		return Result{}, nil
	}
	ctrl := p.start(t, c, Options{BaseBackoff: 10 * time.Millisecond})
	var attempts []call
	for len(attempts) < 3 {
		if cl := p.next(t); cl.key == "intents/a" {
			attempts = append(attempts, cl)
		}
	}
	if gap := attempts[1].start.Sub(attempts[0].end); gap < after {
		t.Fatalf("RequeueAfter %v: the second Reconcile began after %v", after, gap)
	}
	if gap := attempts[2].start.Sub(attempts[1].end); gap < 10*time.Millisecond {
		t.Fatalf("Requeue: the third Reconcile began after %v, before the base backoff", gap)
	}
	p.barrier(t, "after-requeue")
	if n := ctrl.q.numFailures("intents/a"); n != 0 {
		t.Fatalf("failures of a = %d after a plain success, want 0", n)
	}
}

func TestControllerTriggerReenqueuesAllKeys(t *testing.T) {
	_, c := setup(t)
	for i, k := range []string{"a", "b", "c"} {
		putIntent(t, c, k, i, 0)
	}
	trig := make(chan struct{})
	p := newProbe(t)
	p.start(t, c, Options{Triggers: []<-chan struct{}{trig}})
	if ks := keysOf(p.barrier(t, "start")); len(ks) != 3 {
		t.Fatalf("reconciled %v at start", ks)
	}
	select {
	case trig <- struct{}{}:
	case <-ctxT(t).Done():
		t.Fatal("the controller does not read its trigger")
	}
	// The trigger enqueued a, b and c before it took the next value, and the barrier runs after them.
	select {
	case trig <- struct{}{}:
	case <-ctxT(t).Done():
		t.Fatal("the controller does not read its trigger")
	}
	got := keysOf(p.barrier(t, "trigger"))
	if !slices.Equal(slices.Compact(got), []string{"intents/a", "intents/b", "intents/c"}) || len(got) > 6 {
		t.Fatalf("after two trigger fires reconciled %v, want a, b and c (once or twice each)", got)
	}
	close(trig) // a closed trigger is ignored
}

// TestControllerCapabilitiesTrigger wires the capabilities Tracker's notifications as a trigger: a
// change of the media server's capabilities reconciles every intent again.
func TestControllerCapabilitiesTrigger(t *testing.T) {
	env, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	s := sim.New(env.Connect(t, "media"), sim.Options{Sources: sim.Sources("front-door")})
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatalf("sim: %v", err)
	}
	t.Cleanup(s.Stop)
	tr := capabilities.NewTracker(env.Connect(t, "coordinator"), capabilities.TrackerOptions{})
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatalf("tracker: %v", err)
	}
	t.Cleanup(tr.Stop)
	// Subscribed after the first snapshot: the only notification is the change below.
	changed, unsubscribe := tr.Subscribe()
	t.Cleanup(unsubscribe)

	p := newProbe(t)
	p.start(t, c, Options{Triggers: []<-chan struct{}{changed}})
	p.barrier(t, "start")
	if n := p.countOf("intents/a"); n != 1 {
		t.Fatalf("a reconciled %d times at start, want 1", n)
	}
	gen := tr.Generation()
	if err := s.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	p.until(t, "a Reconcile of a after the capabilities changed", func(cl call) bool { return cl.key == "intents/a" })
	if g := tr.Generation(); g <= gen {
		t.Fatalf("a was reconciled again while the tracker still held generation %d", g)
	}
}

func TestControllerResyncReenqueues(t *testing.T) {
	env, c := setup(t)
	for i, k := range []string{"a", "b"} {
		putIntent(t, c, k, i, 0)
	}
	p := newProbe(t)
	ctrl := p.start(t, c, Options{})
	if ks := keysOf(p.barrier(t, "start")); len(ks) != 2 {
		t.Fatalf("reconciled %v at start", ks)
	}
	if !env.Store.CloseWatch(admin, ctrl.Cache().WatchID(), wire.CloseOverflow, "test") {
		t.Fatal("CloseWatch: the cache's watch is not live")
	}
	seen := map[string]bool{}
	p.until(t, "a and b after the resync", func(cl call) bool {
		seen[cl.key] = true
		return seen["intents/a"] && seen["intents/b"]
	})
	if n := ctrl.Cache().Resyncs(); n < 1 {
		t.Fatalf("cache resyncs = %d, want at least 1", n)
	}
	// Changes after the resync still arrive.
	rev := putIntent(t, c, "c", 3, 0)
	p.until(t, "the put of c after the resync", func(cl call) bool { return cl.key == "intents/c" && cl.rev == rev })
}

// TestOnResyncEnqueuesGoneKeys checks the resync handler alone: a snapshot enqueues its keys and the
// keys it no longer holds.
func TestOnResyncEnqueuesGoneKeys(t *testing.T) {
	_, c := setup(t)
	ctrl, err := New(c, Func(func(context.Context, Request) (Result, error) { return Result{}, nil }), Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	drain := func() []string {
		var ks []string
		for ctrl.q.len() > 0 {
			k, _ := ctrl.q.get()
			ctrl.q.done(k)
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	ctrl.onResync([]wire.Entry{{Key: "a"}, {Key: "b"}}, 1)
	if ks := drain(); !slices.Equal(ks, []string{"a", "b"}) {
		t.Fatalf("first snapshot enqueued %v", ks)
	}
	ctrl.onChange("d", true)
	ctrl.onResync([]wire.Entry{{Key: "b"}, {Key: "c"}}, 5)
	if ks := drain(); !slices.Equal(ks, []string{"a", "b", "c", "d"}) {
		t.Fatalf("second snapshot enqueued %v, want a and d (gone), b and c", ks)
	}
	ctrl.enqueueAll()
	if ks := drain(); !slices.Equal(ks, []string{"b", "c"}) {
		t.Fatalf("enqueueAll enqueued %v, want the known keys b and c", ks)
	}
}

func TestControllerResyncEvery(t *testing.T) {
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	p := newProbe(t)
	p.start(t, c, Options{ResyncEvery: 20 * time.Millisecond})
	// Without any change, a is reconciled again and again.
	for p.countOf("intents/a") < 3 {
		p.until(t, "a periodic Reconcile of a", func(cl call) bool { return cl.key == "intents/a" })
	}
}

func TestControllerStopWaitsForRunningReconcile(t *testing.T) {
	_, c := setup(t)
	for i, k := range []string{"a", "b", "c"} {
		putIntent(t, c, k, i, 0)
	}
	var (
		started   = make(chan struct{})
		cancelled = make(chan struct{})
		release   = make(chan struct{})
		finished  atomic.Bool
		stopDone  atomic.Bool
		late      atomic.Int64 // Reconciles that began after Stop returned
	)
	p := newProbe(t)
	p.behave = func(ctx context.Context, cl call, n int) (Result, error) {
		if stopDone.Load() {
			late.Add(1)
		}
		if cl.key != "intents/a" || n != 1 {
			return Result{}, nil
		}
		close(started)
		<-ctx.Done() // Stop cancels the context...
		close(cancelled)
		<-release // ...and waits while the Reconcile finishes its work
		finished.Store(true)
		return Result{}, errors.New("cancelled")
	}
	ctrl := p.start(t, c, Options{})
	recv(t, started, "the first Reconcile") // b and c wait in the queue behind it

	stopped := make(chan struct{})
	go func() {
		ctrl.Stop()
		stopDone.Store(true)
		close(stopped)
	}()
	recv(t, cancelled, "Stop to cancel the running Reconcile")
	select {
	case <-stopped:
		t.Fatal("Stop returned while a Reconcile was running")
	case <-time.After(50 * time.Millisecond): // a check that Stop does not return, not a synchronisation
	}
	close(release)
	recv(t, stopped, "Stop to return")
	if !finished.Load() {
		t.Fatal("Stop returned before the running Reconcile")
	}

	// Nothing starts after Stop: the queued keys were dropped and new work is ignored.
	ctrl.Enqueue("intents/b")
	putIntent(t, c, "d", 4, 0)
	ctrl.Stop() // idempotent
	if n := p.countOf("intents/b") + p.countOf("intents/c") + p.countOf("intents/d"); n != 0 {
		t.Fatalf("%d Reconciles of b, c or d after Stop began", n)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d Reconciles began after Stop returned", n)
	}
	if _, ok := ctrl.Cache().Get("intents/a"); !ok {
		t.Fatal("the cache is not readable after Stop")
	}
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

func TestControllerStartErrors(t *testing.T) {
	env, c := setup(t)
	p := newProbe(t)
	ctrl := p.start(t, c, Options{})
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}

	// A principal that may not read the namespace: PERMISSION_DENIED at once.
	alice, err := client.New(env.Connect(t, "alice"), "alice")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := New(alice, p, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	defer denied.Stop()
	if err := denied.Start(ctxT(t)); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("Start without read permission = %v, want PERMISSION_DENIED", err)
	}
	if denied.Cache() != nil {
		t.Fatal("a failed Start left a cache")
	}

	// Stop before Start.
	early, err := New(c, p, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	early.Stop()
	if err := early.Start(ctxT(t)); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	_, c := setup(t)
	r := Func(func(context.Context, Request) (Result, error) { return Result{}, nil })
	for _, tc := range []struct {
		name string
		c    *client.Client
		r    Reconciler
		o    Options
		want string
	}{
		{"nil client", nil, r, Options{Namespace: testNS}, "client"},
		{"nil reconciler", c, nil, Options{Namespace: testNS}, "Reconciler"},
		{"no namespace", c, r, Options{}, "namespace"},
		{"bad namespace", c, r, Options{Namespace: "foo/x"}, "namespace"},
		{"bad prefix", c, r, Options{Namespace: testNS, KeyPrefix: "/intents"}, "prefix"},
		{"bad watch id", c, r, Options{Namespace: testNS, WatchID: "a.b"}, "watch id"},
		{"negative concurrency", c, r, Options{Namespace: testNS, MaxConcurrent: -1}, "MaxConcurrent"},
		{"negative backoff", c, r, Options{Namespace: testNS, BaseBackoff: -1}, "negative"},
		{"negative resync", c, r, Options{Namespace: testNS, ResyncEvery: -1}, "negative"},
		{"negative stop timeout", c, r, Options{Namespace: testNS, StopTimeout: -1}, "negative"},
		{"max below base", c, r, Options{Namespace: testNS, BaseBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctrl, err := New(tc.c, tc.r, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				if ctrl != nil {
					ctrl.Stop()
				}
				t.Fatalf("New = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		base, wantBase, wantMax time.Duration
	}{
		{0, DefaultBaseBackoff, DefaultMaxBackoff},
		{10 * time.Millisecond, 10 * time.Millisecond, DefaultMaxBackoff},
		{time.Minute, time.Minute, time.Minute}, // the default cap never undercuts the base
	} {
		ctrl, err := New(c, r, Options{Namespace: testNS, BaseBackoff: tc.base})
		if err != nil {
			t.Fatal(err)
		}
		ctrl.Stop()
		if ctrl.o.MaxConcurrent != 1 || ctrl.o.BaseBackoff != tc.wantBase || ctrl.o.MaxBackoff != tc.wantMax || ctrl.o.Logger == nil ||
			ctrl.o.StopTimeout != DefaultStopTimeout {
			t.Fatalf("defaults with BaseBackoff %v: %+v", tc.base, ctrl.o)
		}
	}
}

// TestObservedStatusAcceptedByServer writes status documents with awkward messages: the server's
// schema and content guard accept every one Document produces.
func TestObservedStatusAcceptedByServer(t *testing.T) {
	_, c := setup(t)
	for i, msg := range []string{
		strings.Repeat("€", 200),
		strings.Repeat("line\n", 40),
		"bad \xff bytes " + strings.Repeat("x", 300),
		InvalidStatus("intents/a", &ValidationError{Field: "recording_mode", Message: "missing"}, time.Now()).Message,
	} {
		st := ObservedStatus{SubjectKey: "intents/a", State: StateFailed, ObservedAtMs: time.Now().UnixMilli(), Message: msg,
			ErrorCode: string(capabilities.CodeRecordingModeInvalid), Holder: "transcoder-a-1"}
		if _, err := c.Put(ctxT(t), wire.PutRequest{Namespace: testNS, Key: fmt.Sprintf("status/%d", i),
			Schema: ObservedStatusSchema, Document: st.Document()}); err != nil {
			t.Fatalf("put status %d: %v", i, err)
		}
	}
}
