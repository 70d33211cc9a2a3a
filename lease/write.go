package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/keeppeek/coordination/store/wire"
)

// Put writes an entry on the lease's behalf: req.Guard is set to the lease's key and current
// revision, so the store commits the write only while the lease entry is still at that revision.
// req.Namespace may be left empty; any other namespace than the lease's is refused (a guard names a
// key of the written namespace). Everything else of req (ExpectedRevision, TTLMs) is sent as given.
//
// A lease that is not Held is refused locally with ErrNotHeld. If the store answers GUARD_FAILED
// because a renewal moved the revision while the write was in flight, or a renewal whose reply was
// lost had moved it (the lease reads its entry to tell), the lease is still held at a new revision,
// and Put retries once with the new guard. Any other GUARD_FAILED is returned (it matches
// wire.ErrGuardFailed), and when no renewal of the lease can explain it the lease is lost: Lost is
// closed.
func (l *Lease) Put(ctx context.Context, req wire.PutRequest) (wire.Entry, error) {
	if err := l.sameNamespace(&req.Namespace); err != nil {
		return wire.Entry{}, err
	}
	var stored wire.Entry
	err := l.guarded(ctx, func(g wire.Guard) error {
		req.Guard = &g
		var err error
		stored, err = l.c.Put(ctx, req)
		return err
	})
	return stored, err
}

// Delete removes an entry on the lease's behalf, guarded like Put, and returns the namespace revision
// of the delete.
func (l *Lease) Delete(ctx context.Context, req wire.DeleteRequest) (uint64, error) {
	if err := l.sameNamespace(&req.Namespace); err != nil {
		return 0, err
	}
	var rev uint64
	err := l.guarded(ctx, func(g wire.Guard) error {
		req.Guard = &g
		var err error
		rev, err = l.c.Delete(ctx, req)
		return err
	})
	return rev, err
}

// sameNamespace fills in an empty namespace and refuses another than the lease's.
func (l *Lease) sameNamespace(ns *string) error {
	if *ns == "" {
		*ns = l.o.Namespace
	}
	if *ns != l.o.Namespace {
		return wire.Errorf(wire.CodeInvalidArgument, "lease %s:%s cannot guard a write in namespace %s", l.o.Namespace, l.o.Key, *ns)
	}
	return nil
}

// guarded runs write with the lease's guard, and once more if a renewal explains a GUARD_FAILED.
// The store's epoch is checked first (one info request): the server may have been stopped and
// restored since the claim, voiding the revision the guard names, which a new holder's claim may have
// reached again; the store's guard alone cannot tell.
func (l *Lease) guarded(ctx context.Context, write func(wire.Guard) error) error {
	if _, err := l.writeGuard(); err != nil {
		return err // not held: no request at all
	}
	switch check, err := l.checkEpoch(ctx); check {
	case epochChanged:
		return fmt.Errorf("%w: %s:%s: %w", ErrNotHeld, l.o.Namespace, l.o.Key, ErrRestored)
	case epochUnknown:
		return fmt.Errorf("lease %s:%s: the store's epoch: %w", l.o.Namespace, l.o.Key, err)
	}
	g, err := l.writeGuard()
	if err != nil {
		return err
	}
	err = write(g)
	if !errors.Is(err, wire.ErrGuardFailed) || !l.movedOn(ctx, g, err) {
		return err
	}
	if g, err = l.writeGuard(); err != nil {
		return err
	}
	// Once only: a retry refused too is returned, but first judged as the first refusal was, so
	// that one no renewal explains (the entry gone meanwhile) ends the lease now, not at the next
	// renewal, while Held would still say true.
	if err = write(g); errors.Is(err, wire.ErrGuardFailed) {
		l.movedOn(ctx, g, err)
	}
	return err
}

// writeGuard returns the guard for a write, or ErrNotHeld.
func (l *Lease) writeGuard() (wire.Guard, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.heldLocked() && !l.skipCheck.Load() {
		return wire.Guard{}, fmt.Errorf("%w: %s:%s", ErrNotHeld, l.o.Namespace, l.o.Key)
	}
	return wire.Guard{Key: l.o.Key, Revision: int64(l.rev)}, nil
}

// movedOn decides, after the store refused a write guarded by g, whether a renewal moved the lease
// to a new revision meanwhile (true: write again). It waits for a renewal in flight to end. When none
// of the lease's renewals can explain the refusal, the lease entry is gone: the lease is lost.
func (l *Lease) movedOn(ctx context.Context, g wire.Guard, refusal error) bool {
	l.mu.Lock()
	inflight := l.inflight
	l.mu.Unlock()
	if inflight != nil {
		if l.o.onGuardWait != nil {
			l.o.onGuardWait()
		}
		select {
		case <-inflight:
		case <-ctx.Done():
			return false
		}
	}
	l.mu.Lock()
	switch {
	case l.err != nil:
		l.mu.Unlock()
		return false
	case uint64(g.Revision) != l.rev:
		retry := l.heldLocked()
		l.mu.Unlock()
		return retry
	case len(l.unsure) > 0:
		// A renewal without a reply may have committed: read the entry, as the next renewal would,
		// and write again with its revision if it is the lease's own. A write refused for it would
		// tell a holder that keeps its lease that it was fenced off.
		l.mu.Unlock()
		r, v := l.resolve(ctx)
		if v != ours {
			return false // someone else's, or unknown: the next renewal finds out
		}
		if l.o.onResolved != nil {
			l.o.onResolved()
		}
		l.adoptIf(r.rev, r.sent, true)
		l.mu.Lock()
		retry := l.heldLocked() && uint64(g.Revision) != l.rev
		l.mu.Unlock()
		return retry
	}
	err := fmt.Errorf("%w: a write guarded by revision %d was refused: %w", ErrLost, g.Revision, refusal)
	ended := l.loseLocked(err, true)
	l.mu.Unlock()
	if ended {
		l.logLoss(err)
	}
	return false
}
