package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// Tests of promises the doc comments make that no other test checked.

// Delete removes an entry on the lease's behalf and returns the namespace revision of the delete;
// ExpectedRevision is sent as given, and a CONFLICT is not taken for a guard failure (Delete, Put
// docs).
func TestLeaseDeleteIsGuardedAndReturnsTheRevision(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	o := opts(key, "transcoder-a-1", time.Minute)
	l := claim(t, newClient(t, env), o)
	put, err := l.Put(ctx, statusPut("status/front-door", "active"))
	if err != nil {
		t.Fatal(err)
	}
	create := int64(0)
	again := statusPut("status/front-door", "failed")
	again.ExpectedRevision = &create
	if _, err := l.Put(ctx, again); !errors.Is(err, wire.ErrConflict) || !l.Held() {
		t.Fatalf("create-only Put of an existing key = %v (held %v), want CONFLICT with the lease held", err, l.Held())
	}
	stale := int64(put.Revision) + 1000
	if _, err := l.Delete(ctx, wire.DeleteRequest{Key: "status/front-door", ExpectedRevision: &stale}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("Delete at another revision = %v, want CONFLICT", err)
	}
	rev, err := l.Delete(ctx, wire.DeleteRequest{Key: "status/front-door"})
	if err != nil || rev <= put.Revision {
		t.Fatalf("Delete = %d, %v; want a revision above the put's %d", rev, err, put.Revision)
	}
	if _, ok := get(t, admin, "status/front-door"); ok {
		t.Fatal("the entry is still there after Delete")
	}
	list, err := admin.List(ctx, wire.ListRequest{Namespace: ns})
	if err != nil || list.Revision < rev {
		t.Fatalf("namespace revision %d after a delete at %d (%v)", list.Revision, rev, err)
	}
	if _, err := l.Delete(ctx, wire.DeleteRequest{Namespace: "service/other", Key: "status/x"}); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("Delete in another namespace = %v, want INVALID_ARGUMENT", err)
	}
}

// LoadOffset needs no lease: a holder that released it (or a new one) still reads what was saved;
// SaveOffset of a released lease is refused; without an OffsetKey both are errors (LoadOffset,
// SaveOffset docs).
func TestOffsetReadsWithoutALease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newClient(t, env)
	ctx := ctxT(t)
	o := opts(key, "replica-a", time.Minute)
	o.OffsetKey = "offsets/job"
	l, err := lease.Claim(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveOffset(ctx, "17"); err != nil {
		t.Fatal(err)
	}
	releaseNow(t, l)
	if off, err := l.LoadOffset(ctx); err != nil || off != "17" {
		t.Fatalf("LoadOffset after Release = %q, %v; want 17", off, err)
	}
	if err := l.SaveOffset(ctx, "18"); !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, wire.ErrGuardFailed) {
		t.Fatalf("SaveOffset after Release = %v, want ErrNotHeld", err)
	}
	plain := claim(t, c, opts("leases/other", "replica-a", time.Minute))
	if _, err := plain.LoadOffset(ctx); err == nil {
		t.Error("LoadOffset without an OffsetKey succeeded")
	}
	if err := plain.SaveOffset(ctx, "1"); err == nil {
		t.Error("SaveOffset without an OffsetKey succeeded")
	}
}

// Several standbys race for a released lease: exactly one wins, the others keep waiting (Campaign
// doc).
func TestCampaignStandbysRaceOneWins(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	holder := claim(t, newClient(t, env), opts(key, "holder", time.Minute))
	const n = 3
	results := make(chan campaignResult, n)
	for i := range n {
		o := opts(key, "standby-"+string(rune('a'+i)), 30*time.Second)
		o.RenewEvery = 200 * time.Millisecond // the winner renews soon, waking the others
		res, waiting := standby(t, env, ctx, o)
		recv(t, waiting, "a standby to wait")
		go func() { results <- <-res }()
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	won := recv(t, results, "a standby's claim")
	if won.err != nil {
		t.Fatalf("the first standby to return: %v", won.err)
	}
	t.Cleanup(func() { releaseNow(t, won.l) })
	// The winner renews: each renewal wakes the others, which must see the key held and wait on.
	renewed := won.l.Revision()
	for won.l.Revision() == renewed {
		select {
		case r := <-results:
			t.Fatalf("a second standby returned while the lease is held: %+v (%v)", r, r.err)
		case <-won.l.Lost():
			t.Fatalf("the winner lost its lease: %v", won.l.Err())
		case <-time.After(50 * time.Millisecond): // polls the winner's revision; a return fails above
		}
	}
	cancel()
	for range n - 1 {
		if r := recv(t, results, "a standby to give up"); r.l != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a losing standby returned %+v, want the context's error", r)
		}
	}
}

// A claim refused by an entry that is not a lease document still says ErrHeld, with the entry's
// revision and no holder (HeldError doc).
func TestHeldErrorOfAnEntryThatIsNoLease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	req := statusPut(key, "active")
	req.Namespace = ns
	e, err := admin.Put(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lease.Claim(ctx, newClient(t, env), opts(key, "transcoder-a-1", time.Second))
	var held *lease.HeldError
	if !errors.As(err, &held) || !errors.Is(err, lease.ErrHeld) || !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("Claim over a status entry = %v, want a *HeldError", err)
	}
	if held.Holder != "" || held.Revision != e.Revision || !strings.Contains(held.Error(), "unknown holder") {
		t.Fatalf("HeldError %+v (%v), want no holder at revision %d", held, held, e.Revision)
	}
}

// The Guard of a lease that is not Held names a revision no entry has: a write sent with it fails
// GUARD_FAILED (Guard doc).
func TestGuardOfALeaseNoLongerHeld(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	l := claim(t, newClient(t, env), opts(key, "transcoder-a-1", time.Minute))
	if g := l.Guard(); g.Key != key || g.Revision != int64(l.Revision()) {
		t.Fatalf("Guard of a held lease = %+v, want %s at %d", g, key, l.Revision())
	}
	rev := l.Revision()
	releaseNow(t, l)
	// The entry comes back at the revision the lease had: no write with Guard may go through.
	again := claim(t, newClient(t, env), opts(key, "transcoder-a-2", time.Minute))
	g := l.Guard()
	if g.Key != key || g.Revision == int64(rev) || g.Revision == int64(again.Revision()) {
		t.Fatalf("Guard of a released lease = %+v", g)
	}
	req := statusPut("status/front-door", "active")
	req.Namespace, req.Guard = ns, &g
	if _, err := admin.Put(ctx, req); !errors.Is(err, wire.ErrGuardFailed) {
		t.Fatalf("a write with the Guard of a released lease = %v, want GUARD_FAILED", err)
	}
}

// ctx bounds the claim only: the lease renews on after the claim's ctx ends (Claim doc).
func TestClaimContextBoundsTheClaimOnly(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	renewals, onRenewed := notifier[uint64]()
	o := opts(key, "transcoder-a-1", 30*time.Second)
	o.RenewEvery = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(ctxT(t))
	l, err := lease.Claim(ctx, newClient(t, env), lease.WithHooks(o, lease.TestHooks{Renewed: onRenewed}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseNow(t, l) })
	cancel()
	recv(t, renewals, "a renewal after the claim's ctx ended")
	if !l.Held() || l.Err() != nil {
		t.Fatalf("after the claim's ctx ended: held %v err %v", l.Held(), l.Err())
	}
}

// errors.Is with ErrNotHeld never panics, whatever the target: a typed nil *wire.Error is no code
// (ErrNotHeld doc: it matches wire.ErrGuardFailed).
func TestErrNotHeldIsWithANilTarget(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("errors.Is(ErrNotHeld, (*wire.Error)(nil)) panicked: %v", r)
		}
	}()
	refused := fmt.Errorf("%w: %s:%s", lease.ErrNotHeld, ns, key) // as a write refused locally returns it
	if errors.Is(refused, (*wire.Error)(nil)) {
		t.Error("ErrNotHeld matched a nil *wire.Error")
	}
	if !errors.Is(refused, wire.ErrGuardFailed) || errors.Is(refused, wire.ErrConflict) {
		t.Error("ErrNotHeld matches by code GUARD_FAILED only")
	}
}

// Run's term: OnStopped runs after OnStarted returned and before the lease is released; once Run
// returns the entry is gone, so a standby claims at once; Leading follows the term (ElectorOptions,
// Run, Leading docs).
func TestElectorTermEndsWithOnStoppedThenRelease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	started := make(chan struct{})
	stoppedSawEntry := make(chan bool, 1)
	jobDone := false
	var e *lease.Elector
	e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{
		Options: opts("leaders/job", "w1", time.Minute),
		OnStarted: func(ctx context.Context, _ *lease.Lease) {
			close(started)
			<-ctx.Done()
			jobDone = true
		},
		OnStopped: func() {
			_, ok := get(t, admin, "leaders/job")
			stoppedSawEntry <- ok && jobDone
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.Leading() {
		t.Fatal("Leading before Run")
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	closed(t, started, "OnStarted")
	if !e.Leading() {
		t.Fatal("not Leading while OnStarted runs")
	}
	cancel()
	if err := recv(t, done, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !recv(t, stoppedSawEntry, "OnStopped") {
		t.Fatal("OnStopped ran before OnStarted returned or after the lease was released")
	}
	if _, ok := get(t, admin, "leaders/job"); ok {
		t.Fatal("the lease entry is still there after Run returned")
	}
	if e.Leading() {
		t.Fatal("Leading after Run returned")
	}
}

// A holder that restarts with the same Holder still waits for its old entry to expire: the old
// entry is not taken for its own (Campaign doc).
func TestCampaignOfTheSameHolderWaitsForItsOldEntry(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	old := claim(t, newClient(t, env), opts(key, "transcoder-a-1", time.Second))
	lease.PauseRenewals(old) // the old process stalled, as if dead
	oldRev := old.Revision()
	res, waiting := standby(t, env, ctxT(t), opts(key, "transcoder-a-1", time.Second))
	recv(t, waiting, "the restarted holder to wait behind its old entry")
	r := recv(t, res, "the claim once the old entry expired")
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { releaseNow(t, r.l) })
	if r.l.Revision() <= oldRev+1 { // the old entry's expiry took a revision of its own
		t.Fatalf("the restarted holder claimed at revision %d, the old entry was at %d: not after its expiry", r.l.Revision(), oldRev)
	}
}

// A guarded write retried after a renewal moved the lease on, and refused again because the entry is
// gone, ends the lease as any refusal no renewal explains does: Lost is closed when Put returns (Put
// doc). It stayed open, and Held true, until the next renewal found out.
func TestGuardedWriteRefusedAgainAfterItsRetryLosesTheLease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	replied, onReply := notifier[struct{}]()
	block := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(block) })
	var once sync.Once
	lo := opts(key, "transcoder-a-1", 30*time.Second)
	lo.RenewEvery = 300 * time.Millisecond
	o := lease.WithHooks(lo, lease.TestHooks{
		// Hold the first renewal after the store committed it, before the lease learns of it.
		RenewReply: func() { once.Do(func() { onReply(struct{}{}); <-block }) },
		// The refused write waits for that renewal: meanwhile an operator deletes the lease entry.
		GuardWait: func() {
			if _, err := admin.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
				t.Errorf("delete the lease entry: %v", err)
			}
			unblock()
		},
	})
	l, err := lease.Claim(ctx, newClient(t, env), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unblock(); releaseNow(t, l) })
	recv(t, replied, "the first renewal's reply")
	_, err = l.Put(ctx, statusPut("status/front-door", "active"))
	if !errors.Is(err, wire.ErrGuardFailed) || wire.CodeOf(err) != wire.CodeGuardFailed {
		t.Fatalf("guarded put, retried once the entry was gone: %v, want the store's GUARD_FAILED", err)
	}
	if !isClosed(l.Lost()) || l.Held() || !errors.Is(l.Err(), lease.ErrLost) {
		t.Fatalf("after the retried write was refused with no renewal to explain it: lost %v held %v err %v",
			isClosed(l.Lost()), l.Held(), l.Err())
	}
	if _, ok := get(t, admin, "status/front-door"); ok {
		t.Fatal("a write of a lease whose entry is gone went through")
	}
}

// Run must not be called again while it runs: a second call returns an error at once and leaves the
// first running (Run doc).
func TestElectorRunTwice(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	started := make(chan struct{})
	e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{
		Options:   opts("leaders/twice", "w1", time.Minute),
		OnStarted: func(ctx context.Context, _ *lease.Lease) { close(started); <-ctx.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	closed(t, started, "OnStarted")
	if err := e.Run(ctxT(t)); err == nil {
		t.Fatal("a second Run while the first runs returned nil")
	}
	if !e.Leading() {
		t.Fatal("the first Run stopped leading after a second call")
	}
	cancel()
	if err := recv(t, done, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Err is ErrReleased after Release unless the lease had been lost before: a lost lease keeps saying
// why it was lost (ErrReleased doc).
func TestReleaseOfALostLeaseKeepsItsLoss(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	o := opts(key, "transcoder-a-1", 2*time.Second)
	l, err := lease.Claim(ctxT(t), newClient(t, env), o)
	if err != nil {
		t.Fatal(err)
	}
	lease.PauseRenewals(l)
	closed(t, l.Lost(), "Lost once renewals stopped")
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), lease.ErrLost) || errors.Is(l.Err(), lease.ErrReleased) {
		t.Fatalf("Err after releasing a lost lease = %v, want the loss", l.Err())
	}
}

// A claim whose ctx has ended sends nothing and says so with ctx's error (Claim doc: ctx bounds the
// claim).
func TestClaimWithAnEndedContextWritesNothing(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newClient(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l, err := lease.Claim(ctx, c, opts(key, "w1", time.Minute)); l != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with an ended ctx = %v, %v; want context.Canceled", l, err)
	}
	if l, err := lease.Campaign(ctx, c, opts(key, "w1", time.Minute)); l != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign with an ended ctx = %v, %v; want context.Canceled", l, err)
	}
	if _, ok := get(t, c, key); ok {
		t.Fatal("a claim with an ended ctx wrote the lease entry")
	}
}

// A standby whose watch the store refuses for good (WATCH_TOO_BROAD: more keys extend the lease key
// than a snapshot may hold) ends Campaign with that refusal, and Elector.Run with it (Campaign, Run
// docs).
func TestElectorEndsOnAWatchTooBroad(t *testing.T) {
	bounds := wire.DefaultBounds()
	bounds.MaxSnapshotEntries = 2
	env := testenv.Start(t, testenv.Options{Bounds: &bounds})
	admin := newClient(t, env)
	ctx := ctxT(t)
	claim(t, newClient(t, env), opts("leaders/x", "w1", time.Minute))
	for _, x := range []string{"leaders/x1", "leaders/x2"} {
		if _, err := admin.Put(ctx, wire.PutRequest{Namespace: ns, Key: x, Schema: "keeppeek.observed-status.v1",
			Document: statusPut(x, "active").Document}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lease.Campaign(ctx, newClient(t, env), opts("leaders/x", "w2", time.Minute)); !errors.Is(err, wire.ErrWatchTooBroad) {
		t.Fatalf("Campaign = %v, want WATCH_TOO_BROAD", err)
	}
	e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{Options: opts("leaders/x", "w2", time.Minute),
		OnStarted: func(ctx context.Context, _ *lease.Lease) { <-ctx.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); !errors.Is(err, wire.ErrWatchTooBroad) {
		t.Fatalf("Run = %v, want WATCH_TOO_BROAD", err)
	}
}
