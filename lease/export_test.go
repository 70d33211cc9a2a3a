package lease

import (
	"sync/atomic"
	"time"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/client"
)

// Test hooks for the external tests of this package.

// PauseRenewals stops l's renewals, as if its holder stalled: l stays as it is until Held turns false.
func PauseRenewals(l *Lease) { l.paused.Store(true) }

// SkipLocalCheck makes l's guarded writes go to the store even when l is not Held, as from a holder
// that paused between its check and its write.
func SkipLocalCheck(l *Lease) { l.skipCheck.Store(true) }

// DropRenewalReplies makes the next n renewals of l that commit look as if their reply was lost.
func DropRenewalReplies(l *Lease, n int32) { l.dropReplies.Store(n) }

// TestHooks are callbacks a test can install in Options.
type TestHooks struct {
	Renewed    func(rev uint64)    // after each successful renewal, with the new revision
	RenewReply func()              // when a renewal's reply is in, before it is applied
	GuardWait  func()              // when a refused guarded write waits for a renewal in flight
	Wait       func()              // Campaign: each time it starts waiting for the key to be free
	Held       func()              // Campaign: after each claim refused because the lease is held
	LastWait   func()              // renewal loop: each time it waits with no renewal due before the deadline
	Sleep      func(time.Duration) // renewal loop: each time its timer is armed, with how long for
	Claim      func()              // Campaign: before each claim made once the key looked free
	HeldWait   func(*client.Cache) // Campaign: before it waits for its cache to reach a refusal's revision
	Renew      func()              // renewal loop: before each renewal reads the lease's revision
	Resolved   func()              // a refused guarded write found an unanswered renewal its own, before adopting it
}

// WithHooks returns o with h installed.
func WithHooks(o Options, h TestHooks) Options {
	o.onRenewed, o.onRenewReply, o.onGuardWait, o.onWait, o.onHeld = h.Renewed, h.RenewReply, h.GuardWait, h.Wait, h.Held
	o.onLastWait, o.onClaim, o.onHeldWait = h.LastWait, h.Claim, h.HeldWait
	o.onRenew, o.onResolved, o.onSleep = h.Renew, h.Resolved, h.Sleep
	return o
}

// Resolve exposes option validation.
func Resolve(o Options) (Options, error) { return o.resolve() }

// Margin is the safety margin of resolved options.
func Margin(o Options) time.Duration { return o.margin() }

// WithSuspendableClock returns o timed on a clock that suspend moves forward by d at once, as a
// suspend of the machine moves CLOCK_BOOTTIME while Go's monotonic clock, and so every timer, stands
// still.
func WithSuspendableClock(o Options) (Options, func(d time.Duration)) {
	var skipped atomic.Int64
	o.clock = func() boottime.Instant { return boottime.Now().Add(time.Duration(skipped.Load())) }
	return o, func(d time.Duration) { skipped.Add(int64(d)) }
}
