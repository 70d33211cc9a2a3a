package store

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/wire"
)

// bootClock is a CLOCK_BOOTTIME that a test moves forward, as a suspend of the machine moves it.
type bootClock struct{ offset atomic.Int64 }

func (c *bootClock) now() boottime.Instant   { return boottime.Now().Add(time.Duration(c.offset.Load())) }
func (c *bootClock) suspend(d time.Duration) { c.offset.Add(int64(d)) }

// The anchored clock reads the wall clock once: a step of it, either way, moves no reading; the
// time boot counts (a suspend included) moves every reading by as much.
func TestAnchoredClockIgnoresWallClockSteps(t *testing.T) {
	var wall testClock
	var boot bootClock
	clk := anchoredClock(wall.now, boot.now)
	at := func() time.Duration { return time.Until(clk()) } // the reading's distance from the real clock
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if d := got - want; d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("%s: the clock reads %v from the real clock, want %v", what, got, want)
		}
	}
	near("at first", at(), 0)
	if clk().After(wall.now()) {
		t.Fatalf("a reading %v runs ahead of the wall clock %v", clk(), wall.now())
	}
	wall.advance(2 * time.Hour)
	near("after the wall clock stepped 2h forward", at(), 0)
	wall.advance(-5 * time.Hour)
	near("after the wall clock stepped 5h back", at(), 0)
	boot.suspend(10 * time.Minute)
	near("after a 10 min suspend", at(), 10*time.Minute)
	if r := clk(); r != r.Round(0) {
		t.Fatalf("a reading carries a monotonic clock reading: %v", r)
	}
}

// A wall clock stepped forward past a lease's deadline while the store runs leaves the lease live:
// a write to its namespace, which expires what is due first, finds nothing due, and no EXPIRE is sent.
// The lease expires when its TTL has elapsed as CLOCK_BOOTTIME counts it (here, across a suspend that
// the committer notices by itself).
func TestWallClockStepDoesNotExpireLeasesEarly(t *testing.T) {
	var wall testClock
	var boot bootClock
	opts := DefaultOptions()
	opts.Clock = anchoredClock(wall.now, boot.now)
	s, _ := openT(t, opts)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	lease := mustPut(t, s, admin, ttlPut(ns, "leases/a", time.Minute.Milliseconds()))
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut || m.Event.Key != "leases/a" {
		t.Fatalf("first update %+v", m)
	}
	wall.advance(2 * time.Hour)
	other := mustPut(t, s, admin, putLease(ns, "other"))
	if other.Revision != lease.Revision+1 {
		t.Fatalf("the put after the step has revision %d, want %d: something was expired first", other.Revision, lease.Revision+1)
	}
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut || m.Event.Key != "other" {
		t.Fatalf("update after the step %+v, want the put of other", m)
	}
	if e, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: "leases/a"}); err != nil || e.Revision != lease.Revision {
		t.Fatalf("the lease after the wall clock stepped past its deadline: %+v, %v", e, err)
	}
	noMessage(t, ch)

	boot.suspend(2 * time.Minute) // no write, no poke: the committer's own look at the clock finds it due
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" || m.Event.Revision != other.Revision+1 {
		t.Fatalf("update after the TTL elapsed %+v, want the EXPIRE of leases/a at %d", m, other.Revision+1)
	}
}

// The default clock is the anchored one, on CLOCK_BOOTTIME: a suspend of the machine (here, only its
// CLOCK_BOOTTIME moved, and the wall clock did not) expires a lease whose TTL it outlasted.
func TestDefaultClockCountsCLOCK_BOOTTIME(t *testing.T) {
	var boot bootClock
	bootNow = boot.now
	t.Cleanup(func() { bootNow = boottime.Now })
	s, _ := openT(t, DefaultOptions())
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	lease := mustPut(t, s, admin, ttlPut(ns, "leases/a", time.Hour.Milliseconds()))
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut {
		t.Fatalf("first update %+v", m)
	}
	boot.suspend(2 * time.Hour)
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" || m.Event.Revision != lease.Revision+1 {
		t.Fatalf("update after a suspend longer than the TTL %+v", m)
	}
}
