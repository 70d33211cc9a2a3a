package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// Resync backoff bounds: the first failed re-watch waits CacheOptions.ResyncBackoff (default
// DefaultResyncBackoff), each further one twice as long, up to MaxResyncBackoff, or up to the cache's
// CheckInterval when that is shorter.
const (
	DefaultResyncBackoff = 100 * time.Millisecond
	MaxResyncBackoff     = 5 * time.Second
)

// DefaultCheckInterval is how often an idle Cache checks that its watch is still live.
const DefaultCheckInterval = 5 * time.Second

// DefaultAckDelay is how long a Cache holds back the ack of updates it applied, by default.
const DefaultAckDelay = 100 * time.Millisecond

// maxAckEvery caps how many applied updates wait for an ack: an ack goes out once half the server's
// max_pending_updates (after which the server closes the watch with OVERFLOW), and at most this
// many, are unacknowledged.
const maxAckEvery = 16

// ackEvery is the number of unacknowledged applied updates at which a cache acks at once, for a
// server whose max_pending_updates is maxPending.
func ackEvery(maxPending int64) uint64 {
	return uint64(max(1, min(maxPending/2, maxAckEvery)))
}

// ErrCacheClosed is returned by WaitForRevision once the cache is closed, or has stopped because its
// NATS connection was closed (it then keeps its last entries, and follows nothing more).
var ErrCacheClosed = errors.New("store/client: cache closed")

// errEpochMoved is an attempt's error when info gave another epoch after the watch than before it
// (a restore in between): the snapshot's epoch is unknown, and the attempt is retried.
var errEpochMoved = errors.New("the store's epoch changed during the watch request")

// ErrEpochChanged is returned by WaitForRevision when the cache resyncs to a store of another epoch (a
// restore) while it waits, or the store tells it is in another epoch than the cache: the revision
// waited for cannot be compared with the cache's (SPEC section 4); the write it named may or may not
// be in the restored store.
var ErrEpochChanged = errors.New("store/client: the store's epoch changed (a restore): revisions of the old epoch are void")

// CacheOptions configure a Cache. Namespace is required; the rest is optional.
type CacheOptions struct {
	// Namespace is the watched namespace.
	Namespace string
	// KeyPrefix narrows the watch to keys starting with it (empty: all keys). A snapshot is bounded
	// (max_snapshot_entries, max_snapshot_bytes): a prefix that matches more is WATCH_TOO_BROAD.
	KeyPrefix string
	// WatchID is the watch's id, [A-Za-z0-9_-]{1,64}, unique among the principal's live watches.
	// Default: "cache-" and 16 random hex digits. A fixed id lets a restarted process take over the
	// watch its predecessor left behind (WATCH_EXISTS is handled by unwatching it).
	WatchID string
	// Handlers are called for every change the cache applies, in order.
	Handlers Handlers
	// Logger logs resyncs and failed re-watches. Default: the client's logger.
	Logger *slog.Logger
	// ResyncBackoff is the wait after the first failed re-watch attempt; it doubles per failure up to
	// MaxResyncBackoff, or CheckInterval when that is shorter: a cache cut off from the state server
	// by a parted NATS route sees no status change of its connection when the route comes back, and
	// only its next attempt finds the store again; one that checks its watch every CheckInterval
	// follows again within about that long. Default DefaultResyncBackoff (100 ms).
	ResyncBackoff time.Duration
	// CheckInterval is how often a cache that sent no ack since the last check asks the server
	// whether its watch still exists and whether an update was sent that never arrived: a watch can
	// vanish without a message reaching the cache (a state server that crashed behind a NATS cluster
	// that stayed up, an unwatch by another client of the principal), and in a NATS cluster an update
	// can be lost while every connection stays up (a route between two nodes cut for a moment). With no
	// update after it, no sequence gap shows the loss, and a cache that waited for the next update
	// would show the old state until the server closed the watch (ack_deadline_ms), or for ever. The
	// check acknowledges one past the last applied update: the server refuses that with
	// INVALID_ARGUMENT while nothing was lost (so an idle cache shows in the server's request metrics
	// as one refused ack per interval). A check that finds the watch gone, or finds that update sent
	// and it does not arrive, resyncs.
	// Default DefaultCheckInterval (5 s); negative: never.
	CheckInterval time.Duration
	// AckDelay is how long the cache may hold back the ack of updates it applied, so that one ack
	// covers every update applied meanwhile (an ack is cumulative, SPEC section 7): a cache that
	// receives a steady trickle of updates sends a few acks a second instead of one per update. It
	// acks at once when half the server's max_pending_updates (at most 16) applied updates are
	// unacknowledged, so the server's bound is never reached by the delay; a slow handler still
	// reaches it. It is cut to half the server's ack_deadline_ms when longer. Default
	// DefaultAckDelay (100 ms); negative: ack each batch of updates as soon as it is applied.
	AckDelay time.Duration
}

// Handlers observe a Cache. Every field is optional. They are called from the cache's goroutine, one
// at a time, in the order the changes were applied, after the cache holds the change (a handler that
// calls Get sees it) and before its revision counts as reached (Revision, WaitForRevision: a writer
// that waits for its write knows the handlers have run). A handler must not block for long: updates wait, unacknowledged, while it runs,
// and the server closes a watch whose updates go unacknowledged (the cache then resyncs). A handler
// must not call Close or wait (WaitForRevision) on its own cache: the cache waits for the handler.
type Handlers struct {
	// OnPut is called with the entry of each applied PUT update.
	OnPut func(e wire.Entry)
	// OnDelete is called for each applied DELETE update with the key and the namespace revision of
	// the delete.
	OnDelete func(key string, rev uint64)
	// OnExpire is called for each applied EXPIRE update (a lease elapsed). The key may be one the
	// cache never held: an entry already due when a snapshot was taken is left out of it, and its
	// expiry then arrives as an update.
	OnExpire func(key string, rev uint64)
	// OnResync is called with every snapshot the cache installs, the first one included, after it
	// replaced the cached entries: snapshot is every entry (key order) at revision rev. Changes that
	// fell between the previous state and the snapshot get no OnPut, OnDelete or OnExpire call. After
	// a restore, Epoch has changed and rev may be lower than any revision seen before.
	OnResync func(snapshot []wire.Entry, rev uint64)
}

// Cache is a gap-free, read-only local copy of the entries of one namespace under a key prefix, kept
// current by a watch (SPEC sections 7.4 and 7.5). It applies an update only when its watch_sequence
// is exactly one above the last applied, acknowledges what it applied, and on a sequence gap, a
// CLOSED message, a NATS disconnect or reconnect, an update that makes no sense, or a failed ack, it
// unwatches, watches again with the same watch id (retrying with backoff) and replaces its entries
// only once the new snapshot is in: readers never see a half-empty cache. Its methods are safe for
// concurrent use. Close stops it.
type Cache struct {
	c        *Client
	ns       string
	prefix   string
	watchID  string
	h        Handlers
	log      *slog.Logger
	backoff0 time.Duration
	backoffN time.Duration // the longest wait between attempts: MaxResyncBackoff, or check if shorter
	check    time.Duration
	ackDelay time.Duration // as configured; ackHold is what the current incarnation uses

	mu      sync.RWMutex
	entries map[string]wire.Entry
	rev     uint64
	epoch   string        // the store's epoch (from info) when the installed snapshot was taken
	stalled error         // non-nil while the cache cannot watch again for a reason retrying may not cure
	lapsed  bool          // the cache's watch was dropped and no snapshot replaced it yet (see Following)
	changed chan struct{} // closed and replaced whenever rev or epoch changes

	resyncs atomic.Uint64
	// nudge asks the run goroutine to resync: a wait learned from info that the store has moved to
	// another epoch than the cache's (a restore the cache's watch did not tell it of). staleEpoch
	// (under mu) names the epoch info disowned: a nudge is acted on only while the cache still holds
	// it, so that nudges of several waiters that learned of one restore cost one resync, not one more
	// after the cache already followed the new epoch.
	nudge      chan struct{}
	staleEpoch string

	ctx       context.Context // the cache's lifetime
	cancel    context.CancelFunc
	done      chan struct{} // closed when run returns
	closeOnce sync.Once
	closeErr  error

	// Owned by the run goroutine.
	status    chan nats.Status
	sub       *nats.Subscription // the current incarnation's subscription, nil between them
	in        *inbox
	tr        tracker
	acked     uint64
	ackEvery  uint64        // from the server's max_pending_updates
	ackHold   time.Duration // ackDelay, at most half the server's ack_deadline_ms
	ackSent   bool          // an ack (or a snapshot) since the last liveness check
	installed bool          // the first snapshot is in
	requested bool          // a watch request was sent: shutdown unwatches only then
}

// NewCache starts a Cache and returns once its first snapshot is installed. Transient failures
// (no state server answering, UNAVAILABLE, a timeout, a watch id still live) are retried with backoff
// until ctx ends; any other failure (PERMISSION_DENIED, WATCH_TOO_BROAD, INVALID_ARGUMENT, ...) is
// returned at once. ctx bounds only this wait; the cache runs until Close.
func (c *Client) NewCache(ctx context.Context, o CacheOptions) (*Cache, error) {
	if !wire.ValidNamespace(o.Namespace) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "invalid namespace %q", o.Namespace)
	}
	if !wire.ValidKeyPrefix(o.KeyPrefix) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "invalid key_prefix %q", o.KeyPrefix)
	}
	if o.WatchID == "" {
		o.WatchID = "cache-" + randomHex(8)
	}
	if !wire.ValidWatchID(o.WatchID) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "invalid watch_id %q", o.WatchID)
	}
	if o.ResyncBackoff < 0 {
		return nil, fmt.Errorf("store/client: negative ResyncBackoff %v", o.ResyncBackoff)
	}
	if o.ResyncBackoff == 0 {
		o.ResyncBackoff = DefaultResyncBackoff
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.AckDelay == 0 {
		o.AckDelay = DefaultAckDelay
	}
	if o.Logger == nil {
		o.Logger = c.log
	}
	lctx, cancel := context.WithCancel(context.Background())
	k := &Cache{
		c: c, ns: o.Namespace, prefix: o.KeyPrefix, watchID: o.WatchID, h: o.Handlers,
		log:      o.Logger.With("namespace", o.Namespace, "key_prefix", o.KeyPrefix, "watch_id", o.WatchID),
		backoffN: MaxResyncBackoff, check: o.CheckInterval, ackDelay: o.AckDelay,
		entries: map[string]wire.Entry{}, changed: make(chan struct{}), nudge: make(chan struct{}, 1),
		ctx: lctx, cancel: cancel, done: make(chan struct{}),
		status: c.nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED),
	}
	if o.CheckInterval > 0 {
		k.backoffN = min(k.backoffN, o.CheckInterval)
	}
	k.backoff0 = min(o.ResyncBackoff, k.backoffN)
	k.useBounds(wire.DefaultBounds()) // until the server says
	first := make(chan error, 1)
	go k.run(first)
	select {
	case err := <-first:
		if err != nil {
			<-k.done
			return nil, err
		}
		return k, nil
	case <-ctx.Done():
		_ = k.Close()
		return nil, ctx.Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// WatchID returns the id of the cache's watch.
func (k *Cache) WatchID() string { return k.watchID }

// Get returns the cached entry of key. An entry with a TTL stays cached until the server's EXPIRE
// arrives (or a snapshot lacks it): its expires_at_ms is a time of the server's clock, which may be
// seconds or minutes off this host's, and the cache never judges it against the local clock.
func (k *Cache) Get(key string) (wire.Entry, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	e, ok := k.entries[key]
	return e, ok
}

// List returns every cached entry in bytewise key order.
func (k *Cache) List() []wire.Entry {
	k.mu.RLock()
	out := slices.Collect(maps.Values(k.entries))
	k.mu.RUnlock()
	slices.SortFunc(out, func(a, b wire.Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Revision returns the namespace revision the cache reflects: the snapshot_revision of the last
// installed snapshot, then the revision of each update applied after it, once its handler returned.
// Only changes under the key prefix move it. After a restore (a new epoch) it can be lower than before:
// it is 0 while OnResync runs for the new epoch's first snapshot, then that snapshot's revision.
func (k *Cache) Revision() uint64 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.rev
}

// Epoch returns the store's epoch (SPEC section 4) that the cache's entries and Revision belong to,
// as info reported it both before and after the installed snapshot was taken. A restore starts a new
// epoch: revisions of the old one are void, and the cache's Revision can go down (it is 0 while
// OnResync runs for the first snapshot of a new epoch).
func (k *Cache) Epoch() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.epoch
}

// WaitForRevision returns once Revision() >= rev, so a writer can wait until the cache shows its own
// write (the revision of the stored entry, or of the delete) and the handlers have seen it. rev must
// be the revision of a change under the cache's prefix, or at most one the cache has already seen:
// other changes of the namespace do not reach the cache. It returns ctx's error when ctx ends first,
// ErrCacheClosed when the cache is closed, and ErrEpochChanged when the revision cannot be compared
// with the cache's: the cache resyncs to another epoch meanwhile, or the store is in another epoch
// than the cache (a restore the cache has not seen yet; the write may then be of either epoch).
//
// A revision says nothing without its epoch, and a write's reply names none. So once the cache
// reached rev, WaitForRevision asks the store (one info request, retried while the store does not
// answer, until ctx ends) whether its epoch is still the cache's: if so, the store has been in that
// epoch since the cache's snapshot, a write answered between that snapshot and this call was made in
// it, and the cache holds it. Without that check a cache that has not yet seen a restore would take a
// revision of the restored store for one of its own. WaitForRevision takes the cache's epoch when it
// is called: a writer that may outlive a restore between its write and the wait (the cache may have
// moved to the new epoch already) uses WaitForRevisionIn with the Epoch it read before writing.
func (k *Cache) WaitForRevision(ctx context.Context, rev uint64) error {
	return k.WaitForRevisionIn(ctx, k.Epoch(), rev)
}

// WaitForRevisionIn is WaitForRevision for a revision of epoch: it returns ErrEpochChanged at once if
// the cache already holds another epoch, and as soon as it moves to one.
func (k *Cache) WaitForRevisionIn(ctx context.Context, epoch string, rev uint64) error {
	for {
		k.mu.RLock()
		cur, now, stalled, ch := k.rev, k.epoch, k.stalled, k.changed
		k.mu.RUnlock()
		if now != epoch {
			return ErrEpochChanged
		}
		if stalled != nil && cur < rev {
			return fmt.Errorf("store/client: the cache cannot watch again: %w", stalled)
		}
		if cur >= rev {
			return k.confirmEpoch(ctx, epoch)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-k.done:
			return ErrCacheClosed
		}
	}
}

// confirmEpoch asks the store whether it is still in epoch, the cache's: nil if so, ErrEpochChanged
// (and a resync of the cache) if not. A store that does not answer, or answers without an epoch (it
// is not served), is asked again until ctx ends or the cache stops. Each try is bounded by the
// client's request timeout even when ctx allows longer: a request whose reply was lost (a reconnect)
// would otherwise hold the wait until ctx's deadline, and no retry would ever be sent.
func (k *Cache) confirmEpoch(ctx context.Context, epoch string) error {
	backoff := k.backoff0
	for {
		ictx, cancel := context.WithTimeout(ctx, k.c.timeout)
		info, err := k.c.Info(ictx)
		cancel()
		switch {
		case err == nil && info.Epoch == epoch:
			return nil
		case err == nil && info.Epoch != "":
			k.mu.Lock()
			held := k.epoch == epoch
			if held {
				k.staleEpoch = epoch
			}
			k.mu.Unlock()
			if held { // else the cache has moved on already: nothing to resync
				select {
				case k.nudge <- struct{}{}:
				default:
				}
			}
			return ErrEpochChanged
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("%w: cannot confirm the store's epoch: %w", ErrCacheClosed, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-k.done:
			t.Stop()
			return ErrCacheClosed
		}
		backoff = min(2*backoff, k.backoffN)
	}
}

// Err returns why the cache cannot watch again, while that lasts: an error the store answered that
// retrying may not cure (PERMISSION_DENIED once the principal lost read permission, WATCH_TOO_BROAD,
// ...). The cache goes on retrying with backoff, and its entries, the last it had, go stale meanwhile;
// WaitForRevision for a revision it has not reached returns the error. nil while the cache follows.
func (k *Cache) Err() error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.stalled
}

// Following reports whether the cache follows the store now: its watch is live, and its entries are
// the store's as of Revision. It is false from the moment the cache drops its watch (a gap, a close, a
// reconnect, an error: any resync, transient or not, which Err does not report) until the next
// snapshot is installed (it is true again when OnResync runs for it), and once the cache is Done;
// meanwhile the entries are its last word.
func (k *Cache) Following() bool {
	select {
	case <-k.done:
		return false
	default:
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	return !k.lapsed
}

// Done is closed once the cache follows nothing more: after Close, or when its NATS connection was
// closed. Its entries stay readable.
func (k *Cache) Done() <-chan struct{} { return k.done }

// Resyncs returns how many snapshots the cache installed after its first.
func (k *Cache) Resyncs() uint64 { return k.resyncs.Load() }

// Close stops the cache's goroutine, unwatches and unsubscribes. The cached entries stay readable.
// A re-watch still unanswered is waited for (at most the client's request timeout for its reply, and
// as long again for its unwatch), so that no watch is left on the server once Close returned, even if
// the connection is closed next. Close returns the unwatch error, if any other than NOT_FOUND or a
// closed connection, or an error saying that the re-watch is still unanswered after that wait (the
// watch may then stay registered); later calls return the same.
func (k *Cache) Close() error {
	k.closeOnce.Do(func() {
		k.cancel()
		<-k.done
	})
	return k.closeErr
}

// run owns the watch: it installs snapshots, applies updates and resyncs until the cache is closed.
// It reports the outcome of the first snapshot on first.
func (k *Cache) run(first chan<- error) {
	defer close(k.done)
	defer k.shutdown()
	if err := k.resync("start"); err != nil {
		first <- err
		return
	}
	first <- nil
	var tick <-chan time.Time
	if k.check > 0 {
		t := time.NewTicker(k.check)
		defer t.Stop()
		tick = t.C
	}
	// The held-back ack: armed when applied updates wait for an ack, it acks them when it fires.
	ackTimer := time.NewTimer(time.Hour)
	ackTimer.Stop()
	defer ackTimer.Stop()
	ackArmed := false
	for {
		var ready chan struct{}
		if k.in != nil {
			ready = k.in.ready
			if !ackArmed && k.tr.seq > k.acked {
				ackTimer.Reset(k.ackHold)
				ackArmed = true
			}
		}
		select {
		case <-k.ctx.Done():
			return
		case <-ackTimer.C:
			ackArmed = false
			if k.in == nil || k.tr.seq <= k.acked {
				continue // acked meanwhile, or between incarnations
			}
			if !k.resyncAfter("", k.ack()) {
				return
			}
		case <-tick:
			if k.ackSent {
				k.ackSent = false
				continue
			}
			err := k.checkLive()
			k.ackSent = false // a check is not activity
			if !k.resyncAfter("liveness check: ", err) {
				return
			}
		case <-ready:
			if !k.resyncAfter("", k.drain()) {
				return
			}
		case <-k.nudge:
			k.mu.RLock()
			stale := k.staleEpoch != "" && k.staleEpoch == k.epoch
			k.mu.RUnlock()
			if !stale {
				continue // the cache resynced to another epoch since the nudge
			}
			if k.resync("info reports another epoch than the cache's") != nil {
				return
			}
		case s, ok := <-k.status:
			if !ok {
				k.status = nil
				continue
			}
			if k.resync("NATS connection "+s.String()) != nil {
				return
			}
		}
	}
}

// resyncAfter resyncs when err (which the reason prefixes in the log) leaves the watch untrusted. It
// reports whether the cache runs on: false once it is closed.
func (k *Cache) resyncAfter(reason string, err error) bool {
	if err == nil {
		return true
	}
	if k.ctx.Err() != nil {
		return false
	}
	return k.resync(reason+err.Error()) == nil
}

// shutdown ends the last incarnation; it runs on the run goroutine as it returns.
func (k *Cache) shutdown() {
	if k.status != nil {
		k.c.nc.RemoveStatusListener(k.status)
	}
	if k.sub != nil {
		_ = k.sub.Unsubscribe()
		k.sub, k.in = nil, nil
	}
	// Unwatch even without a live incarnation: a watch request cut short by Close may still have
	// registered the watch on the server. Such a request is waited for first (its reply comes within
	// the request timeout, and the watch it registered is then unwatched within another): an unwatch
	// sent at once could overtake it, and a user who closes the connection once Close returned would
	// leave its watch registered, with nobody to unwatch it.
	// No watch request sent, none registered: nothing to unwatch (NewCache's context may have ended
	// during the first attempt's info, across a partition that would hold an unwatch a request timeout).
	if k.c.nc.IsClosed() || !k.requested {
		return
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 2*k.c.timeout)
	release, err := k.c.startWatchRequest(wctx, k.watchID)
	wcancel()
	if err != nil {
		k.closeErr = fmt.Errorf("store/client: close: a watch request of %s is still unanswered: %w", k.watchID, err)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), k.c.timeout)
	defer cancel()
	if err := k.c.unwatch(ctx, k.watchID); err != nil && !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, nats.ErrConnectionClosed) {
		k.closeErr = err
	}
}

// drain applies every message that arrived for the current incarnation. It acks when ackEvery
// applied updates are unacknowledged, and after the batch when acks are not held back; the run loop
// acks the rest after ackHold. An error means the watch can no longer be trusted: resync.
func (k *Cache) drain() error {
	for _, data := range k.in.take() {
		m, err := decodeWatchMessage(k.watchID, data)
		if err != nil {
			return err
		}
		v, err := k.tr.check(&m)
		switch v {
		case skip:
			k.log.Debug("state cache skipped a leftover of the previous watch", "watch_sequence", m.WatchSequence, "revision", m.Revision)
			continue
		case resync:
			return err
		}
		k.applyUpdate(&m)
		if k.tr.seq-k.acked >= k.ackEvery {
			if err := k.ack(); err != nil {
				return err
			}
		}
	}
	if k.ackDelay < 0 && k.tr.seq > k.acked {
		return k.ack()
	}
	return nil
}

// checkLive asks the server whether the cache's watch is still live and whether it sent an update that
// never arrived. Either can happen without a message reaching the cache, and with no sequence gap to
// show it until a next update comes, if one ever does: a state server that crashed behind a NATS
// cluster that stayed up, an unwatch by another client of the principal, or an update lost in the
// cluster while both connections stayed up (a route between the watcher's node and the state
// server's cut for a moment: the server published the update while the watcher's interest was not
// known on its node; a node that died holding it). It acknowledges one past the last applied update,
// after applying what has arrived: SPEC section 7.5 has the server refuse an ack above the highest
// update it sent with INVALID_ARGUMENT, leaving the watch as it was, which is the answer when nothing
// was lost. A watch that is gone answers NOT_FOUND: an error, and the cache resyncs. An ack the
// server takes means it sent that update; it may still be on its way, published just before the
// probe was taken (see awaitProbed), and if it never comes the cache resyncs.
func (k *Cache) checkLive() error {
	if err := k.drain(); err != nil {
		return err
	}
	if k.tr.seq > k.acked {
		if err := k.ack(); err != nil {
			return err
		}
	}
	probe := k.tr.seq + 1
	err := k.c.Ack(k.ctx, k.watchID, probe)
	switch {
	case err == nil:
		k.acked = probe // the server's view: an ack below it would be refused
		return k.awaitProbed(probe)
	case errors.Is(err, wire.ErrInvalidArgument):
		return nil // nothing sent past what the cache applied
	}
	return fmt.Errorf("ack %d: %w", probe, err)
}

// awaitProbed waits for update probe, which the server said it had sent when it took the probe's
// ack, and applies it: nil once applied, an error (the cache resyncs) when it was lost. The server
// publishes an update before it can take an ack of it, and the ack's reply after that, on the same
// connection: an update that is not lost has reached this client before the reply did, and is in the
// incarnation's inbox or still counted pending on its subscription (nats.go counts a message until
// its handler, which puts it in the inbox, has returned). Only an update in neither is lost.
func (k *Cache) awaitProbed(probe uint64) error {
	lost := fmt.Errorf("the server sent update %d, which never arrived", probe)
	bound := time.NewTimer(k.c.timeout)
	defer bound.Stop()
	for {
		if err := k.drain(); err != nil {
			return err
		}
		if k.tr.seq >= probe {
			return nil
		}
		if n, _, err := k.sub.Pending(); err != nil || n == 0 && k.in.empty() {
			return lost
		}
		recheck := time.NewTimer(time.Millisecond) // the pending count trails a handler that returned
		select {
		case <-k.in.ready:
		case <-recheck.C:
		case <-bound.C:
			recheck.Stop()
			return lost
		case <-k.ctx.Done():
			recheck.Stop()
			return k.ctx.Err()
		}
		recheck.Stop()
	}
}

// useBounds sets how many applied updates may wait for an ack, and for how long, from a server's
// max_pending_updates and ack_deadline_ms.
func (k *Cache) useBounds(b wire.Bounds) {
	k.ackEvery = ackEvery(b.MaxPendingUpdates)
	k.ackHold = min(k.ackDelay, time.Duration(b.AckDeadlineMs)*time.Millisecond/2)
}

func (k *Cache) ack() error {
	if err := k.c.Ack(k.ctx, k.watchID, k.tr.seq); err != nil {
		return fmt.Errorf("ack %d: %w", k.tr.seq, err)
	}
	k.acked, k.ackSent = k.tr.seq, true
	return nil
}

// applyUpdate applies one update the tracker accepted and calls its handler; only then does the
// revision move (and WaitForRevision return): a writer that waits for its write sees its handlers'
// work done too. The handler sees the entry in the cache.
func (k *Cache) applyUpdate(m *wire.WatchMessage) {
	k.mu.Lock()
	if m.Kind == wire.UpdatePut {
		k.entries[m.Key] = *m.Entry
	} else {
		delete(k.entries, m.Key)
	}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.setRevLocked(m.Revision)
		k.mu.Unlock()
	}()
	switch m.Kind {
	case wire.UpdatePut:
		if k.h.OnPut != nil {
			k.h.OnPut(*m.Entry)
		}
	case wire.UpdateDelete:
		if k.h.OnDelete != nil {
			k.h.OnDelete(m.Key, m.Revision)
		}
	case wire.UpdateExpire:
		if k.h.OnExpire != nil {
			k.h.OnExpire(m.Key, m.Revision)
		}
	}
}

func (k *Cache) setRevLocked(rev uint64) {
	k.rev = rev
	close(k.changed)
	k.changed = make(chan struct{})
}

// resync drops the current incarnation and watches again until a snapshot is installed. Before the
// first snapshot it gives up on a failure that is not transient; afterwards it retries everything,
// with backoff, until the cache is closed (its only error then is the context's).
func (k *Cache) resync(reason string) error {
	// The watch is given up from here: Following says so before the unwatch, which may take a whole
	// request timeout (a partition), and before the log line that tells why.
	k.mu.Lock()
	k.lapsed = true
	k.mu.Unlock()
	if k.installed {
		k.log.Info("state cache resyncing", "reason", reason)
	}
	k.dropIncarnation()
	defer func() {
		k.mu.Lock()
		k.lapsed = !k.installed || k.ctx.Err() != nil || k.c.nc.IsClosed()
		k.mu.Unlock()
	}()
	backoff := k.backoff0
	existsRetried := false
	for {
		if err := k.ctx.Err(); err != nil {
			return err
		}
		if k.c.nc.IsClosed() {
			if !k.installed {
				return fmt.Errorf("store/client: watch %s: %w", k.watchID, nats.ErrConnectionClosed)
			}
			// For good: the cache stops (its entries stay readable), and waiters learn it.
			k.log.Warn("state cache stopped following: the NATS connection is closed")
			return fmt.Errorf("store/client: watch %s: %w", k.watchID, nats.ErrConnectionClosed)
		}
		k.drainStatus()
		err := k.attempt()
		if err == nil {
			return nil
		}
		if k.ctx.Err() != nil {
			return k.ctx.Err()
		}
		if !k.installed && !transient(err) {
			return err
		}
		if !transient(err) {
			// PERMISSION_DENIED (the principal lost read permission), WATCH_TOO_BROAD, ...: the cache
			// keeps trying (a reload may give the permission back) but says so: Err, and waiters.
			k.mu.Lock()
			if k.stalled == nil {
				k.stalled = err
				close(k.changed)
				k.changed = make(chan struct{})
			}
			k.mu.Unlock()
		}
		if errors.Is(err, wire.ErrWatchExists) {
			// The previous incarnation (or a predecessor's watch of the same id) is still live.
			uerr := k.unwatch()
			if !existsRetried && (uerr == nil || errors.Is(uerr, wire.ErrNotFound)) {
				existsRetried = true
				continue
			}
		}
		k.log.Warn("state cache watch failed; retrying", "err", err, "backoff", backoff)
		if !k.sleep(backoff) {
			return k.ctx.Err()
		}
		backoff = min(2*backoff, k.backoffN)
	}
}

// transient reports whether a failed watch is worth retrying before the first snapshot.
func transient(err error) bool {
	switch wire.CodeOf(err) {
	case wire.CodeUnavailable, wire.CodeWatchExists:
		return true
	case "":
		return errors.Is(err, errEpochMoved) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
			errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
	}
	return false
}

// sleep waits d, or less when the connection status changes; false when the cache is closed.
func (k *Cache) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.ctx.Done():
		return false
	case <-t.C:
	case _, ok := <-k.status:
		if !ok {
			k.status = nil
		}
	}
	return true
}

// drainStatus discards status changes already seen: the attempt that follows starts after them.
func (k *Cache) drainStatus() {
	for {
		select {
		case _, ok := <-k.status:
			if !ok {
				k.status = nil
				return
			}
		default:
			return
		}
	}
}

// dropIncarnation unsubscribes the current incarnation and unwatches it, ignoring errors (it may be
// closed already). Messages still in flight for it are dropped with its inbox.
func (k *Cache) dropIncarnation() {
	if k.sub == nil {
		return
	}
	_ = k.sub.Unsubscribe()
	k.sub, k.in = nil, nil
	_ = k.unwatch()
}

func (k *Cache) unwatch() error { return k.c.Unwatch(k.ctx, k.watchID) }

// attempt subscribes, requests the watch and, when the snapshot is sound, installs it as the new
// incarnation.
func (k *Cache) attempt() error {
	// The server's max_pending_updates and ack_deadline_ms set how many updates may wait for an ack,
	// and for how long. Without an answer, the cache keeps what it knew (at first, what the default
	// bounds allow) and the watch request says what is wrong, if anything.
	// The snapshot is installed under the epoch info reports; without it the cache could not tell a
	// restore, so an attempt whose info fails fails (and is retried).
	info, err := k.c.Info(k.ctx)
	if err != nil {
		return fmt.Errorf("store/client: info before watch %s: %w", k.watchID, err)
	}
	epoch := info.Epoch
	if info.Bounds.MaxPendingUpdates > 0 && info.Bounds.AckDeadlineMs > 0 {
		k.useBounds(info.Bounds)
	}
	in := newInbox()
	var sub *nats.Subscription
	subscribe := func() (err error) {
		if sub, err = k.c.nc.Subscribe(k.c.watchSubject(k.watchID), in.push); err != nil {
			return fmt.Errorf("store/client: subscribe to watch %s: %w", k.watchID, err)
		}
		k.requested = true
		return nil
	}
	ws, err := k.c.watchRequest(k.ctx, wire.WatchRequest{WatchID: k.watchID, Namespace: k.ns, KeyPrefix: k.prefix}, subscribe, nil)
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return err
	}
	if err := checkSnapshot(ws); err != nil {
		_ = sub.Unsubscribe()
		_ = k.unwatch()
		return fmt.Errorf("store/client: watch reply: %w", err)
	}
	// The watch reply names no epoch. The store's epoch changes only across a restore, with the
	// server stopped, and never comes back: info giving the same epoch before and after the watch
	// proves the snapshot is of that epoch. A restore (and restart) in between would otherwise label
	// the new store's snapshot with the old epoch.
	after, err := k.c.Info(k.ctx)
	if err == nil && after.Epoch != epoch {
		err = fmt.Errorf("%w: %q before the watch, %q after", errEpochMoved, epoch, after.Epoch)
	}
	if err != nil {
		_ = sub.Unsubscribe()
		_ = k.unwatch()
		return fmt.Errorf("store/client: info after watch %s: %w", k.watchID, err)
	}
	entries := make(map[string]wire.Entry, len(ws.Entries))
	for _, e := range ws.Entries {
		entries[e.Key] = e
	}
	k.mu.Lock()
	if k.installed {
		k.resyncs.Add(1) // before waiters wake: one that sees the new state sees the count too
	}
	k.entries = entries
	if k.installed && epoch != k.epoch {
		k.log.Warn("state cache resynced to a new epoch: the store was restored", "old_epoch", k.epoch, "epoch", epoch)
		// The old epoch's revision says nothing of the new one: until OnResync returned, no revision
		// of the new epoch is reached, and waiters on the old one learn at once that it is void.
		k.epoch = epoch
		k.setRevLocked(0)
	}
	k.epoch = epoch
	k.stalled = nil
	// The entries are the new snapshot's and its watch is live: the cache follows from here, and says
	// so before OnResync runs (a handler that tells its readers "changed" gives them their last word).
	k.lapsed = false
	k.mu.Unlock()
	k.sub, k.in, k.tr, k.acked, k.ackSent = sub, in, newTracker(ws), 0, true
	if k.installed {
		k.log.Info("state cache resynced", "snapshot_revision", ws.SnapshotRevision, "entries", len(ws.Entries))
	}
	k.installed = true
	if k.h.OnResync != nil {
		k.h.OnResync(ws.Entries, ws.SnapshotRevision)
	}
	k.mu.Lock()
	k.setRevLocked(ws.SnapshotRevision) // after the handler, as for an update
	k.mu.Unlock()
	return nil
}

// inbox holds one incarnation's raw messages, unbounded, in arrival order. The subscription callback
// pushes; the cache goroutine takes. (The server never has more than max_pending_updates unacknowledged
// plus one close outstanding, so it stays small.)
type inbox struct {
	mu    sync.Mutex
	msgs  [][]byte
	ready chan struct{} // one token: messages are waiting
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

func (b *inbox) push(m *nats.Msg) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m.Data)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

func (b *inbox) empty() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs) == 0
}

func (b *inbox) take() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs
	b.msgs = nil
	return msgs
}
