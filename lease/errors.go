package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// ErrHeld is returned by Claim when someone already holds the lease. The error is a *HeldError
// wrapping the store's CONFLICT, so errors.Is(err, wire.ErrConflict) holds as well.
var ErrHeld = errors.New("lease: held by another holder")

// RestoreWaitError is Claim's refusal, made without a write, within a TTL of its client first seeing
// a restore (a new epoch, SPEC section 4; see client.Client.SinceEpochChange): a holder of the former
// epoch may still act on the lease, which the restored store may not hold at all (claimed after the
// backup), until it notices the restore at its next renewal, or its lease runs out, by RetryAfter at
// the latest. It wraps ErrHeld: the key is to be treated as held until then, and claimed again after
// RetryAfter (nothing in the store changes to say so). Campaign waits it out by itself.
type RestoreWaitError struct {
	Namespace, Key string
	RetryAfter     time.Duration
}

func (e *RestoreWaitError) Error() string {
	return fmt.Sprintf("lease: %s:%s may still be held by a holder from before the store was restored: claim again in %v",
		e.Namespace, e.Key, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *RestoreWaitError) Unwrap() error { return ErrHeld }

// ErrLost is wrapped by Lease.Err once the lease was lost: a renewal was refused (CONFLICT: someone
// else's entry, or none), a guarded write proved the entry gone, renewals did not get through
// before the safety margin, or the client's NATS connection was closed for good (with
// nats.ErrConnectionClosed).
var ErrLost = errors.New("lease: lost")

// ErrRestored is wrapped by Lease.Err, with ErrLost, when the store was restored since the claim (a
// new epoch, SPEC section 4): the lease's revision is void and the store is left alone.
var ErrRestored = errors.New("the store was restored")

// ErrReleased is Lease.Err after Release (unless the lease had been lost before).
var ErrReleased = errors.New("lease: released")

// ErrNotHeld is returned by a write on the lease's behalf (Put, Delete, SaveOffset) that was refused
// locally because the lease is no longer known to be held. It also matches wire.ErrGuardFailed: the
// local check answers early the question the store's guard asks, so callers can test
// errors.Is(err, wire.ErrGuardFailed) alone to learn that a write was fenced off, whichever side
// refused it. wire.CodeOf tells them apart (it is "" for the local refusal).
var ErrNotHeld error = notHeldError{}

type notHeldError struct{}

func (notHeldError) Error() string { return "lease: not held (write refused locally)" }

// Is makes errors.Is(ErrNotHeld, wire.ErrGuardFailed) true. A nil *wire.Error target carries no
// code and matches nothing.
func (notHeldError) Is(target error) bool {
	var w *wire.Error
	return errors.As(target, &w) && w != nil && w.Code == wire.CodeGuardFailed
}

// HeldError is the error of a claim that found the lease held.
type HeldError struct {
	// Namespace and Key name the lease.
	Namespace, Key string
	// Holder is the current holder as read right after the refusal; empty if it could not be read
	// (the entry expired meanwhile, or is not a lease document).
	Holder string
	// Revision is the revision of the entry that holds the lease.
	Revision uint64
	// Err is the store's CONFLICT.
	Err error

	epoch string // the store's epoch as read before the refused claim: Revision's, unless a restore came between
}

// Error implements error.
func (e *HeldError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "unknown holder"
	}
	return fmt.Sprintf("lease: %s:%s is held by %s at revision %d", e.Namespace, e.Key, holder, e.Revision)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Unwrap returns the store's CONFLICT.
func (e *HeldError) Unwrap() error { return e.Err }
