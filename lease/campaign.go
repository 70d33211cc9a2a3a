package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Campaign claims the lease, waiting as a standby while someone else holds it. It tries Claim; if
// the lease is held, it watches the key (a client.Cache on the key as prefix) and claims again, with
// a create-only put, as soon as the key is gone: deleted, expired, or absent from a fresh snapshot.
// Several standbys may race for it; the store lets exactly one create win, and the others keep
// waiting. It returns the lease once claimed, the error of a claim that failed other than with
// ErrHeld, an error of its watch (client.ErrCacheClosed once the connection closed for good,
// client.ErrEpochChanged after a restore, the store's refusal to watch again), or ctx's error; an
// Elector campaigns again after any of them but a refusal for good.
//
// The watch's prefix is the lease key, so it also sees the keys that extend it
// ("leases/a" sees "leases/a2"); more than 64 of those make the watch WATCH_TOO_BROAD.
// A holder that restarts with the same Holder still waits for its old entry to expire.
func Campaign(ctx context.Context, c *client.Client, o Options) (*Lease, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
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
	cache, err := c.NewCache(ctx, client.CacheOptions{Namespace: o.Namespace, KeyPrefix: o.Key, Logger: o.Logger,
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
	for {
		// The cache must have seen the entry that refused the claim, or an absent key could be one it
		// has not caught up with yet.
		var held *HeldError
		if errors.As(err, &held) {
			if err := cache.WaitForRevision(ctx, held.Revision); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("lease: watch %s:%s: %w", o.Namespace, o.Key, err)
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
				}
				_, ok = cache.Get(o.Key)
			}
		}
		if l, err = claim(ctx, c, o); !errors.Is(err, ErrHeld) {
			return l, err
		}
		if o.onHeld != nil {
			o.onHeld()
		}
	}
}
