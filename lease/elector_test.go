package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// eventLog records what the electors did, in order.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// before asserts that event a was recorded, and before event b.
func (l *eventLog) before(t *testing.T, a, b string) {
	t.Helper()
	ev := l.snapshot()
	ia, ib := slices.Index(ev, a), slices.Index(ev, b)
	if ia < 0 || ib < 0 || ia > ib {
		t.Fatalf("want %q before %q, events %q", a, b, ev)
	}
}

// term is one leader's term as OnStarted saw it.
type term struct {
	name   string
	l      *lease.Lease
	offset string
}

// TestElectorFailover: two electors on one key; one leads at a time; when the leader's lease is lost
// its job is stopped (ctx cancelled, OnStopped) before the other starts; the new leader resumes from
// the saved offset, and the deposed one cannot move it.
func TestElectorFailover(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)

	var (
		log     eventLog
		active  atomic.Int32 // OnStarted calls running
		most    atomic.Int32 // the most that ever ran at once
		retired atomic.Bool  // the first leader to stop retires: its Run ends
		terms   = make(chan term, 4)
	)
	type runner struct {
		e      *lease.Elector
		cancel context.CancelFunc
		done   chan struct{} // closed when Run returned err
		err    error
	}
	runners := map[string]*runner{}
	for _, name := range []string{"shipper-1", "shipper-2"} {
		runCtx, cancel := context.WithCancel(ctx)
		r := &runner{cancel: cancel, done: make(chan struct{})}
		e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: "leaders/shipper", Holder: name, TTL: 2 * time.Second,
				RenewEvery: 500 * time.Millisecond, OffsetKey: "offsets/shipper", Purpose: "audit shipping"},
			OnStarted: func(ctx context.Context, l *lease.Lease) {
				n := active.Add(1)
				defer active.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				log.add("start " + name)
				off, err := l.LoadOffset(ctx)
				if err != nil {
					t.Errorf("%s: LoadOffset: %v", name, err)
				}
				terms <- term{name: name, l: l, offset: off}
				<-ctx.Done()
				log.add("cancelled " + name)
			},
			OnStopped: func() {
				log.add("stop " + name)
				if !retired.Swap(true) {
					cancel()
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		r.e = e
		runners[name] = r
		go func() { r.err = e.Run(runCtx); close(r.done) }()
	}
	t.Cleanup(func() {
		for _, r := range runners {
			r.cancel()
			select {
			case <-r.done:
			case <-time.After(testTimeout):
				t.Errorf("an elector did not stop")
			}
		}
	})

	first := recv(t, terms, "the first leader")
	if first.offset != "" {
		t.Fatalf("first leader read offset %q, want none", first.offset)
	}
	if !runners[first.name].e.Leading() {
		t.Fatal("the first leader's elector is not Leading")
	}
	if err := first.l.SaveOffset(ctx, "100"); err != nil {
		t.Fatalf("leader's SaveOffset: %v", err)
	}

	// The leader stalls: its lease is lost, its job stopped, and the other takes over.
	lease.PauseRenewals(first.l)
	second := recv(t, terms, "the second leader")
	if second.name == first.name {
		t.Fatalf("%s led again after retiring", first.name)
	}
	if second.offset != "100" {
		t.Fatalf("new leader read offset %q, want 100", second.offset)
	}
	log.before(t, "start "+first.name, "cancelled "+first.name)
	log.before(t, "cancelled "+first.name, "stop "+first.name)
	log.before(t, "stop "+first.name, "start "+second.name)
	if first.l.Held() || !errors.Is(first.l.Err(), lease.ErrLost) {
		t.Fatalf("deposed lease: held %v err %v", first.l.Held(), first.l.Err())
	}
	closed(t, runners[first.name].done, "the retired elector's Run")
	if err := runners[first.name].err; err != nil {
		t.Fatalf("retired elector's Run: %v", err)
	}
	if runners[first.name].e.Leading() || !runners[second.name].e.Leading() {
		t.Fatal("Leading() does not follow the failover")
	}

	// The deposed leader cannot move the offset: refused locally, and by the store when the local
	// check is skipped (a leader that stalled between its check and its write).
	err := first.l.SaveOffset(ctx, "150")
	if !errors.Is(err, wire.ErrGuardFailed) || !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("deposed leader's SaveOffset: %v, want ErrNotHeld", err)
	}
	lease.SkipLocalCheck(first.l)
	err = first.l.SaveOffset(ctx, "150")
	if !errors.Is(err, wire.ErrGuardFailed) || wire.CodeOf(err) != wire.CodeGuardFailed {
		t.Fatalf("deposed leader's SaveOffset past the local check: %v, want the store's GUARD_FAILED", err)
	}
	if err := second.l.SaveOffset(ctx, "200"); err != nil {
		t.Fatalf("new leader's SaveOffset: %v", err)
	}
	if off, err := second.l.LoadOffset(ctx); err != nil || off != "200" {
		t.Fatalf("offset %q %v, want 200", off, err)
	}
	if e, ok := get(t, admin, "offsets/shipper"); !ok || e.Schema != "keeppeek.observed-status.v1" {
		t.Fatalf("offset entry %+v %v", e, ok)
	}

	// Stopping the leader's Run stops its job and releases the lease.
	runners[second.name].cancel()
	closed(t, runners[second.name].done, "the leader's Run")
	if err := runners[second.name].err; err != nil {
		t.Fatalf("leader's Run: %v", err)
	}
	log.before(t, "cancelled "+second.name, "stop "+second.name)
	if !isClosed(second.l.Lost()) || !errors.Is(second.l.Err(), lease.ErrReleased) {
		t.Fatalf("leader's lease after Run: %v", second.l.Err())
	}
	if _, ok := get(t, admin, "leaders/shipper"); ok {
		t.Fatal("lease entry left after the leader stopped")
	}
	if n := most.Load(); n != 1 {
		t.Fatalf("%d OnStarted ran at once", n)
	}
}

// TestElectorOptions: OnStarted is required, options are validated, Run refuses a second call.
func TestElectorOptions(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newClient(t, env)
	if _, err := lease.NewElector(c, lease.ElectorOptions{Options: opts("leaders/x", "w1", 0)}); err == nil {
		t.Fatal("NewElector without OnStarted")
	}
	if _, err := lease.NewElector(c, lease.ElectorOptions{Options: opts("leaders/x", "", 0),
		OnStarted: func(context.Context, *lease.Lease) {}}); err == nil {
		t.Fatal("NewElector without a holder")
	}
	started := make(chan struct{})
	e, err := lease.NewElector(c, lease.ElectorOptions{Options: opts("leaders/x", "w1", 0),
		OnStarted: func(ctx context.Context, _ *lease.Lease) { close(started); <-ctx.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	closed(t, started, "OnStarted")
	if err := e.Run(ctx); err == nil {
		t.Error("second Run accepted")
	}
	cancel()
	if err := recv(t, done, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestElectorPermissionDenied: a campaign the store refuses for good ends Run with the error.
func TestElectorPermissionDenied(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	alice, err := clientFor(t, env, "alice")
	if err != nil {
		t.Fatal(err)
	}
	e, err := lease.NewElector(alice, lease.ElectorOptions{Options: opts("leaders/x", "alice-1", 0),
		OnStarted: func(context.Context, *lease.Lease) { t.Error("alice was elected") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctxT(t)); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("Run: %v, want PERMISSION_DENIED", err)
	}
}
