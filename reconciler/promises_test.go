package reconciler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Tests of promises the doc comments make that no other test checked.

// unreachableClient returns a client on a NATS server where no state server answers: a first watch
// is retried (no responders) for as long as Start's ctx allows.
func unreachableClient(t *testing.T) *client.Client {
	t.Helper()
	nc, err := client.Connect(natstest.Start(t, natsserver.Options{}).ClientURL(), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "coordinator", client.WithRequestTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Keys enqueued before Start are reconciled once it has started (Enqueue doc).
func TestEnqueueBeforeStartIsReconciledOnceStarted(t *testing.T) {
	_, c := setup(t)
	p := newProbe(t)
	ctrl, err := New(c, p, Options{Namespace: testNS, KeyPrefix: testPrefix})
	if err != nil {
		t.Fatal(err)
	}
	p.ctrl = ctrl
	t.Cleanup(ctrl.Stop)
	ctrl.Enqueue(testPrefix + "early")
	ctrl.Enqueue(testPrefix + "early") // waiting already: not queued twice
	if err := ctrl.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	got := p.barrier(t, "after-start")
	if len(got) != 1 || got[0].key != testPrefix+"early" || got[0].present {
		t.Fatalf("reconciled %+v after Start, want the early key once (absent from the store)", got)
	}
}

// RequeueAfter resets the key's backoff as a success does (Result doc).
func TestRequeueAfterResetsTheBackoff(t *testing.T) {
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	p := newProbe(t)
	p.behave = func(_ context.Context, cl call, n int) (Result, error) {
		switch {
		case cl.key != testPrefix+"a" || n > 3:
			return Result{}, nil
		case n <= 2:
			return Result{}, fmt.Errorf("attempt %d fails", n)
		}
		return Result{RequeueAfter: time.Hour}, nil // n == 3
	}
	ctrl := p.start(t, c, Options{BaseBackoff: time.Millisecond})
	for p.countOf(testPrefix+"a") < 3 {
		p.until(t, "the third Reconcile of a", func(cl call) bool { return cl.key == testPrefix+"a" })
	}
	p.barrier(t, "after-requeue-after") // a's third Reconcile is done
	if n := ctrl.q.numFailures(testPrefix + "a"); n != 0 {
		t.Fatalf("failures of a after a Result with RequeueAfter = %d, want 0 (reset as by a success)", n)
	}
}

// A nil trigger is ignored, and so is a closed one, from then on (Options.Triggers doc): neither
// enqueues anything, let alone every key again and again.
func TestNilAndClosedTriggersAreIgnored(t *testing.T) {
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	closedTrigger := make(chan struct{})
	close(closedTrigger)
	p := newProbe(t)
	p.start(t, c, Options{Triggers: []<-chan struct{}{nil, closedTrigger}})
	p.barrier(t, "one")
	p.barrier(t, "two")
	if n := p.countOf(testPrefix + "a"); n != 1 {
		t.Fatalf("a reconciled %d times with a nil and a closed trigger, want 1 (its snapshot)", n)
	}
}

// Start retries a first watch that fails for a reason that may pass until its ctx ends, and then
// returns the error leaving nothing running; a Start that Stop interrupts returns ErrStopped; a
// second Start after a failed one is ErrAlreadyStarted (Start doc).
func TestStartWhileNoStateServerAnswers(t *testing.T) {
	c := unreachableClient(t)
	r := Func(func(context.Context, Request) (Result, error) { return Result{}, nil })

	ctrl, err := New(c, r, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if err := ctrl.Start(ctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStopped) {
		t.Fatalf("Start while no state server answers = %v, want its ctx's deadline", err)
	}
	if ctrl.Cache() != nil {
		t.Fatal("a failed Start left a cache")
	}
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("Start after a failed Start = %v, want ErrAlreadyStarted", err)
	}
	ctrl.Stop()

	interrupted, err := New(c, r, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- interrupted.Start(ctxT(t)) }()
	interrupted.Stop()
	if err := recv(t, res, "the interrupted Start"); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start interrupted by Stop = %v, want ErrStopped", err)
	}
	if interrupted.Cache() != nil {
		t.Fatal("an interrupted Start left a cache")
	}
}

// Request.String is "namespace/key"; a ValidationError reads "media intent: <field>: <message>";
// InvalidStatus is state invalid with the error's text at the time given (their docs).
func TestSmallValueTypes(t *testing.T) {
	if s := (Request{Namespace: testNS, Key: "intents/a"}).String(); s != "service/transcoder-a/intents/a" {
		t.Errorf("Request.String() = %q", s)
	}
	ve := &ValidationError{Field: "recording_mode", Message: "missing"}
	if s := ve.Error(); s != "media intent: recording_mode: missing" {
		t.Errorf("ValidationError.Error() = %q", s)
	}
	at := time.UnixMilli(1764451200000)
	st := InvalidStatus("intents/a", ve, at)
	if st.SubjectKey != "intents/a" || st.State != StateInvalid || st.ObservedAtMs != at.UnixMilli() || st.Message != ve.Error() {
		t.Errorf("InvalidStatus = %+v", st)
	}
	res, err := Func(func(_ context.Context, req Request) (Result, error) {
		return Result{Requeue: req.Key == "k"}, nil
	}).Reconcile(context.Background(), Request{Key: "k"})
	if err != nil || !res.Requeue {
		t.Errorf("Func.Reconcile = %+v, %v; want the function's result", res, err)
	}
}

// RequeueAfter takes precedence over Requeue: the key comes back once RequeueAfter has passed, not
// after its (shorter) backoff (Result doc).
func TestRequeueAfterTakesPrecedenceOverRequeue(t *testing.T) {
	const after = 200 * time.Millisecond
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	p := newProbe(t)
	p.behave = func(_ context.Context, cl call, n int) (Result, error) {
		if cl.key == testPrefix+"a" && n == 1 {
			return Result{Requeue: true, RequeueAfter: after}, nil
		}
		return Result{}, nil
	}
	p.start(t, c, Options{BaseBackoff: time.Millisecond})
	var attempts []call
	for len(attempts) < 2 {
		if cl := p.next(t); cl.key == testPrefix+"a" {
			attempts = append(attempts, cl)
		}
	}
	if gap := attempts[1].start.Sub(attempts[0].end); gap < after {
		t.Fatalf("Requeue with RequeueAfter %v: the next Reconcile began after %v, the backoff's", after, gap)
	}
}

// A prefix whose snapshot is over the bound makes Start fail at once with WATCH_TOO_BROAD (Options
// KeyPrefix and Start docs).
func TestStartWatchTooBroad(t *testing.T) {
	bounds := wire.DefaultBounds()
	bounds.MaxSnapshotEntries = 1
	env := testenv.Start(t, testenv.Options{Bounds: &bounds})
	c, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	putIntent(t, c, "a", 1, 0)
	putIntent(t, c, "b", 2, 0)
	ctrl, err := New(c, Func(func(context.Context, Request) (Result, error) { return Result{}, nil }),
		Options{Namespace: testNS, KeyPrefix: testPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, wire.ErrWatchTooBroad) {
		t.Fatalf("Start over a prefix too broad to watch = %v, want WATCH_TOO_BROAD", err)
	}
	if ctrl.Cache() != nil {
		t.Fatal("a failed Start left a cache")
	}
}

// Start returns at once, wrapped so that errors.Is finds them, the store's refusal and a NATS
// connection closed for good (Start doc); neither waits for ctx.
func TestStartReturnsRefusalsAndAClosedConnectionAtOnce(t *testing.T) {
	env, _ := setup(t)
	r := Func(func(context.Context, Request) (Result, error) { return Result{}, nil })

	alice, err := client.New(env.Connect(t, "alice"), "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(alice, r, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("Start as a principal that may not read %s = %v, want PERMISSION_DENIED", testNS, err)
	}

	nc := env.Connect(t, "coordinator")
	closed, err := client.New(nc, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	ctrl, err = New(closed, r, Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Start(ctxT(t)); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Start over a closed connection = %v, want nats.ErrConnectionClosed", err)
	}
}
