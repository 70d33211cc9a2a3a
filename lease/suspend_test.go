package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// A holder whose machine was suspended for longer than the lease's validity finds, once resumed,
// that it no longer holds the lease: at once (Held, Guard, guarded writes), without waiting for the
// renewal loop's timer, which runs on Go's monotonic clock and so stood still through the suspend;
// and the loop, once its timer fires, ends the lease rather than renewing it. The store on another
// machine counted the suspend and may have let a standby in meanwhile. Timed on the monotonic clock,
// the lease went on being Held, and its next renewal committed, as if no time had passed.
func TestSuspendedHolderKnowsItsLeaseIsGone(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t)
	const ttl, renewEvery = 3 * time.Second, time.Second
	o := opts(key, "transcoder-a-1", ttl)
	o.RenewEvery = renewEvery
	o, suspend := lease.WithSuspendableClock(o)
	c := newClient(t, env)
	l := claim(t, c, o)
	if !l.Held() {
		t.Fatal("not held after the claim")
	}
	claimed := l.Revision()

	suspend(ttl) // the machine slept through the lease's whole TTL
	if l.Held() {
		t.Fatal("Held after a suspend longer than the lease's validity")
	}
	if g := l.Guard(); g.Revision == int64(claimed) {
		t.Fatalf("Guard after the suspend names the lease's revision %d: a write would still be taken", claimed)
	}
	if _, err := l.Put(ctx, statusPut("status/front-door", "active")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("guarded put after the suspend: %v, want ErrNotHeld", err)
	}
	select {
	case <-l.Lost():
	case <-time.After(testTimeout):
		t.Fatalf("the lease did not end within %v of the suspend", testTimeout)
	}
	if err := l.Err(); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the lease ended with %v, want ErrLost", err)
	}
	// No renewal was sent after the suspend: the entry is still the claim.
	e, err := c.Get(ctx, o.Namespace, o.Key)
	if err != nil && !errors.Is(err, wire.ErrNotFound) {
		t.Fatal(err)
	}
	if err == nil && e.Revision != claimed {
		t.Fatalf("the entry moved from revision %d to %d: the lease renewed after its validity had passed", claimed, e.Revision)
	}
}
