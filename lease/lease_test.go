package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	natsauth "github.com/nats-io/nats-server/v2/server"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

const key = "leases/front-door-video-browser-h264-720p"

// TestClaimHeldAndRenewals: a second claim gets ErrHeld naming the holder; the stored document is
// a keeppeek.lease.v1 with the TTL; each renewal is a new revision.
func TestClaimHeldAndRenewals(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)

	puts, onPut := notifier[wire.Entry]()
	cache, err := admin.NewCache(ctx, client.CacheOptions{Namespace: ns, KeyPrefix: key,
		Handlers: client.Handlers{OnPut: onPut}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cache.Close() }()

	renewals, onRenewed := notifier[uint64]()
	// Renewals come quickly, but each has most of a long TTL to commit: with a 1 s TTL a renewal had
	// only half a second, which a loaded machine sometimes missed, losing the lease mid-test.
	o := opts(key, "transcoder-a-1", 20*time.Second)
	o.RenewEvery = 300 * time.Millisecond
	o.Purpose = "front door 720p publication"
	l := claim(t, newClient(t, env), lease.WithHooks(o, lease.TestHooks{Renewed: onRenewed}))
	claimed := recv(t, puts, "the claim's PUT")
	if claimed.Revision == 0 || claimed.TTLMs != 20000 || claimed.Schema != "keeppeek.lease.v1" || claimed.Owner != "coordinator" {
		t.Fatalf("claimed entry %+v", claimed)
	}
	d := decodeLease(t, claimed)
	if d.Holder != "transcoder-a-1" || d.ClaimedAtMs == 0 || d.RenewedAtMs != 0 || d.Purpose != o.Purpose {
		t.Fatalf("claim document %+v", d)
	}
	if !l.Held() || l.Holder() != "transcoder-a-1" || l.Key() != key || l.Namespace() != ns {
		t.Fatalf("lease: held %v holder %q key %q ns %q", l.Held(), l.Holder(), l.Key(), l.Namespace())
	}

	_, err = lease.Claim(ctx, newClient(t, env), opts(key, "transcoder-a-2", time.Second))
	var held *lease.HeldError
	if !errors.Is(err, lease.ErrHeld) || !errors.Is(err, wire.ErrConflict) || !errors.As(err, &held) {
		t.Fatalf("second claim: %v, want ErrHeld wrapping CONFLICT", err)
	}
	if held.Holder != "transcoder-a-1" || held.Revision < claimed.Revision || held.Key != key {
		t.Fatalf("HeldError %+v, want holder transcoder-a-1 at revision >= %d", held, claimed.Revision)
	}

	// Two renewals: new revisions, the same claim, a renewed_at_ms; the lease follows them.
	prev := claimed
	for i := range 2 {
		rev := recv(t, renewals, "a renewal")
		var e wire.Entry
		for e.Revision != rev {
			e = recv(t, puts, "the renewal's PUT")
		}
		r := decodeLease(t, e)
		if e.Revision <= prev.Revision || r.Holder != d.Holder || r.ClaimedAtMs != d.ClaimedAtMs ||
			r.RenewedAtMs < r.ClaimedAtMs || r.Purpose != o.Purpose || e.TTLMs != 20000 {
			t.Fatalf("renewal %d: %+v %+v after revision %d", i, e, r, prev.Revision)
		}
		if got := l.Revision(); got < rev {
			t.Fatalf("Revision() %d after renewal to %d", got, rev)
		}
		prev = e
	}
	if g := l.Guard(); g.Key != key || uint64(g.Revision) < prev.Revision {
		t.Fatalf("Guard() %+v, want %s at >= %d", g, key, prev.Revision)
	}
	if isClosed(l.Lost()) || l.Err() != nil {
		t.Fatalf("lease lost while renewing: %v", l.Err())
	}
}

// TestGuardedWritesAndLoss: writes on the lease's behalf commit while it is held; once its entry is
// gone the store refuses them (GUARD_FAILED), the lease is lost, and later writes are refused locally.
func TestGuardedWritesAndLoss(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	o := opts(key, "transcoder-a-1", 10*time.Second)
	o.RenewEvery = 5 * time.Second // no renewal during the test: only the guard can notice the loss
	l := claim(t, newClient(t, env), o)

	e, err := l.Put(ctx, statusPut("status/front-door", "active"))
	if err != nil {
		t.Fatalf("guarded put while held: %v", err)
	}
	if e.Revision <= l.Revision() || e.Namespace != ns {
		t.Fatalf("stored %+v with lease at %d", e, l.Revision())
	}
	if _, err := l.Put(ctx, wire.PutRequest{Namespace: "service/other", Key: "x", Schema: "keeppeek.observed-status.v1",
		Document: statusPut("x", "active").Document}); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("put in another namespace: %v, want INVALID_ARGUMENT", err)
	}

	// Someone (an operator) deletes the lease entry: the lease cannot know yet, the store can.
	if _, err := admin.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
		t.Fatal(err)
	}
	if !l.Held() {
		t.Fatal("lease not held before anything told it of the delete")
	}
	_, err = l.Put(ctx, statusPut("status/front-door", "failed"))
	if !errors.Is(err, wire.ErrGuardFailed) || wire.CodeOf(err) != wire.CodeGuardFailed {
		t.Fatalf("guarded put after the lease entry was deleted: %v, want the store's GUARD_FAILED", err)
	}
	if !isClosed(l.Lost()) { // the refused write itself proved the loss
		t.Fatal("Lost not closed when the guarded put returned GUARD_FAILED")
	}
	if l.Held() || !errors.Is(l.Err(), lease.ErrLost) {
		t.Fatalf("after GUARD_FAILED: held %v err %v", l.Held(), l.Err())
	}
	_, err = l.Delete(ctx, wire.DeleteRequest{Key: "status/front-door"})
	if !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, wire.ErrGuardFailed) || wire.CodeOf(err) != "" {
		t.Fatalf("guarded delete of a lost lease: %v, want the local ErrNotHeld", err)
	}
	if got, ok := get(t, admin, "status/front-door"); !ok || got.Revision != e.Revision {
		t.Fatalf("status entry changed after the loss: %+v %v", got, ok)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release of a lost lease: %v", err)
	}
	if !errors.Is(l.Err(), lease.ErrLost) {
		t.Fatalf("Err() after Release of a lost lease: %v, want the loss", l.Err())
	}
}

// TestGuardedWriteRetriesAfterRenewal: a write whose guard was overtaken by a renewal in flight
// waits for that renewal and goes through with the new revision.
func TestGuardedWriteRetriesAfterRenewal(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t)
	replied, onReply := notifier[struct{}]()
	waiting, onWait := notifier[struct{}]()
	block := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(block) })
	var once sync.Once
	// A long TTL: the held renewal must not run the lease out while the test steps through it (with
	// 4 s, a loaded machine had under 2 s to do so); the first renewal still comes soon.
	lo := opts(key, "transcoder-a-1", 30*time.Second)
	lo.RenewEvery = 300 * time.Millisecond
	o := lease.WithHooks(lo, lease.TestHooks{
		// Hold the first renewal after the store committed it, before the lease learns of it.
		RenewReply: func() { once.Do(func() { onReply(struct{}{}); <-block }) },
		GuardWait:  func() { onWait(struct{}{}) },
	})
	l, err := lease.Claim(ctx, newClient(t, env), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unblock(); releaseNow(t, l) }) // unblock first, or Release waits for the renewal
	rev0 := l.Revision()

	recv(t, replied, "the first renewal's reply")
	if l.Revision() != rev0 {
		t.Fatal("the held renewal was applied")
	}
	type result struct {
		e   wire.Entry
		err error
	}
	res := make(chan result, 1)
	go func() {
		e, err := l.Put(ctx, statusPut("status/front-door", "active"))
		res <- result{e, err}
	}()
	recv(t, waiting, "the refused write to wait for the renewal")
	unblock()
	r := recv(t, res, "the guarded put")
	if r.err != nil {
		t.Fatalf("guarded put overtaken by a renewal: %v", r.err)
	}
	if rev := l.Revision(); rev <= rev0 || r.e.Revision <= rev {
		t.Fatalf("lease at %d (was %d), put at %d", rev, rev0, r.e.Revision)
	}
	if !l.Held() {
		t.Fatal("lease not held after the renewal")
	}
}

// TestRenewalWithoutReply: a renewal that committed but whose reply was lost is recognised as the
// lease's own on the next renewal's CONFLICT; the lease stays held.
func TestRenewalWithoutReply(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	puts, onPut := notifier[wire.Entry]()
	cache, err := admin.NewCache(ctx, client.CacheOptions{Namespace: ns, KeyPrefix: key,
		Handlers: client.Handlers{OnPut: onPut}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cache.Close() }()
	renewals, onRenewed := notifier[uint64]()
	// Renewals every 500 ms, each with most of a 20 s TTL to commit: the lease must stay held through
	// the unanswered one however slow the machine.
	lo := opts(key, "transcoder-a-1", 20*time.Second)
	lo.RenewEvery = 500 * time.Millisecond
	l := claim(t, newClient(t, env), lease.WithHooks(lo, lease.TestHooks{Renewed: onRenewed}))
	lease.DropRenewalReplies(l, 1)
	claimed := recv(t, puts, "the claim's PUT")
	unanswered := recv(t, puts, "the renewal without a reply")
	if unanswered.Revision <= claimed.Revision {
		t.Fatalf("renewal at %d after claim at %d", unanswered.Revision, claimed.Revision)
	}
	if rev := recv(t, renewals, "the lease to adopt the renewal"); rev != unanswered.Revision {
		t.Fatalf("lease adopted revision %d, want the unanswered renewal's %d", rev, unanswered.Revision)
	}
	next := recv(t, renewals, "the next renewal")
	if next <= unanswered.Revision || !l.Held() || isClosed(l.Lost()) {
		t.Fatalf("after the unanswered renewal: next at %d, held %v, err %v", next, l.Held(), l.Err())
	}
	if e, ok := get(t, admin, key); !ok || e.Revision < next {
		t.Fatalf("lease entry %+v %v, want revision >= %d", e, ok, next)
	}
}

// TestLostByTiming: a holder that stops renewing loses the lease a margin before the store expires
// it; its writes are refused locally; Release removes the entry at once.
func TestLostByTiming(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	// The margin is the window in which the test must read the entry after Lost: 1 s, not the 250 ms
	// of a 2 s TTL, which a loaded machine sometimes overran (the entry had expired by the get).
	o := opts(key, "transcoder-a-1", 4*time.Second)
	o.RenewEvery = 2 * time.Second // margin 1 s
	l := claim(t, newClient(t, env), o)
	lease.PauseRenewals(l)
	closed(t, l.Lost(), "Lost once renewals stopped")
	e, ok := get(t, admin, key)
	if !ok || e.Revision != l.Revision() {
		t.Fatalf("lease entry %+v %v right after Lost: the store must still hold it (margin)", e, ok)
	}
	if l.Held() || !errors.Is(l.Err(), lease.ErrLost) {
		t.Fatalf("held %v err %v", l.Held(), l.Err())
	}
	_, err := l.Put(ctx, statusPut("status/front-door", "active"))
	if !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, wire.ErrGuardFailed) {
		t.Fatalf("put by a lost lease: %v, want ErrNotHeld", err)
	}
	if _, ok := get(t, admin, "status/front-door"); ok {
		t.Fatal("a lost lease wrote")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, admin, key); ok {
		t.Fatal("lease entry still there after Release")
	}
}

// TestReleaseDeletes: Release removes the entry, closes Lost, and is idempotent.
func TestReleaseDeletes(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	l := claim(t, newClient(t, env), opts(key, "transcoder-a-1", 0))
	e, ok := get(t, admin, key)
	if !ok || e.TTLMs != lease.DefaultTTL.Milliseconds() {
		t.Fatalf("entry %+v %v, want the default TTL", e, ok)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(l.Lost()) || l.Held() || !errors.Is(l.Err(), lease.ErrReleased) {
		t.Fatalf("after Release: lost %v held %v err %v", isClosed(l.Lost()), l.Held(), l.Err())
	}
	if _, ok := get(t, admin, key); ok {
		t.Fatal("entry still there after Release")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := l.Put(ctx, statusPut("status/x", "active")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("put after Release: %v", err)
	}
}

func TestOptions(t *testing.T) {
	base := opts(key, "transcoder-a-1", 0)
	r, err := lease.Resolve(base)
	if err != nil {
		t.Fatal(err)
	}
	if r.TTL != lease.DefaultTTL || r.RenewEvery != lease.DefaultTTL/3 || lease.Margin(r) != lease.DefaultTTL/6 || r.Logger == nil {
		t.Fatalf("defaults: %+v", r)
	}
	atMin := base
	atMin.RenewEvery = lease.MinRenewEvery
	if _, err := lease.Resolve(atMin); err != nil {
		t.Fatalf("RenewEvery = MinRenewEvery: %v", err)
	}
	if r, _ := lease.Resolve(opts(key, "h", 1500*time.Microsecond+time.Second)); r.TTL != 1001*time.Millisecond {
		t.Fatalf("TTL %v, want it truncated to whole milliseconds", r.TTL)
	}
	bad := map[string]func(*lease.Options){
		"user namespace":     func(o *lease.Options) { o.Namespace = "user/alice" },
		"bad namespace":      func(o *lease.Options) { o.Namespace = "service/" },
		"bad key":            func(o *lease.Options) { o.Key = "leases//a" },
		"no holder":          func(o *lease.Options) { o.Holder = "" },
		"bad holder":         func(o *lease.Options) { o.Holder = "worker.1" },
		"TTL under 1 s":      func(o *lease.Options) { o.TTL = 999 * time.Millisecond },
		"TTL over 24 h":      func(o *lease.Options) { o.TTL = 25 * time.Hour },
		"RenewEvery > TTL/2": func(o *lease.Options) { o.TTL, o.RenewEvery = 2*time.Second, 1001*time.Millisecond },
		"negative RenewEvery": func(o *lease.Options) {
			o.RenewEvery = -time.Second
		},
		// Each renewal had that long to be answered: none was, and the lease was lost a TTL after the
		// claim, while the loop retried every millisecond.
		"RenewEvery 1 ns":              func(o *lease.Options) { o.RenewEvery = time.Nanosecond },
		"RenewEvery under the minimum": func(o *lease.Options) { o.RenewEvery = lease.MinRenewEvery - time.Millisecond },
		"offset key = key":             func(o *lease.Options) { o.OffsetKey = key },
		"bad offset key":               func(o *lease.Options) { o.OffsetKey = "/x" },
	}
	for name, mutate := range bad {
		o := base
		mutate(&o)
		if _, err := lease.Resolve(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
		// Claim validates before it sends anything: no client needed to find out.
		if _, err := lease.Claim(context.Background(), nil, o); err == nil {
			t.Errorf("%s: Claim accepted", name)
		}
	}
}

// Context ends when the lease does, with the lease's error as its cause, and at once for a lease
// already ended; cancel ends it without a lease error.
func TestContextEndsWithTheLease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	o := opts(key, "transcoder-a-1", 2*time.Second)
	o.RenewEvery = 500 * time.Millisecond
	l := claim(t, newClient(t, env), o)
	ctx, cancel := l.Context(ctxT(t))
	defer cancel()
	other, cancelOther := l.Context(ctxT(t))
	cancelOther()
	if !errors.Is(context.Cause(other), context.Canceled) || errors.Is(context.Cause(other), lease.ErrLost) {
		t.Fatalf("cancelled context: cause %v", context.Cause(other))
	}
	if ctx.Err() != nil {
		t.Fatalf("context of a held lease ended: %v", context.Cause(ctx))
	}
	lease.PauseRenewals(l)
	closed(t, ctx.Done(), "the context once the lease is lost")
	if !errors.Is(context.Cause(ctx), lease.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", context.Cause(ctx))
	}
	late, cancelLate := l.Context(context.Background())
	defer cancelLate()
	if !errors.Is(context.Cause(late), lease.ErrLost) {
		t.Fatalf("context of a lost lease: cause %v, want ErrLost at once", context.Cause(late))
	}
}

// Release of a lease whose last renewal got no reply finds the entry moved on (CONFLICT): when it then
// cannot read the entry to tell whether that renewal was its own, it says so rather than report the
// entry gone (a standby would wait out the TTL unawares).
func TestReleaseThatCannotTellWhoseTheEntryIs(t *testing.T) {
	holder := "worker-a" // may not get: NATS refuses its get requests, which then go unanswered
	pub := []string{}
	for _, op := range []wire.Op{wire.OpPut, wire.OpDelete, wire.OpInfo, wire.OpWatch, wire.OpUnwatch, wire.OpAck, wire.OpList} {
		pub = append(pub, wire.StateSubject(wire.DefaultPrefix, holder, op))
	}
	env := testenv.Start(t, testenv.Options{
		Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: holder, Admin: true}},
		NATSUsers: []natsserver.User{{Name: holder, Password: "pw", Permissions: &natsauth.Permissions{
			Publish:   &natsauth.SubjectPermission{Allow: pub},
			Subscribe: &natsauth.SubjectPermission{Allow: []string{wire.InboxPrefix(holder) + ".>"}},
		}}, {Name: "coordinator", Password: "pw"}},
	})
	admin := newClient(t, env)
	ctx := ctxT(t)
	puts, onPut := notifier[wire.Entry]()
	cache, err := admin.NewCache(ctx, client.CacheOptions{Namespace: ns, KeyPrefix: key, Handlers: client.Handlers{OnPut: onPut}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cache.Close() }()
	c, err := client.New(env.Connect(t, holder), holder, client.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	o := opts(key, "transcoder-a-1", 30*time.Second)
	o.RenewEvery = 2 * time.Second
	l, err := lease.Claim(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	claimed := l.Revision()
	lease.DropRenewalReplies(l, 1)
	recv(t, puts, "the claim's PUT")
	recv(t, puts, "the renewal without a reply")
	lease.PauseRenewals(l)                                  // no later renewal resolves it first
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second) // its get goes unanswered till then
	defer cancel()
	if err := l.Release(rctx); err == nil {
		t.Fatal("Release reported the entry gone, though it could not read whose it is")
	}
	if e, ok := get(t, admin, key); !ok || e.Revision <= claimed {
		t.Fatalf("lease entry %+v %v after Release, want the renewal's", e, ok)
	}
}

// A nil client is refused with an error by Claim, Campaign and NewElector, as invalid options are:
// it was a nil dereference in the first request, and for an Elector only once Run was called.
func TestNilClient(t *testing.T) {
	o := opts(key, "transcoder-a-1", 0)
	noPanic := func(what string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s with a nil client panicked: %v", what, r)
			}
		}()
		if err := f(); err == nil {
			t.Errorf("%s accepted a nil client", what)
		}
	}
	noPanic("Claim", func() error { _, err := lease.Claim(ctxT(t), nil, o); return err })
	noPanic("Campaign", func() error { _, err := lease.Campaign(ctxT(t), nil, o); return err })
	noPanic("NewElector", func() error {
		_, err := lease.NewElector(nil, lease.ElectorOptions{Options: o, OnStarted: func(context.Context, *lease.Lease) {}})
		return err
	})
}
