package lease_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// A renewal committed but its reply was lost. A guarded write finds that renewal its own and adopts
// its revision while the next renewal, sent with the revision before, is out: that renewal is then
// refused (CONFLICT) because the lease moved on, not because the entry is someone else's. The lease
// must stay held; it was lost ("renewal refused", the entry taken for gone, so Release would not even
// delete it and a standby waited out the TTL).
func TestRenewalRefusedAfterAGuardedWriteAdoptedAnUnansweredOne(t *testing.T) {
	env, puts := watchedLease(t)
	ctx := ctxT(t)

	// await receives from ch in a hook, bounded: a hook that waits for ever would hang the lease.
	await := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(testTimeout):
			t.Errorf("hook timed out waiting for %s", what)
		}
	}
	var renews, replies atomic.Int32
	resolved, bReplied := make(chan struct{}), make(chan struct{})
	var unanswered atomic.Uint64 // the revision of the renewal without a reply
	adopted := make(chan struct{})
	renewed, onRenewed := notifier[uint64]()
	o := opts(key, "transcoder-a-1", 30*time.Second)
	o.RenewEvery = time.Second
	o = lease.WithHooks(o, lease.TestHooks{
		Renew: func() {
			if renews.Add(1) == 2 { // the next renewal reads the lease's revision while the write is resolving
				await(resolved, "the write to resolve the unanswered renewal")
			}
		},
		RenewReply: func() {
			if replies.Add(1) == 2 { // refused: the entry is at the unanswered renewal's revision
				close(bReplied)
				await(adopted, "the write to adopt the unanswered renewal")
			}
		},
		Resolved: func() {
			close(resolved)
			await(bReplied, "the next renewal's reply")
		},
		Renewed: func(rev uint64) {
			if rev == unanswered.Load() {
				select {
				case <-adopted:
				default:
					close(adopted)
				}
			}
			onRenewed(rev)
		},
	})
	l := claim(t, newClient(t, env), o)
	lease.DropRenewalReplies(l, 1)
	claimed := recv(t, puts, "the claim's PUT")
	renewal := recv(t, puts, "the renewal without a reply")
	unanswered.Store(renewal.Revision)
	if renewal.Revision <= claimed.Revision {
		t.Fatalf("renewal at %d after the claim at %d", renewal.Revision, claimed.Revision)
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
	r := recv(t, res, "the guarded put")
	if r.err != nil {
		t.Fatalf("guarded put by the holder after its own unanswered renewal: %v", r.err)
	}
	// The refused renewal is behind us once a later one commits, or the lease ended.
	for {
		select {
		case rev := <-renewed:
			if rev <= renewal.Revision {
				continue
			}
		case <-l.Lost():
			t.Fatalf("lease lost after a renewal refused for a revision the lease had adopted: %v", l.Err())
		case <-time.After(testTimeout):
			t.Fatal("timed out waiting for a renewal after the refused one")
		}
		break
	}
	if !l.Held() || l.Err() != nil || l.Revision() <= renewal.Revision {
		t.Fatalf("held %v err %v at %d (unanswered renewal %d)", l.Held(), l.Err(), l.Revision(), renewal.Revision)
	}
}
