package store

import (
	"time"

	"github.com/keeppeek/coordination/internal/boottime"
)

// bootNow is the elapsed-time source of the default clock (a variable so that a test can stand in a
// suspend of the machine).
var bootNow = boottime.Now

// defaultClock is the store's clock when Options.Clock is not set: anchoredClock on the wall clock and
// CLOCK_BOOTTIME.
func defaultClock() func() time.Time { return anchoredClock(time.Now, bootNow) }

// anchoredClock reads wall once, now, and from then on advances by the time boot counts. Lease
// deadlines are times of this clock, so they pass when their TTL has elapsed, as the holders, which
// time their leases on their own CLOCK_BOOTTIME, count it: a wall clock stepped forward while the
// store runs (an NTP step, an operator's date) no longer expires every lease at once, early, while
// their holders still believe they hold them (and a step back no longer keeps them for the step's
// length); a suspend of the machine counts, as it does for the holders. The stamps
// (created_at_ms, updated_at_ms, expires_at_ms, audit at_ms) therefore keep the wall clock's reading of
// the moment the store opened, and differ from the wall clock by any step taken since, until the next
// open. Only a step is ignored: NTP's gradual corrections change both clocks' rate alike.
//
// The wall clock is read before boot, so a reading never runs ahead of the wall clock's (it lags it
// by the instant between the two reads, until a step).
func anchoredClock(wall func() time.Time, boot func() boottime.Instant) func() time.Time {
	w0 := wall().Round(0) // wall time only: the readings are the anchor plus boot's count
	b0 := boot()
	return func() time.Time { return w0.Add(boot().Sub(b0)) }
}
