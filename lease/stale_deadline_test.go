package lease_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
)

// The renewal loop waits for the lease's deadline when no renewal is due before it (renewals keep
// failing). A guarded write may meanwhile find one of the lease's own unanswered renewals committed
// and move the deadline on: the lease is held longer, as Held says. The loop must not then end the
// lease at the deadline it read before it waited ("not renewed"), a renewal's worth before the lease
// could expire: that is a failover for nothing.
func TestLossTimerFollowsADeadlineMovedByAGuardedWrite(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t)

	const ttl, renewEvery = 3 * time.Second, time.Second
	var current atomic.Pointer[lease.Lease]
	var paused atomic.Bool
	ready := make(chan struct{})
	var replyOnce, waitOnce sync.Once
	lastWait, onLastWait := notifier[struct{}]()
	o := opts(key, "transcoder-a-1", ttl)
	o.RenewEvery = renewEvery
	o = lease.WithHooks(o, lease.TestHooks{
		RenewReply: func() {
			replyOnce.Do(func() {
				<-ready
				// The renewals stall from here on, and none resolves the unanswered one.
				lease.PauseRenewals(current.Load())
				paused.Store(true)
			})
		},
		LastWait: func() {
			if paused.Load() {
				waitOnce.Do(func() { onLastWait(struct{}{}) })
			}
		},
	})
	began := time.Now()
	l := claim(t, newClient(t, env), o)
	current.Store(l)
	claimedAt := l.Revision()
	lease.DropRenewalReplies(l, 1) // the first renewal commits, its reply is lost
	close(ready)

	// The loop now waits for the deadline counted from the claim; the write resolves the renewal.
	recv(t, lastWait, "the renewal loop to wait for its deadline")
	if _, err := l.Put(ctx, statusPut("status/front-door", "active")); err != nil {
		t.Fatalf("guarded put after the holder's own unanswered renewal: %v", err)
	}
	if l.Revision() <= claimedAt || !l.Held() {
		t.Fatalf("after the write: lease at %d (claimed at %d), held %v", l.Revision(), claimedAt, l.Held())
	}

	// The renewal was sent at least renewEvery after the claim began, so the lease is held until at
	// least then + TTL - margin; renewals stay stalled, so it is lost by timing after that.
	closed(t, l.Lost(), "the lease to be lost by timing")
	lostAfter := time.Since(began)
	if !errors.Is(l.Err(), lease.ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", l.Err())
	}
	if min := renewEvery + ttl - renewEvery/2; lostAfter < min {
		t.Fatalf("lost %v after the claim began, before the renewed lease's deadline (at least %v)", lostAfter, min)
	}
}
