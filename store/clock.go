package store

import (
	"encoding/json"
	"time"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/wire"
)

// The default clock's sources (variables so that a test can step the wall clock, suspend the machine
// or restart the store on the same boot).
var (
	wallNow   = time.Now
	sinceBoot = boottime.SinceBoot
)

// defaultClock is the store's clock when Options.Clock is not set: the wall clock read now, advanced
// from then on by the time CLOCK_BOOTTIME counts (see anchoredClock). anchor ties the two for the
// next Open on this boot (nil where CLOCK_BOOTTIME and the boot's id cannot be read: the clock then
// counts Go's monotonic time, suspends left out).
func defaultClock() (clock func() time.Time, anchor *clockAnchor) {
	w0 := wallNow() // read first: a reading then lags the wall clock, never runs ahead of it
	if b0, id, ok := sinceBoot(); ok {
		boot := func() time.Duration { d, _, _ := sinceBoot(); return d }
		return anchoredClock(w0, b0, boot), &clockAnchor{BootID: id, BootNs: int64(b0), StoreMs: w0.UnixMilli()}
	}
	start := boottime.Now()
	return anchoredClock(w0, 0, func() time.Duration { return boottime.Since(start) }), nil
}

// anchoredClock reads w0 at boot reading b0, and w0 advanced by what boot counts since at any later
// reading. Lease deadlines are times of this clock, so they pass when their TTL has elapsed, as the
// holders, which time their leases on their own CLOCK_BOOTTIME, count it: a wall clock stepped forward
// while the store runs (an NTP step, an operator's date) does not expire every lease at once, early,
// while their holders still believe they hold them (nor a step back keep them for the step's length);
// a suspend of the machine counts, as it does for the holders. The stamps (created_at_ms,
// updated_at_ms, expires_at_ms, audit at_ms) therefore keep the wall clock's reading of the moment the
// store opened, and differ from the wall clock by any step taken since, until the next Open (which
// moves the lease deadlines with the step: see Store.followWallClock). Only a step is left out: NTP's
// gradual corrections change both clocks' rate alike.
func anchoredClock(w0 time.Time, b0 time.Duration, boot func() time.Duration) func() time.Time {
	w0 = w0.Round(0) // wall time only: a reading is the anchor plus boot's count
	return func() time.Time { return w0.Add(boot() - b0) }
}

// clockAnchor ties the store's clock to CLOCK_BOOTTIME for one run: at BootNs (on boot BootID) the
// clock read StoreMs, and it advanced with CLOCK_BOOTTIME from there. It is kept in the database, with
// the epoch it was written in, so that the next Open on the same boot knows what the store's clock
// would read now had it kept running, and how far the wall clock moved meanwhile.
type clockAnchor struct {
	Epoch   string `json:"epoch"`
	BootID  string `json:"boot_id"`
	BootNs  int64  `json:"boot_ns"`
	StoreMs int64  `json:"store_ms"`
}

// decodeAnchor reads a stored anchor; nil when there is none or it does not decode (an anchor only
// lets lease deadlines follow a wall clock step across a restart: without it they do not).
func decodeAnchor(b []byte) *clockAnchor {
	if b == nil {
		return nil
	}
	var a clockAnchor
	if json.Unmarshal(b, &a) != nil || a.Epoch == "" || a.BootID == "" {
		return nil
	}
	return &a
}

// minClockShift is the smallest wall clock step between two runs that moves the lease deadlines: below
// it, the readings' own imprecision; a lease's safety margin is far larger.
const minClockShift = time.Second

// followWallClock moves the lease deadlines of ld by the step the wall clock took since the store
// last ran on this boot (in this epoch), so that each lease keeps what remained of its TTL as
// CLOCK_BOOTTIME counts it: a wall clock stepped forward while stated was stopped would otherwise
// expire at this start every lease whose deadline the step passed, while its holder, timing it on
// CLOCK_BOOTTIME, still held it. It returns the entries it moved, as keepalive changes (no revision,
// no audit record, as a heartbeat's), and whether this run's anchor must be recorded (with them): not
// when the anchor recorded before still tells this run's time, within minClockShift, so that an
// ordinary restart commits nothing. Across a reboot (or a restore, or without an anchor) nothing is
// known of the time in between: the wall clock is all there is.
func (s *Store) followWallClock(ld *loaded) (moved []change, record bool) {
	prev, cur := ld.anchor, s.anchor
	if cur == nil {
		return nil, false
	}
	if prev == nil || prev.Epoch != ld.epoch || prev.BootID != cur.BootID || cur.BootNs < prev.BootNs {
		return nil, true
	}
	wouldRead := prev.StoreMs + (cur.BootNs-prev.BootNs)/int64(time.Millisecond)
	step := cur.StoreMs - wouldRead
	if step > -minClockShift.Milliseconds() && step < minClockShift.Milliseconds() {
		return nil, false
	}
	for ns, ls := range ld.spaces {
		for _, e := range ls.entries {
			if e.ExpiresAtMs == 0 {
				continue
			}
			e.ExpiresAtMs = min(max(e.ExpiresAtMs+step, 1), wire.MaxSafeInteger)
			moved = append(moved, change{kind: changeTouch, ns: ns, key: e.Key, entry: e, json: encodeEntry(e)})
		}
	}
	s.opts.Logger.Warn("the wall clock moved since the store last ran on this boot: lease deadlines move with it, each lease keeping what remained of its TTL",
		"step", time.Duration(step)*time.Millisecond, "leases", len(moved))
	return moved, true
}

// recordClock commits the anchor of this run's clock, with the lease deadlines followWallClock moved.
// When it fails the database keeps the previous anchor and deadlines (see Store.load).
func (s *Store) recordClock(moved []change) error {
	a := *s.anchor
	a.Epoch = s.epoch
	return s.be.commit(&batch{changes: moved, namespaces: map[string]nsCounter{}, totalBytes: s.dbBytes, anchor: &a})
}
