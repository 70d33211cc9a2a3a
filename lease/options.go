package lease

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// TTL bounds. The store rejects a TTL under one second (TTL_INVALID) and clamps one above 24 hours;
// Options refuses both, so the deadline the lease computes is the one the store applies.
const (
	DefaultTTL = 5 * time.Second
	MinTTL     = time.Second
	MaxTTL     = 24 * time.Hour
)

// MinRenewEvery is the shortest renewal interval. A renewal's requests (an info, then the put) must
// be answered within RenewEvery, and half of it is Held's safety margin. Below a round trip no
// renewal gets through (with 1 ns every lease was lost one TTL after its claim, the loop retrying
// every millisecond meanwhile), and under 2 ms the margin is less than the store's millisecond clock
// can take off the TTL. It matches the shortest heartbeat interval (SPEC section 11).
const MinRenewEvery = 100 * time.Millisecond

// maxOffsetBytes bounds a resume offset: it travels as the message of a keeppeek.observed-status.v1
// document, which holds at most 256 bytes.
const maxOffsetBytes = 256

// Options describe one lease. Namespace, Key and Holder are required; every other field has a
// default, applied when it is zero. Claim, Campaign and NewElector validate them once.
type Options struct {
	// Namespace holds the lease entry. It must be a service/<id> namespace: the schema
	// keeppeek.lease.v1 is registered there only, and only admin principals write there.
	Namespace string
	// Key names the lease within the namespace, e.g. "leases/front-door-video-browser-h264-720p".
	Key string
	// Holder identifies the claiming worker (the document's holder), [A-Za-z0-9_-]{1,64}: the
	// worker id of its heartbeats.
	Holder string
	// TTL is the lease's time to live on the store: an entry not renewed within TTL expires.
	// At least MinTTL (1 s), at most MaxTTL (24 h), truncated to whole milliseconds. Default DefaultTTL
	// (5 s).
	TTL time.Duration
	// RenewEvery is how often the holder renews, and how long one renewal may take. Default TTL/3; at
	// least MinRenewEvery (100 ms), at most TTL/2. Half of it is the safety margin: a lease counts as
	// held until TTL minus RenewEvery/2 after the last successful claim or renewal was sent (see
	// Lease.Held).
	RenewEvery time.Duration
	// Purpose, optional, is stored in the lease document to tell operators what the lease is for.
	Purpose string
	// OffsetKey, optional, names the entry (in Namespace) that Lease.LoadOffset and Lease.SaveOffset
	// keep the holder's resume offset in. It must differ from Key.
	OffsetKey string
	// Logger receives renewal failures and losses. Default: discard.
	Logger *slog.Logger

	// settleClaims makes a claim whose ctx ends while its put is out wait for the reply, and undo a
	// claim that committed, before it returns (claimPut). Set by NewElector.
	settleClaims bool
	// boundClaims bounds each request of a claim by the client's request timeout, whatever ctx's
	// deadline. Set by Campaign, whose ctx is the whole campaign's.
	boundClaims bool

	// Test hooks (export_test.go); nil in production.
	onRenewed    func(rev uint64)        // after each successful renewal, with the new revision
	onRenewReply func()                  // when a renewal's reply is in, before it is applied
	onGuardWait  func()                  // when a refused guarded write waits for a renewal in flight
	onWait       func()                  // Campaign: each time it starts waiting for the key to be free
	onHeld       func()                  // Campaign: after each claim refused because the lease is held
	onLastWait   func()                  // renewal loop: each time it waits with no renewal due before the deadline
	onSleep      func(time.Duration)     // renewal loop: each time its timer is armed, with how long for
	onClaim      func()                  // Campaign: before each claim made once the key looked free
	onHeldWait   func(*client.Cache)     // Campaign: before it waits for its cache to reach a refusal's revision
	onRenew      func()                  // renewal loop: before each renewal reads the lease's revision
	onResolved   func()                  // a refused guarded write found an unanswered renewal its own, before adopting it
	clock        func() boottime.Instant // the lease's clock; nil: boottime.Now
}

// now reads the clock the lease times itself on: boottime's, which counts a suspend of the machine.
func (o *Options) now() boottime.Instant {
	if o.clock != nil {
		return o.clock()
	}
	return boottime.Now()
}

// margin is the safety margin subtracted from TTL when deciding whether the lease is still held.
func (o *Options) margin() time.Duration { return o.RenewEvery / 2 }

// ttlMs is the ttl_ms sent with every claim and renewal.
func (o *Options) ttlMs() int64 { return o.TTL.Milliseconds() }

// errNilClient refuses a nil *client.Client at construction, rather than a nil dereference in the
// first request (Claim, Campaign) or, for an Elector, only once Run is called.
var errNilClient = errors.New("lease: nil client")

// resolve validates o and returns it with its defaults applied.
func (o Options) resolve() (Options, error) {
	kind, _, ok := wire.ParseNamespace(o.Namespace)
	switch {
	case !ok || kind != wire.KindService:
		return o, fmt.Errorf("lease: namespace %q is not a service/<id> namespace", o.Namespace)
	case !wire.ValidKey(o.Key):
		return o, fmt.Errorf("lease: invalid key %q", o.Key)
	case !wire.ValidWatchID(o.Holder):
		return o, fmt.Errorf("lease: invalid holder %q (want [A-Za-z0-9_-]{1,64})", o.Holder)
	case o.OffsetKey != "" && (!wire.ValidKey(o.OffsetKey) || o.OffsetKey == o.Key):
		return o, fmt.Errorf("lease: invalid offset key %q (a valid key other than the lease's)", o.OffsetKey)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	o.TTL = o.TTL.Truncate(time.Millisecond)
	if o.TTL < MinTTL || o.TTL > MaxTTL {
		return o, fmt.Errorf("lease: TTL %v is outside %v to %v", o.TTL, MinTTL, MaxTTL)
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = o.TTL / 3
	}
	if o.RenewEvery < MinRenewEvery || o.RenewEvery > o.TTL/2 {
		return o, fmt.Errorf("lease: RenewEvery %v must be at least %v and at most TTL/2 (%v)", o.RenewEvery, MinRenewEvery, o.TTL/2)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
