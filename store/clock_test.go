package store

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/wire"
)

// hostClocks stand in for the default clock's sources: a wall clock the test steps, a CLOCK_BOOTTIME
// it moves as a suspend would, and a boot id it changes as a reboot would. Installed until the test
// ends.
type hostClocks struct {
	wall, boot atomic.Int64 // offsets from the real clocks
	id         atomic.Value // string
}

var bootBase = time.Now()

func installHostClocks(t *testing.T) *hostClocks {
	h := &hostClocks{}
	h.id.Store("boot-1")
	wallNow = func() time.Time { return time.Now().Add(time.Duration(h.wall.Load())) }
	sinceBoot = func() (time.Duration, string, bool) {
		return time.Hour + time.Since(bootBase) + time.Duration(h.boot.Load()), h.id.Load().(string), true
	}
	t.Cleanup(func() { wallNow, sinceBoot = time.Now, boottime.SinceBoot })
	return h
}

func (h *hostClocks) step(d time.Duration)    { h.wall.Add(int64(d)) }
func (h *hostClocks) suspend(d time.Duration) { h.wall.Add(int64(d)); h.boot.Add(int64(d)) }

// The default clock reads the wall clock once: a step of it, either way, moves no reading; the time
// CLOCK_BOOTTIME counts (a suspend included) moves every reading by as much.
func TestAnchoredClockIgnoresWallClockSteps(t *testing.T) {
	h := installHostClocks(t)
	clk, anchor := defaultClock()
	if anchor == nil || anchor.BootID != "boot-1" {
		t.Fatalf("anchor %+v, want one on boot-1", anchor)
	}
	at := func() time.Duration { return time.Until(clk()) } // the reading's distance from the real clock
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if d := got - want; d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("%s: the clock reads %v from the real clock, want %v", what, got, want)
		}
	}
	near("at first", at(), 0)
	if clk().After(wallNow()) {
		t.Fatalf("a reading %v runs ahead of the wall clock %v", clk(), wallNow())
	}
	h.step(2 * time.Hour)
	near("after the wall clock stepped 2h forward", at(), 0)
	h.step(-5 * time.Hour)
	near("after the wall clock stepped 5h back", at(), 0)
	h.suspend(10 * time.Minute)
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
	h := installHostClocks(t)
	s, _ := openT(t, DefaultOptions())
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	lease := mustPut(t, s, admin, ttlPut(ns, "leases/a", time.Minute.Milliseconds()))
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut || m.Event.Key != "leases/a" {
		t.Fatalf("first update %+v", m)
	}
	h.step(2 * time.Hour)
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

	h.suspend(2 * time.Minute) // no write, no poke: the committer's own look at the clock finds it due
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" || m.Event.Revision != other.Revision+1 {
		t.Fatalf("update after the TTL elapsed %+v, want the EXPIRE of leases/a at %d", m, other.Revision+1)
	}
}

// A suspend of the machine (CLOCK_BOOTTIME and the wall clock move together) expires a lease whose TTL
// it outlasted.
func TestDefaultClockCountsCLOCK_BOOTTIME(t *testing.T) {
	h := installHostClocks(t)
	s, _ := openT(t, DefaultOptions())
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	lease := mustPut(t, s, admin, ttlPut(ns, "leases/a", time.Hour.Milliseconds()))
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut {
		t.Fatalf("first update %+v", m)
	}
	h.suspend(2 * time.Hour)
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" || m.Event.Revision != lease.Revision+1 {
		t.Fatalf("update after a suspend longer than the TTL %+v", m)
	}
}

// A wall clock stepped while the store was stopped, on the same boot, moves the lease deadlines with
// it at the next Open: each lease keeps what remained of its TTL as CLOCK_BOOTTIME counts it (forward,
// it is not expired at the start while its holder still holds it; back, it does not last the step's
// length longer), without a new revision, and expires when that time has elapsed. After a reboot
// nothing is known of the time in between, and the wall clock rules.
func TestWallClockStepWhileStoppedMovesLeaseDeadlines(t *testing.T) {
	const ns = "service/tx"
	for _, c := range []struct {
		name   string
		step   time.Duration
		reboot bool
	}{
		{"forward", 2 * time.Hour, false},
		{"back", -time.Hour, false},
		{"forward across a reboot", 2 * time.Hour, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := installHostClocks(t)
			s, path := openT(t, DefaultOptions())
			lease := mustPut(t, s, admin, ttlPut(ns, "leases/a", time.Minute.Milliseconds()))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			h.step(c.step)
			if c.reboot {
				h.id.Store("boot-2")
			}
			s = openAt(t, path, DefaultOptions())
			e, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: "leases/a"})
			if c.reboot {
				wantCode(t, err, wire.CodeNotFound) // its deadline passed by the wall clock: purged at start
				return
			}
			if err != nil || e.Revision != lease.Revision || e.UpdatedAtMs != lease.UpdatedAtMs {
				t.Fatalf("the lease after a %v step while stopped: %+v, %v; want it live at revision %d", c.step, e, err, lease.Revision)
			}
			if moved := time.Duration(e.ExpiresAtMs-lease.ExpiresAtMs) * time.Millisecond; moved < c.step-time.Second || moved > c.step+time.Second {
				t.Fatalf("the deadline moved %v, want the step, %v", moved, c.step)
			}
			// The moved deadline was recorded, with this run's anchor: a third start, with no step,
			// moves it no further, and writes nothing (the anchor recorded still tells the time).
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openAt(t, path, DefaultOptions())
			if w := qualBoltWrites(qualBolt(s)); w != 0 {
				t.Fatalf("a start with no step wrote %d pages", w)
			}
			if again, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: "leases/a"}); err != nil || again.ExpiresAtMs != e.ExpiresAtMs {
				t.Fatalf("the lease at the next start: %+v, %v; want its deadline at %d", again, err, e.ExpiresAtMs)
			}
			_, ch := watchT(t, s, admin, "w", ns, "")
			h.suspend(2 * time.Minute) // past what remained of the TTL
			m := recv(t, ch)
			if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" {
				t.Fatalf("update once the TTL elapsed %+v, want the EXPIRE of leases/a", m)
			}
		})
	}
}
