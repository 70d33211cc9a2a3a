package lease

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Campaign claims the lease, waiting as a standby while someone else holds it. It tries Claim; if
// the lease is held, it watches the key (a client.Cache on the key as prefix) and claims again, with
// a create-only put, as soon as the key is gone: deleted, expired, or absent from a fresh snapshot.
// Several standbys may race for it; the store lets exactly one create win, and the others keep
// waiting. The watch is checked every o.RenewEvery (an ack, when no update came meanwhile): a state
// server restarted behind a NATS server that stayed up has forgotten the watch and will never send it
// the release or expiry, and holds the standby back about two RenewEvery, not a TTL or more. Each
// request of a claim is bounded by the client's request timeout, whatever ctx's deadline: a reply
// lost to a killed state server fails that claim (an error, as any failed claim) instead of holding
// the campaign until ctx ends.
//
// It returns the lease once claimed, the error of a claim that failed other than with ErrHeld, an
// error of its watch (client.ErrCacheClosed once the connection closed for good, the store's refusal
// to watch again), or ctx's error; an Elector campaigns again after any of them but a refusal for
// good. A restore (a new epoch, SPEC section 4) is no error: the standby's watch follows the restored
// store, and it claims there as soon as the key is free in it.
//
// The watch's prefix is the lease key, so it also sees the keys that extend it
// ("leases/a" sees "leases/a2"); more than 64 of those make the watch WATCH_TOO_BROAD.
// A holder that restarts with the same Holder still waits for its old entry to expire.
func Campaign(ctx context.Context, c *client.Client, o Options) (*Lease, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errNilClient
	}
	o.boundClaims = true
	l, err := claim(ctx, c, o)
	if !errors.Is(err, ErrHeld) {
		return l, err
	}
	if o.onHeld != nil {
		o.onHeld()
	}
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	// The cache checks that its watch is still live every RenewEvery rather than every 5 s: a state
	// server that restarted behind a NATS server that stayed up (--nats-url) has forgotten the watch
	// and tells the standby nothing, and the release or expiry it then never sends would otherwise
	// reach the standby only when the default check, 5 to 10 s later, found the watch gone: past the
	// TTL a failover should take. While the holder renews, the standby acks each renewal's update, and
	// the check sends nothing more. The interval also bounds the cache's waits between re-watch
	// attempts: a standby cut off by a parted NATS route (its connection up, no status change when the
	// route is back) follows again, and sees a lease released meanwhile, within about a RenewEvery of
	// the route's return, not MaxResyncBackoff (5 s) later.
	cache, err := c.NewCache(ctx, client.CacheOptions{Namespace: o.Namespace, KeyPrefix: o.Key, Logger: o.Logger,
		CheckInterval: o.RenewEvery,
		Handlers: client.Handlers{
			OnPut:    func(wire.Entry) { poke() },
			OnDelete: func(string, uint64) { poke() },
			OnExpire: func(string, uint64) { poke() },
			OnResync: func([]wire.Entry, uint64) { poke() },
		}})
	if err != nil {
		return nil, fmt.Errorf("lease: watch %s:%s: %w", o.Namespace, o.Key, err)
	}
	defer func() { _ = cache.Close() }()
	stall := watchStall(ctx, cache)
	defer func() { stall.stop() }() // the one running at return: a recovered cache gets a new one
	for {
		// The cache must have seen the entry that refused the claim, or an absent key could be one it
		// has not caught up with yet.
		var held *HeldError
		if errors.As(err, &held) {
			if o.onHeldWait != nil {
				o.onHeldWait(cache)
			}
			// The refusal's revision is of the epoch the claim was made in: the cache may have moved
			// to a restored store's since, where that revision may never come (ErrEpochChanged then).
			epoch := held.epoch
			if epoch == "" {
				epoch = cache.Epoch()
			}
			if werr := cache.WaitForRevisionIn(ctx, epoch, held.Revision); werr != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if errors.Is(werr, client.ErrEpochChanged) {
					// The store was restored between the claim and the wait (the cache resyncs to
					// it): the refusal was the old epoch's; claim again in the new one.
					var l *Lease
					if l, err = claim(ctx, c, o); !errors.Is(err, ErrHeld) {
						return l, err
					}
					continue
				}
				return nil, fmt.Errorf("lease: watch %s:%s: %w", o.Namespace, o.Key, werr)
			}
		}
		if _, ok := cache.Get(o.Key); ok {
			if o.onWait != nil {
				o.onWait()
			}
			for ok {
				select {
				case <-changed:
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-cache.Done(): // its connection closed: nothing will change any more
					return nil, fmt.Errorf("lease: watch %s:%s: %w", o.Namespace, o.Key, client.ErrCacheClosed)
				case werr := <-stall.ch:
					// The store refuses to watch again: the cached entry goes stale, and a release or
					// expiry would never be seen. The key may be free already; if not, say why
					// Campaign cannot wait for it.
					if cache.Err() == nil { // it recovered meanwhile
						stall.stop()
						stall = watchStall(ctx, cache)
						break
					}
					if l, err := claim(ctx, c, o); !errors.Is(err, ErrHeld) {
						return l, err
					}
					return nil, fmt.Errorf("lease: watch %s:%s: %w", o.Namespace, o.Key, werr)
				}
				_, ok = cache.Get(o.Key)
			}
		}
		if o.onClaim != nil {
			o.onClaim()
		}
		if l, err = claim(ctx, c, o); !errors.Is(err, ErrHeld) {
			return l, err
		}
		if o.onHeld != nil {
			o.onHeld()
		}
	}
}

// stallWatch tells when a Campaign's cache stops following because the store refuses to watch again
// (Cache.Err): its handlers then fall silent, and nothing else would wake the standby.
type stallWatch struct {
	ch     chan error // receives the refusal, once
	cancel context.CancelFunc
	done   chan struct{}
}

// watchStall starts a stallWatch on cache until ctx ends or stop is called.
func watchStall(ctx context.Context, cache *client.Cache) *stallWatch {
	wctx, cancel := context.WithCancel(ctx)
	s := &stallWatch{ch: make(chan error, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			// No revision reaches MaxUint64: the wait ends only when the cache cannot watch again,
			// moves to a new epoch (a restore: its snapshot reaches OnResync, so wait on), is closed
			// (Campaign sees Done), or wctx ends.
			err := cache.WaitForRevision(wctx, math.MaxUint64)
			switch {
			case errors.Is(err, client.ErrEpochChanged):
				continue
			case wctx.Err() != nil, errors.Is(err, client.ErrCacheClosed):
			default:
				s.ch <- err
			}
			return
		}
	}()
	return s
}

// stop ends the stallWatch and waits for its goroutine.
func (s *stallWatch) stop() {
	s.cancel()
	<-s.done
}
