package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keeppeek/coordination/store/client"
)

// Campaign retry backoff after a failure that may pass (no state server, a timeout), and the pause
// after a term: the first wait is minBackoff, each further one twice as long, up to the TTL.
const minBackoff = 100 * time.Millisecond

// ElectorOptions configure an Elector: the lease every replica campaigns for (OffsetKey, if set,
// names the leader's resume offset entry), and what the leader does.
type ElectorOptions struct {
	Options
	// OnStarted runs the leader's work; required. Its ctx is cancelled when the lease is lost (as
	// Held turns false, a safety margin before the store can expire the entry and a standby can take
	// over) or when Run's ctx ends. It must return promptly once ctx is done: the next term waits for
	// it. l is this term's lease; write through l.Put, l.Delete and l.SaveOffset so that a former
	// leader's late writes are refused.
	OnStarted func(ctx context.Context, l *Lease)
	// OnStopped, optional, is called after OnStarted returned, before the lease is released.
	OnStopped func()
}

// An Elector runs a singleton job on one replica at a time: each replica campaigns for the same
// lease, and the holder runs OnStarted until it loses the lease or is told to stop, then campaigns
// again.
type Elector struct {
	c       *client.Client
	o       ElectorOptions
	running atomic.Bool
	current atomic.Pointer[Lease] // the lease of the running term, nil between terms
	terms   atomic.Uint64         // terms begun (OnStarted called)
}

// NewElector validates o and returns an Elector; Run starts it.
func NewElector(c *client.Client, o ElectorOptions) (*Elector, error) {
	resolved, err := o.Options.resolve()
	if err != nil {
		return nil, err
	}
	if o.OnStarted == nil {
		return nil, errors.New("lease: ElectorOptions.OnStarted is required")
	}
	if c == nil {
		return nil, errNilClient
	}
	o.Options = resolved
	o.settleClaims = true // Run returns with no claim of it out (claimPut)
	return &Elector{c: c, o: o}, nil
}

// Leading reports whether this elector's OnStarted is running with a lease that is Held.
func (e *Elector) Leading() bool {
	l := e.current.Load()
	return l != nil && l.Held()
}

// Run campaigns and leads, term after term, until ctx ends; then it returns nil, after the running
// term (if any) has stopped and released its lease, and a claim that was on the wire has been
// answered (and deleted, if it committed): a process may close its connection once Run returned.
// Each term: Campaign; OnStarted with a ctx cancelled on loss of the lease or end of ctx; once it
// returns, OnStopped; then Release (which deletes the entry only if the store still holds it at this
// term's revision, so a standby takes over without waiting for the TTL); then a pause before the
// next campaign (100 ms, doubling while terms keep ending within a TTL, up to the TTL). A campaign
// that fails for a reason that may pass is retried with backoff; one the store refuses for good
// (permission, schema, invalid options) ends Run with that error, and so does a closed NATS
// connection. Run must not be called again while it runs.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("lease: Elector.Run is already running")
	}
	defer e.running.Store(false)
	backoff, pause := minBackoff, minBackoff
	for ctx.Err() == nil {
		l, err := Campaign(ctx, e.c, e.o.Options)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if permanent(err) {
				return err
			}
			if e.c.Conn().IsClosed() {
				return fmt.Errorf("lease: elector stops, its NATS connection is closed: %w", err)
			}
			e.o.Logger.Warn("lease campaign failed; retrying", "namespace", e.o.Namespace, "key", e.o.Key,
				"err", err, "backoff", backoff)
			if !wait(ctx, backoff) {
				break
			}
			backoff = min(2*backoff, e.o.TTL)
			continue
		}
		backoff = minBackoff
		began := time.Now()
		e.lead(ctx, l)
		// A term ended with Run's ctx alive: the job returned, or the lease was lost. Pause before
		// campaigning again, so that a job that fails at once does not claim and release the lease in
		// a tight loop of store writes, and a standby gets its turn. Terms that keep ending within a
		// TTL double the pause, up to the TTL; a longer term resets it.
		if time.Since(began) >= e.o.TTL {
			pause = minBackoff
		}
		if !wait(ctx, pause) {
			break
		}
		pause = min(2*pause, e.o.TTL)
	}
	return nil
}

// lead runs one term on l.
func (e *Elector) lead(ctx context.Context, l *Lease) {
	defer e.release(ctx, l)
	if ctx.Err() != nil || !l.Held() { // a claim answered too late to be of use: no term
		return
	}
	jobCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-l.Lost():
			cancel()
		case <-jobCtx.Done():
		}
	})
	e.current.Store(l)
	e.terms.Add(1)
	e.o.OnStarted(jobCtx, l)
	e.current.Store(nil)
	cancel()
	wg.Wait()
	if e.o.OnStopped != nil {
		e.o.OnStopped()
	}
}

// release releases l within one TTL, even when ctx has ended: after that the store expires it anyway.
func (e *Elector) release(ctx context.Context, l *Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.TTL)
	defer cancel()
	if err := l.Release(rctx); err != nil {
		e.o.Logger.Warn("lease release failed; it expires with its TTL", "namespace", e.o.Namespace,
			"key", e.o.Key, "err", err)
	}
}

// wait waits d; false when ctx ends first.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
