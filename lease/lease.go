package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// leaseSchema is the registered schema of a lease document (SPEC section 13).
const leaseSchema = wire.SchemaLease

// document is a keeppeek.lease.v1 document.
type document = wire.LeaseDocument

// A Lease is a claim, held by one worker, on a key of the state store: an entry with a TTL that the
// holder renews with compare-and-set puts until it releases it or loses it. Each renewal gives the
// entry a new revision; the current one is the fencing token (Guard), which Put and Delete send
// along so that the store refuses their writes once the lease is no longer the holder's.
//
// A Lease is safe for concurrent use. Once lost or released it stays so; claim again for a new one.
// Release must be called to stop the renewals of a lease that is still held.
type Lease struct {
	c           *client.Client
	o           Options
	claimedAtMs int64

	cancel context.CancelFunc // stops the renewal loop
	done   chan struct{}      // closed when the renewal loop returned
	lost   chan struct{}      // closed by lose

	epoch string // the store's epoch at the claim: the lease's revisions mean something only in it

	mu         sync.Mutex
	rev        uint64           // revision of the last claim or renewal known to be committed
	validUntil boottime.Instant // held until then: send time of that claim or renewal + TTL - margin
	stamp      int64            // renewed_at_ms of the last renewal attempt; each attempt's is unique
	unsure     []attempt        // renewals whose outcome is unknown (no reply), since the last known one
	inflight   chan struct{}    // non-nil while a renewal request is outstanding; closed when it ends
	err        error            // why the lease ended; nil while it runs
	gone       bool             // the store is known not to hold the lease's entry any more

	releaseOnce sync.Once
	releaseErr  error

	// Test hooks (export_test.go).
	paused      atomic.Bool  // skip renewals: a holder that stalls
	skipCheck   atomic.Bool  // send guarded writes without the local Held check
	dropReplies atomic.Int32 // treat that many successful renewals as if their reply was lost
}

// attempt is a renewal sent without a reply: it may or may not have committed.
type attempt struct {
	stamp int64            // its renewed_at_ms
	sent  boottime.Instant // when it was sent
}

// Claim creates the lease entry if no one holds it: a create-only put (expected_revision 0) of a
// keeppeek.lease.v1 document with the TTL. If the key exists it returns a *HeldError (ErrHeld); any
// other failure is the store's or the transport's error. On success the lease is renewed every
// o.RenewEvery until Release or loss. ctx bounds the claim only.
//
// A claim whose reply is lost may have committed: the key then looks held (by o.Holder) until the TTL
// runs out. A claim given up because ctx ended is followed to its reply, and deleted if it committed.
//
// The lease belongs to the store's epoch at the claim (SPEC section 4): a restore voids its revision,
// which a new holder's claim may reach again. Each renewal and each guarded write (Put, Delete,
// SaveOffset) checks the epoch first, with an info request: a changed epoch loses the lease (Lost,
// ErrRestored) without touching the store. A claim made within TTL of c first seeing a restore (see
// Client.SinceEpochChange) is refused with a *RestoreWaitError (ErrHeld) until the rest of that TTL
// has passed: a holder of the former epoch, whose lease the restored store may not hold, has stopped
// by then, as one that died has once its lease expires. A client that first connects after the
// restore cannot tell.
func Claim(ctx context.Context, c *client.Client, o Options) (*Lease, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errNilClient
	}
	return claim(ctx, c, o)
}

// claim is Claim with resolved options.
func claim(ctx context.Context, c *client.Client, o Options) (*Lease, error) {
	ictx, cancel := o.requestContext(ctx, c)
	info, err := c.Info(ictx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("lease: claim %s:%s: %w", o.Namespace, o.Key, err)
	}
	if since, ok := c.SinceEpochChange(info.Epoch); ok && since < o.TTL {
		// A restore this client saw: a holder of the former epoch may still act on its lease, which
		// the restored store may not hold (claimed after the backup), until it notices the restore
		// (its next renewal), or else its lease runs out, within a TTL of the store going down for
		// the restore, before this client saw it. That is waited out, as a claim after a gone
		// holder waits for its entry to expire: Claim refuses, so that a reconciler is not held up
		// (stopping what a lost lease covered, say) and claims again later; a Campaign waits.
		refusal := &RestoreWaitError{Namespace: o.Namespace, Key: o.Key, RetryAfter: o.TTL - since}
		if !o.boundClaims {
			return nil, refusal
		}
		if !wait(ctx, refusal.RetryAfter) {
			return nil, fmt.Errorf("lease: claim %s:%s: waiting out the former epoch's leases after a restore: %w", o.Namespace, o.Key, ctx.Err())
		}
	}
	sent, claimedAt := o.now(), time.Now().UnixMilli()
	doc, err := json.Marshal(document{Holder: o.Holder, ClaimedAtMs: claimedAt, Purpose: o.Purpose})
	if err != nil {
		return nil, fmt.Errorf("lease: encode document: %w", err)
	}
	create, ttl := int64(0), o.ttlMs()
	pctx, cancel := o.requestContext(ctx, c)
	e, err := claimPut(pctx, c, o, wire.PutRequest{Namespace: o.Namespace, Key: o.Key, Schema: leaseSchema,
		Document: doc, ExpectedRevision: &create, TTLMs: &ttl})
	cancel()
	if errors.Is(err, wire.ErrConflict) {
		gctx, cancel := o.requestContext(ctx, c)
		defer cancel()
		return nil, heldError(gctx, c, &o, info.Epoch, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: claim %s:%s: %w", o.Namespace, o.Key, err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	l := &Lease{
		c: c, o: o, claimedAtMs: claimedAt, epoch: info.Epoch,
		cancel: cancel, done: make(chan struct{}), lost: make(chan struct{}),
		rev: e.Revision, validUntil: sent.Add(o.TTL - o.margin()), stamp: claimedAt,
	}
	go l.run(loopCtx, sent)
	return l, nil
}

// requestContext returns the context of one request of a claim: ctx, and with o.boundClaims (a
// Campaign's claims) at most the client's request timeout. A campaign's ctx may last hours; a claim
// whose reply a killed state server lost would otherwise hold the standby until then, however soon the
// store was back.
func (o *Options) requestContext(ctx context.Context, c *client.Client) (context.Context, context.CancelFunc) {
	if !o.boundClaims {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.RequestTimeout())
}

// claimPut sends the claim's create-only put. If ctx ends before the reply, the put may still commit,
// and the key would look held by nobody running for a whole TTL: it is run through to its reply
// (client.Finish), and a claim that committed is deleted then, by its own revision.
//
// With o.settleClaims (an Elector's campaigns) that is done before claimPut returns, the put bounded
// by the client's request timeout rather than by ctx: Run returns only once no claim of it is out,
// and a worker that closes its connection right after Run would otherwise cut the delete off and
// leave the key held, by a process gone, for a TTL.
func claimPut(ctx context.Context, c *client.Client, o Options, req wire.PutRequest) (wire.Entry, error) {
	undo := func(e wire.Entry, err error) {
		if err != nil {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), o.TTL)
		defer cancel()
		rev := int64(e.Revision)
		if _, err := c.Delete(dctx, wire.DeleteRequest{Namespace: o.Namespace, Key: o.Key, ExpectedRevision: &rev}); err != nil &&
			!errors.Is(err, wire.ErrNotFound) && !errors.Is(err, wire.ErrConflict) {
			o.Logger.Warn("a claim given up committed, and could not be deleted: the key stays held until its TTL",
				"namespace", o.Namespace, "key", o.Key, "err", err)
		}
	}
	if !o.settleClaims {
		return client.Finish(ctx, c, func(pctx context.Context) (wire.Entry, error) { return c.Put(pctx, req) }, undo)
	}
	if err := ctx.Err(); err != nil {
		return wire.Entry{}, err // nothing sent
	}
	e, err := c.Put(context.WithoutCancel(ctx), req)
	if ctx.Err() != nil {
		undo(e, err)
		return wire.Entry{}, ctx.Err()
	}
	return e, err
}

// heldError builds the *HeldError of a refused claim, reading the current holder if it can.
func heldError(ctx context.Context, c *client.Client, o *Options, epoch string, conflict error) error {
	he := &HeldError{Namespace: o.Namespace, Key: o.Key, Err: conflict, epoch: epoch}
	var we *wire.Error
	if errors.As(conflict, &we) && we.CurrentRevision != nil {
		he.Revision = *we.CurrentRevision
	}
	if e, err := c.Get(ctx, o.Namespace, o.Key); err == nil && e.Schema == leaseSchema {
		var d document
		if json.Unmarshal(e.Document, &d) == nil {
			he.Holder, he.Revision = d.Holder, e.Revision
		}
	}
	return he
}

// Held reports whether the lease is known to be valid: it was neither lost nor released, and the
// last successful claim or renewal was sent less than TTL - RenewEvery/2 ago. The time runs on the
// local clock (one that counts a suspend of the machine: see the package doc) from when the request
// was sent, which is before the store committed it and started its TTL, so Held turns false at least
// RenewEvery/2 (the safety margin) before the store can expire the entry. Jobs check Held before each
// unit of work; the store's guard on Put and Delete is what actually keeps a former holder from
// writing.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldLocked()
}

func (l *Lease) heldLocked() bool { return l.err == nil && l.o.now().Before(l.validUntil) }

// Revision returns the revision of the lease entry as of its last successful claim or renewal: the
// fencing token. It changes with every renewal, and means something only in the store's epoch of the
// claim: once the lease is lost to a restore it is void, and a new holder's entry may reach it. Send
// Guard, not a guard of your own with Revision, to fence a write.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// voidRevision is the revision of the guard of a lease that is not held. No entry ever has it: the
// store keeps every put below 2^53-1, so that removing the namespace's entries always has revisions
// left (SPEC section 4), and 2^53-1 is the largest integer a guard may carry.
const voidRevision = wire.MaxSafeInteger

// Guard returns the guard to send with a write made on the lease's behalf: while the lease is Held,
// its key at Revision(), so that the store commits the write only while the lease entry is still at
// that revision. Once the lease is not Held (lost, released, or past its safety margin) it names a
// revision no entry has, so a write with it fails GUARD_FAILED: after a restore (SPEC section 4) the
// lease's revision is void and a new holder's claim may have reached it, and the store alone could
// not tell. A write sent with Guard directly skips the store epoch check that Put and Delete make
// first, so it is fenced against a restore only once the lease has noticed it: prefer those.
func (l *Lease) Guard() wire.Guard {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.heldLocked() {
		return wire.Guard{Key: l.o.Key, Revision: voidRevision}
	}
	return wire.Guard{Key: l.o.Key, Revision: int64(l.rev)}
}

// Namespace returns the lease's namespace.
func (l *Lease) Namespace() string { return l.o.Namespace }

// Key returns the lease's key.
func (l *Lease) Key() string { return l.o.Key }

// Holder returns the lease's holder.
func (l *Lease) Holder() string { return l.o.Holder }

// Lost returns a channel that is closed when the lease ends: a renewal was refused, renewals did not
// get through before the safety margin ran out (Held turned false), a guarded write showed the entry
// gone, the client's NATS connection was closed for good (errors.Is(err, nats.ErrConnectionClosed):
// no renewal or write can be sent any more; the entry stays in the store until its TTL), or Release
// was called. Err says which.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context returns a context derived from parent that ends, with the lease's Err as its cause, when the
// lease ends (at once if it has): work done as the holder (a media command, a long computation) stops
// waiting once it is no longer the holder's to do. Call cancel when the work is done. The store's guard
// still decides what a write does: a request already sent may be carried out.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	select {
	case <-l.lost:
		cancel(l.Err())
		return ctx, func() { cancel(context.Canceled) }
	default:
	}
	go func() {
		select {
		case <-l.lost:
			cancel(l.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Err returns nil while the lease runs, then why it ended: ErrReleased, or an error wrapping ErrLost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lose ends the lease with err (the first reason wins), closes Lost and stops the renewals. gone
// records that the store no longer holds the entry, so Release has nothing to delete.
func (l *Lease) lose(err error, gone bool) {
	l.mu.Lock()
	ended := l.loseLocked(err, gone)
	l.mu.Unlock()
	if ended {
		l.logLoss(err)
	}
}

// loseLocked is lose with l.mu held; it reports whether err ended the lease (the caller logs it).
func (l *Lease) loseLocked(err error, gone bool) bool {
	l.gone = l.gone || gone
	if l.err != nil {
		return false
	}
	l.err = err
	close(l.lost)
	l.cancel()
	return true
}

func (l *Lease) logLoss(err error) {
	if !errors.Is(err, ErrReleased) {
		l.o.Logger.Warn("lease lost", "namespace", l.o.Namespace, "key", l.o.Key, "holder", l.o.Holder, "err", err)
	}
}

// Release ends the lease: it stops the renewals, closes Lost, then deletes the entry with
// expected_revision = its revision, so that a standby can claim at once instead of waiting for the
// TTL. The delete is compare-and-set, so it removes the entry only while it is still this lease's:
// a lease that was lost by timing but not yet expired is deleted too; one that someone else has
// claimed is left alone. An entry already gone (NOT_FOUND, CONFLICT) is not an error. Later calls
// return the first call's result.
func (l *Lease) Release(ctx context.Context) error {
	l.releaseOnce.Do(func() {
		l.lose(ErrReleased, false)
		<-l.done // a renewal in flight is cut short; its outcome, if known, is recorded
		l.releaseErr = l.deleteEntry(ctx)
	})
	return l.releaseErr
}

// deleteEntry removes the lease entry if the store still holds it at the lease's revision.
func (l *Lease) deleteEntry(ctx context.Context) error {
	l.mu.Lock()
	rev, gone := l.rev, l.gone
	l.mu.Unlock()
	if gone {
		return nil
	}
	// After a restore the revision is void and may name a new holder's entry: leave it alone.
	switch check, err := l.checkEpoch(ctx); check {
	case epochChanged:
		return nil
	case epochUnknown:
		return fmt.Errorf("lease: release %s:%s: the store's epoch: %w", l.o.Namespace, l.o.Key, err)
	}
	for range 2 {
		expected := int64(rev)
		_, err := l.c.Delete(ctx, wire.DeleteRequest{Namespace: l.o.Namespace, Key: l.o.Key, ExpectedRevision: &expected})
		switch {
		case err == nil, errors.Is(err, wire.ErrNotFound):
			return nil
		case !errors.Is(err, wire.ErrConflict):
			return fmt.Errorf("lease: release %s:%s: %w", l.o.Namespace, l.o.Key, err)
		}
		// A renewal without a reply may have moved the entry on: delete that revision instead.
		r, v := l.resolve(ctx)
		switch v {
		case notOurs:
			return nil
		case unknown:
			// The entry may still be ours: say so, or a standby would wait out the TTL unawares.
			return fmt.Errorf("lease: release %s:%s: the entry moved on and could not be read to tell whose it is", l.o.Namespace, l.o.Key)
		}
		rev = r.rev
	}
	return nil
}

// run renews the lease, first RenewEvery after the claim was sent, until it is lost or released.
func (l *Lease) run(ctx context.Context, claimSent boottime.Instant) {
	defer close(l.done)
	// A connection closed for good sends no renewal and no write any more: the lease ends as soon as
	// it closes, not when the safety margin runs out (up to a TTL later), so that a job stops, and an
	// Elector's Run returns, while nothing it does can reach the store.
	nc := l.c.Conn()
	closedCh := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closedCh)
	if nc.IsClosed() {
		l.lose(errConnClosed, false)
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	next := claimSent.Add(l.o.RenewEvery)
	retry := max(l.o.RenewEvery/4, time.Millisecond)
	// The longest the loop sleeps. Go's timers run on the monotonic clock, which stands still
	// through a suspend of the machine, while the lease's clock does not: a loop asleep until its
	// next renewal would end a lease that a suspend left not Held (and cancel Context and an
	// Elector's job) only up to RenewEvery after the resume. Woken this often, it ends it soon after.
	poll := max(l.o.margin()/4, 10*time.Millisecond)
	for {
		l.mu.Lock()
		deadline := l.validUntil
		l.mu.Unlock()
		if !next.Before(deadline) && l.o.onLastWait != nil {
			l.o.onLastWait()
		}
		sleep := min(earlier(next, deadline).Sub(l.o.now()), poll)
		t.Reset(sleep)
		if l.o.onSleep != nil {
			l.o.onSleep(sleep)
		}
		select {
		case <-ctx.Done():
			return
		case <-closedCh:
			l.lose(errConnClosed, false)
			return
		case <-t.C:
		}
		// The deadline is read again: a guarded write may have moved it on while the loop waited
		// (it found one of the lease's unanswered renewals committed). It is checked, and the lease
		// ended, under the lock that moves it.
		l.mu.Lock()
		now := l.o.now()
		deadline = l.validUntil
		expired, ended := !now.Before(deadline), false
		var err error
		if expired {
			err = fmt.Errorf("%w: not renewed within TTL - RenewEvery/2 (%v)", ErrLost, l.o.TTL-l.o.margin())
			ended = l.loseLocked(err, false)
		}
		l.mu.Unlock()
		if expired {
			if ended {
				l.logLoss(err)
			}
			return
		}
		if now.Before(next) {
			continue
		}
		if l.paused.Load() {
			next = deadline
			continue
		}
		switch sent, res := l.renew(ctx); res {
		case renewed:
			next = sent.Add(l.o.RenewEvery)
		case retryLater:
			next = l.o.now().Add(retry)
		case stopped:
			return
		}
	}
}

// errConnClosed ends a lease whose NATS connection was closed for good.
var errConnClosed = fmt.Errorf("%w: its NATS connection is closed, no renewal can be sent: %w", ErrLost, nats.ErrConnectionClosed)

func earlier(a, b boottime.Instant) boottime.Instant {
	if a.Before(b) {
		return a
	}
	return b
}

// renewal outcomes
type outcome int

const (
	renewed    outcome = iota // committed: the lease has a new revision and deadline
	retryLater                // unknown or failed for now: try again before the deadline
	stopped                   // lost, or released meanwhile
)

// renew sends one CAS renewal and applies its outcome. It returns when the renewal was sent.
func (l *Lease) renew(ctx context.Context) (boottime.Instant, outcome) {
	if l.o.onRenew != nil {
		l.o.onRenew()
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return boottime.Instant{}, stopped
	}
	rev, deadline := l.rev, l.validUntil
	l.stamp = max(time.Now().UnixMilli(), l.stamp+1)
	stamp := l.stamp
	inflight := make(chan struct{})
	l.inflight = inflight
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inflight = nil
		l.mu.Unlock()
		close(inflight)
	}()

	doc, err := json.Marshal(l.document(stamp))
	if err != nil {
		l.lose(fmt.Errorf("%w: encode document: %w", ErrLost, err), false)
		return boottime.Instant{}, stopped
	}
	sent := l.o.now()
	rctx, cancel := context.WithTimeout(ctx, earlier(deadline, sent.Add(l.o.RenewEvery)).Sub(sent))
	switch check, _ := l.checkEpoch(rctx); check {
	case epochChanged:
		cancel()
		return sent, stopped
	case epochUnknown:
		cancel()
		if ctx.Err() != nil {
			return sent, stopped
		}
		return sent, retryLater
	}
	expected, ttl := int64(rev), l.o.ttlMs()
	e, err := l.c.Put(rctx, wire.PutRequest{Namespace: l.o.Namespace, Key: l.o.Key, Schema: leaseSchema,
		Document: doc, ExpectedRevision: &expected, TTLMs: &ttl})
	cancel()
	if l.o.onRenewReply != nil {
		l.o.onRenewReply()
	}
	if err == nil && l.dropReplies.Load() > 0 && l.dropReplies.Add(-1) >= 0 {
		err = errors.New("lease test: renewal reply dropped")
	}

	switch {
	case err == nil:
		l.adopt(e.Revision, sent)
		return sent, renewed
	case errors.Is(err, wire.ErrConflict):
		// Someone else's entry, or none; unless it is one of our renewals that got no reply.
		rctx, cancel := context.WithTimeout(ctx, deadline.Sub(l.o.now()))
		r, v := l.resolve(rctx)
		cancel()
		switch v {
		case ours:
			l.adopt(r.rev, r.sent)
			return r.sent, renewed
		case unknown:
			return sent, retryLater
		}
		// A guarded write may have adopted one of our unanswered renewals while this one was out
		// (movedOn): the entry moved on to the lease's own newer revision, which is why this renewal,
		// sent with the one before, was refused, and resolve cannot tell, as the adoption cleared the
		// unanswered renewals it looks for. Renew again with it. Checked under the lock that ends the
		// lease, which such an adoption takes too.
		lost := fmt.Errorf("%w: renewal refused: %w", ErrLost, err)
		l.mu.Lock()
		if l.rev != rev {
			l.mu.Unlock()
			return sent, retryLater
		}
		ended := l.loseLocked(lost, true)
		l.mu.Unlock()
		if ended {
			l.logLoss(lost)
		}
		return sent, stopped
	case permanent(err):
		// Refused for good (schema, permission, ...): nothing was written.
		l.lose(fmt.Errorf("%w: renewal refused: %w", ErrLost, err), false)
		return sent, stopped
	}
	// No answer, or a transient refusal: the renewal may have committed (a timeout) or not.
	if wire.CodeOf(err) == "" {
		l.mu.Lock()
		l.unsure = append(l.unsure, attempt{stamp: stamp, sent: sent})
		l.mu.Unlock()
	}
	if ctx.Err() != nil {
		return sent, stopped
	}
	l.o.Logger.Warn("lease renewal failed; retrying", "namespace", l.o.Namespace, "key", l.o.Key, "err", err)
	return sent, retryLater
}

type epochCheck int

const (
	epochSame epochCheck = iota
	epochChanged
	epochUnknown // the store did not answer
)

// checkEpoch asks the store for its epoch. A changed epoch (a restore) loses the lease without
// touching the store: its revision is void, and a delete or renewal with it could hit a new holder's
// entry.
func (l *Lease) checkEpoch(ctx context.Context) (epochCheck, error) {
	info, err := l.c.Info(ctx)
	if err != nil {
		return epochUnknown, err
	}
	if info.Epoch == "" {
		// A store that is not served has no epoch: it says nothing of a restore.
		return epochUnknown, wire.Errorf(wire.CodeUnavailable, "the store reports no epoch (not served)")
	}
	if info.Epoch != l.epoch {
		l.lose(fmt.Errorf("%w: %w (epoch %s, claimed in %s): its revision is void", ErrLost, ErrRestored, info.Epoch, l.epoch), true)
		return epochChanged, nil
	}
	return epochSame, nil
}

// permanent reports whether the store refused a request for a reason that retrying cannot change:
// the request itself (its shape, schema, size or TTL) or the principal's permission is wrong.
func permanent(err error) bool {
	switch wire.CodeOf(err) {
	case wire.CodeInvalidArgument, wire.CodePermissionDenied, wire.CodeSchemaInvalid, wire.CodeTTLInvalid,
		wire.CodeTooLarge, wire.CodeWatchTooBroad:
		return true
	}
	return false
}

// adopt records a committed renewal: its revision and the deadline counted from its send time. A
// revision below the lease's is one it has moved past already (a guarded write and the renewal loop
// may both resolve the same unanswered renewal): the lease keeps its newer one.
func (l *Lease) adopt(rev uint64, sent boottime.Instant) { l.adoptIf(rev, sent, false) }

// adoptIf is adopt; with running, only while the lease has not ended: Release, once it ended the
// lease, resolves unanswered renewals itself, and a resolution adopted behind its back would leave it
// deleting an old revision with nothing left to tell it the entry moved on.
func (l *Lease) adoptIf(rev uint64, sent boottime.Instant, running bool) {
	l.mu.Lock()
	if rev < l.rev || (running && l.err != nil) {
		l.mu.Unlock()
		return
	}
	l.rev = rev
	if v := sent.Add(l.o.TTL - l.o.margin()); v.After(l.validUntil) {
		l.validUntil = v
	}
	l.unsure = nil
	l.mu.Unlock()
	if l.o.onRenewed != nil {
		l.o.onRenewed(rev)
	}
}

// document is the lease document of a renewal stamped renewedAtMs.
func (l *Lease) document(renewedAtMs int64) document {
	return document{Holder: l.o.Holder, ClaimedAtMs: l.claimedAtMs, RenewedAtMs: renewedAtMs, Purpose: l.o.Purpose}
}

// verdict of resolve
type verdict int

const (
	notOurs verdict = iota // the entry is someone else's, or missing
	ours                   // the entry is one of our unanswered renewals
	unknown                // could not tell (the read failed)
)

// resolved is an unanswered renewal found committed.
type resolved struct {
	rev  uint64
	sent boottime.Instant
}

// resolve reads the entry after a CAS on the lease's revision failed and tells whether it is one of
// the lease's own renewals that got no reply: same owner, holder and claim time, and the
// renewed_at_ms of one of them (each renewal attempt has its own).
func (l *Lease) resolve(ctx context.Context) (resolved, verdict) {
	l.mu.Lock()
	unsure := l.unsure
	l.mu.Unlock()
	if len(unsure) == 0 {
		return resolved{}, notOurs
	}
	e, err := l.c.Get(ctx, l.o.Namespace, l.o.Key)
	switch {
	case errors.Is(err, wire.ErrNotFound):
		return resolved{}, notOurs
	case err != nil:
		return resolved{}, unknown
	}
	var d document
	if e.Owner != l.c.Principal() || e.Schema != leaseSchema || json.Unmarshal(e.Document, &d) != nil ||
		d.Holder != l.o.Holder || d.ClaimedAtMs != l.claimedAtMs {
		return resolved{}, notOurs
	}
	for _, a := range unsure {
		if a.stamp == d.RenewedAtMs {
			return resolved{rev: e.Revision, sent: a.sent}, ours
		}
	}
	return resolved{}, notOurs
}
