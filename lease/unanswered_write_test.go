package lease_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// A renewal that committed but whose reply was lost moves the lease entry to a revision the lease
// does not know yet; the lease is still held (it is its own renewal). A guarded write then fails the
// store's guard, and the lease can tell why by reading its entry, as the next renewal would: it must
// go through with the new revision, not hand a holder that keeps its lease a GUARD_FAILED (which
// callers read as "fenced off").
func TestGuardedWriteAfterAnUnansweredRenewal(t *testing.T) {
	env, puts := watchedLease(t)
	ctx := ctxT(t)

	var current atomic.Pointer[lease.Lease]
	ready := make(chan struct{})
	var once sync.Once
	replied, onReply := notifier[struct{}]()
	o := opts(key, "transcoder-a-1", 30*time.Second)
	o.RenewEvery = time.Second
	o = lease.WithHooks(o, lease.TestHooks{RenewReply: func() {
		once.Do(func() {
			<-ready
			// No later renewal may resolve the unanswered one before the write does.
			lease.PauseRenewals(current.Load())
			onReply(struct{}{})
		})
	}})
	l := claim(t, newClient(t, env), o)
	current.Store(l)
	lease.DropRenewalReplies(l, 1)
	close(ready)
	claimed := recv(t, puts, "the claim's PUT")
	renewal := recv(t, puts, "the renewal without a reply")
	recv(t, replied, "the renewal's reply to be dropped")
	if renewal.Revision <= claimed.Revision || l.Revision() != claimed.Revision {
		t.Fatalf("renewal at %d, claim at %d, lease at %d", renewal.Revision, claimed.Revision, l.Revision())
	}
	if !l.Held() {
		t.Fatal("lease not held after one unanswered renewal")
	}
	e, err := l.Put(ctx, statusPut("status/front-door", "active"))
	if err != nil {
		t.Fatalf("guarded put by the holder after its own unanswered renewal: %v", err)
	}
	if l.Revision() != renewal.Revision || e.Revision <= renewal.Revision || !l.Held() {
		t.Fatalf("lease at %d (renewal %d), put at %d, held %v", l.Revision(), renewal.Revision, e.Revision, l.Held())
	}
}

// watchedLease starts a store, and an admin client whose cache of the lease key sends each PUT it
// sees to puts (the claim, then each renewal, even one whose reply the lease never gets).
func watchedLease(t *testing.T) (env *testenv.Env, puts <-chan wire.Entry) {
	t.Helper()
	env = testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ch, onPut := notifier[wire.Entry]()
	cache, err := admin.NewCache(ctxT(t), client.CacheOptions{Namespace: ns, KeyPrefix: key, Handlers: client.Handlers{OnPut: onPut}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	return env, ch
}
