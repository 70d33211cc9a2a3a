package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/boottime"
	"github.com/keeppeek/coordination/store/wire"
)

// DefaultRequestTimeout bounds a request whose context has no deadline.
const DefaultRequestTimeout = 5 * time.Second

// PingInterval is how often a connection made by Connect pings its NATS server, unless its options
// say otherwise: with nats.go's two pings outstanding, a server that stopped answering is given up
// within three intervals.
const PingInterval = 5 * time.Second

type options struct {
	prefix  string
	timeout time.Duration
	logger  *slog.Logger
}

// Option configures a Client. A nil Option is skipped (as nats.Connect skips a nil nats.Option).
type Option func(*options)

// WithPrefix sets the subject prefix (default wire.DefaultPrefix, "kp"). It must be one or more NATS
// subject tokens without wildcards.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithRequestTimeout sets how long a request may take when its context has no deadline (default 5 s).
// A context deadline always wins, a later one too. d must be positive: New refuses 0 and below.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithLogger sets the logger (default: discard). Caches log resyncs and failed re-watches on it.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Client speaks the state store's request/reply contract for one principal. It is safe for
// concurrent use.
type Client struct {
	nc        *nats.Conn
	principal string
	prefix    string
	timeout   time.Duration
	log       *slog.Logger
	lastID    atomic.Int64

	watchMu sync.Mutex
	// watchBusy holds, per watch id with a watch request in flight, a channel closed once that request
	// is done with: answered, or, when its caller gave up on it, answered late and the watch it
	// registered then unwatched (or given up for good, without a reply). Watch requests of one id go
	// one at a time: a request sent while an earlier one given up is unanswered could be answered
	// WATCH_EXISTS because of the earlier one's registration, which nobody would then unwatch if its
	// caller gave up too; and the earlier one's unwatch could remove the later one's watch.
	watchBusy map[string]chan struct{}
	// watchOwner holds, per watch id, the raw Watch whose request registered it last: the Stop of an
	// earlier Watch of the id, which the server closed, must not unwatch a newer one (see Watch.Stop).
	watchOwner map[string]*Watch
	// watchWaits, when set (tests), is told each time a request of a watch id waits for the id's
	// request in flight.
	watchWaits func(watchID string)

	epochMu sync.Mutex
	epoch   string           // the store's epoch as last seen in an info reply ("" before one)
	changed boottime.Instant // when epoch was first seen replacing another one (zero: never)
}

// Connect dials NATS for principal the way the state server's permissions require: inbox prefix
// `_INBOX.<principal>`, a connection name naming the principal, and reconnecting forever. It also
// turns off nats.go's reconnect buffer (nats.ReconnectBufSize(-1)): a request made while the
// connection is down fails at once with UNAVAILABLE, nothing sent, instead of waiting in the buffer
// and reaching the store when the connection comes back, perhaps minutes after its caller gave up
// on it and others wrote the key since (a put without expected_revision would then overwrite a newer
// value). It pings the server every PingInterval (nats.go's default is 2 minutes): a server that
// stops answering without closing the connection (its host powered off, a partition, a paused stated
// with its embedded server) is noticed within three intervals, and the connection reconnects, to
// another node of a cluster say, instead of holding on for minutes. opts come after those defaults,
// so they may override the name, MaxReconnects, the buffer or the ping interval, and carry the
// credentials (nats.UserInfo(principal, password), an nkey, ...); the inbox prefix is always the
// principal's.
func Connect(url, principal string, opts ...nats.Option) (*nats.Conn, error) {
	if !wire.ValidPrincipalID(principal) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "invalid principal id %q", principal)
	}
	all := make([]nats.Option, 0, len(opts)+4)
	all = append(all, nats.Name("keeppeek-"+principal), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.PingInterval(PingInterval))
	all = append(all, opts...)
	all = append(all, nats.CustomInboxPrefix(wire.InboxPrefix(principal)))
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, fmt.Errorf("store/client: connect %s as %s: %w", url, principal, err)
	}
	return nc, nil
}

// New returns a client that acts as principal over nc. The server takes the principal from the
// request subject, which NATS permits only to that principal's user, so nc must be authenticated as
// principal and must use the inbox prefix `_INBOX.<principal>` (Connect sets the prefix; pass the
// credentials in its options). New cannot verify either: with a wrong inbox prefix, requests time
// out.
func New(nc *nats.Conn, principal string, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("store/client: nil NATS connection")
	}
	if !wire.ValidPrincipalID(principal) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "invalid principal id %q", principal)
	}
	o := options{prefix: wire.DefaultPrefix, timeout: DefaultRequestTimeout}
	for _, opt := range opts {
		if opt != nil { // skipped, as nats.Connect skips a nil nats.Option
			opt(&o)
		}
	}
	if !wire.ValidPrefix(o.prefix) {
		return nil, fmt.Errorf("store/client: invalid subject prefix %q", o.prefix)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("store/client: request timeout must be positive, got %v", o.timeout)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	return &Client{nc: nc, principal: principal, prefix: o.prefix, timeout: o.timeout, log: o.logger}, nil
}

// Principal returns the principal the client acts as.
func (c *Client) Principal() string { return c.principal }

// Conn returns the NATS connection the client uses.
func (c *Client) Conn() *nats.Conn { return c.nc }

// RequestTimeout returns how long a request may take when its context has no deadline
// (WithRequestTimeout). A caller whose context lasts far longer than one request (a standby's
// campaign, a wait) bounds each of its requests by it: a reply lost to a dropped connection never
// comes, and would otherwise hold the caller until its context ends.
func (c *Client) RequestTimeout() time.Duration { return c.timeout }

// Finish runs request, a request that may change the store (a watch, a claim), through to its reply
// even when ctx ends first: until the later of ctx's deadline and c's request timeout. If the reply
// comes before ctx ends, Finish returns it. Otherwise it returns ctx.Err() itself at once, and calls late
// with the request's result when it comes (on a goroutine of its own), so the caller can undo what a
// request it gave up on did after all. A ctx that has already ended sends nothing: Finish returns
// ctx.Err() and never calls late (a request sent regardless could take an id a next call needs). late
// may be nil: the request then simply runs to its end.
func Finish[T any](ctx context.Context, c *Client, request func(context.Context) (T, error), late func(T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	v, _, err := finish(ctx, c, request, late)
	return v, err
}

// finish is Finish without its first look at ctx: it always sends the request, even when ctx has
// ended, and reports whether it gave up on the reply (it then returns ctx.Err() and calls late with
// the result). A caller that checked ctx itself before it prepared for the request (watchRequest)
// uses it: the request it prepared for is then always sent, and its late always called when it gave
// up.
func finish[T any](ctx context.Context, c *Client, request func(context.Context) (T, error), late func(T, error)) (v T, gaveUp bool, err error) {
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.After(deadline) {
		deadline = d
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		defer cancel()
		v, err := request(rctx)
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		return a.v, false, a.err
	case <-ctx.Done():
		go func() {
			a := <-done
			if late != nil {
				late(a.v, a.err)
			}
		}()
		var zero T
		return zero, true, ctx.Err()
	}
}

func (c *Client) requestSubject(op wire.Op) string {
	return wire.StateSubject(c.prefix, c.principal, op)
}

func (c *Client) watchSubject(watchID string) string {
	return wire.WatchSubject(c.prefix, c.principal, watchID)
}

// nextID returns a fresh request_id (1, 2, ...).
func (c *Client) nextID() int64 { return c.lastID.Add(1) }

// call sends req (whose request_id is id) on op's subject and returns the ok Result, or the error:
// a *wire.Error for a failed Result, when no state server answers, when the connection is down (with
// no reconnect buffer) and when the request is too large for a NATS message; the NATS or context
// error (wrapped) otherwise.
func (c *Client) call(ctx context.Context, op wire.Op, id int64, req any) (wire.Result, error) {
	data, err := wire.EncodeRequest(req)
	if err != nil {
		// Only what the caller sent fails to encode (a put's document that is not JSON): the
		// server would answer INVALID_ARGUMENT, and the caller matches it the same way.
		return wire.Result{}, wire.Errorf(wire.CodeInvalidArgument, "%s request does not encode: %v", op, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	subj := c.requestSubject(op)
	msg, err := c.nc.RequestWithContext(ctx, subj, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return wire.Result{}, wire.Errorf(wire.CodeUnavailable, "no state server answered on %s", subj)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			// Refused by nats.go before sending. The state server never runs with a
			// max_document_bytes that a message could not carry, so only a document over it makes a
			// request this large: TOO_LARGE, as the server would answer.
			return wire.Result{}, wire.Errorf(wire.CodeTooLarge, "%s request of %d bytes is over the NATS server's max_payload %d: not sent",
				op, len(data), c.nc.MaxPayload())
		}
		if errors.Is(err, nats.ErrReconnectBufExceeded) {
			// Refused by nats.go before sending: the connection is down and holds nothing back
			// (Connect), so nothing reached the store.
			return wire.Result{}, wire.Errorf(wire.CodeUnavailable, "not connected to NATS (reconnecting): %s request not sent", op)
		}
		return wire.Result{}, fmt.Errorf("store/client: %s request on %s: %w", op, subj, err)
	}
	return parseResult(op, id, msg.Data)
}

// parseResult decodes a StateStoreResult for the request id sent. A failed Result becomes its
// *wire.Error; a reply that does not decode, does not echo id, or is not ok without an error object
// is a protocol error (not a *wire.Error: nothing the caller sent was wrong).
func parseResult(op wire.Op, id int64, data []byte) (wire.Result, error) {
	var res wire.Result
	// Replies are decoded tolerantly: a newer server may add fields; requests are what SPEC decodes strictly.
	if err := wire.DecodeResult(data, &res); err != nil {
		return wire.Result{}, fmt.Errorf("store/client: malformed %s reply: %v", op, err)
	}
	if res.RequestID != id {
		detail := ""
		if res.Error != nil {
			detail = " (" + res.Error.Error() + ")"
		}
		return wire.Result{}, fmt.Errorf("store/client: %s reply has request_id %d, sent %d%s", op, res.RequestID, id, detail)
	}
	if !res.OK {
		if res.Error == nil || res.Error.Code == "" {
			return wire.Result{}, fmt.Errorf("store/client: %s reply is not ok and carries no error", op)
		}
		return wire.Result{}, res.Error
	}
	return res, nil
}

func protocolError(op wire.Op, format string, args ...any) error {
	return fmt.Errorf("store/client: %s reply: %s", op, fmt.Sprintf(format, args...))
}

// Get reads one entry. A missing or expired key is wire.ErrNotFound.
func (c *Client) Get(ctx context.Context, namespace, key string) (wire.Entry, error) {
	req := wire.GetRequest{RequestID: c.nextID(), Namespace: namespace, Key: key}
	res, err := c.call(ctx, wire.OpGet, req.RequestID, &req)
	if err != nil {
		return wire.Entry{}, err
	}
	if res.Entry == nil {
		return wire.Entry{}, protocolError(wire.OpGet, "no entry")
	}
	return *res.Entry, nil
}

// Put writes one entry and returns it as stored (revision, owner, expires_at_ms). req.RequestID is
// set by the client. ExpectedRevision nil is a blind write, 0 create-only, N > 0 compare-and-set. A
// *wire.Error means nothing was written; any other error leaves the outcome unknown (see the package
// documentation): read the key back before writing again.
func (c *Client) Put(ctx context.Context, req wire.PutRequest) (wire.Entry, error) {
	req.RequestID = c.nextID()
	res, err := c.call(ctx, wire.OpPut, req.RequestID, &req)
	if err != nil {
		return wire.Entry{}, err
	}
	if res.Entry == nil {
		return wire.Entry{}, protocolError(wire.OpPut, "no entry")
	}
	return *res.Entry, nil
}

// Delete removes one entry and returns the namespace revision of the delete. req.RequestID is set by
// the client. A missing key is wire.ErrNotFound. As for Put, an error that is no *wire.Error leaves
// the outcome unknown.
func (c *Client) Delete(ctx context.Context, req wire.DeleteRequest) (uint64, error) {
	req.RequestID = c.nextID()
	res, err := c.call(ctx, wire.OpDelete, req.RequestID, &req)
	if err != nil {
		return 0, err
	}
	if res.Revision == nil {
		return 0, protocolError(wire.OpDelete, "no revision")
	}
	return *res.Revision, nil
}

// ListResult is one page of a list: Entries in bytewise key order, NextAfterKey set only when more
// entries follow (pass it as the next request's AfterKey), and the namespace's revision.
type ListResult struct {
	Entries      []wire.Entry
	NextAfterKey string
	Revision     uint64
}

// List reads one page of live entries. req.RequestID is set by the client.
func (c *Client) List(ctx context.Context, req wire.ListRequest) (ListResult, error) {
	req.RequestID = c.nextID()
	res, err := c.call(ctx, wire.OpList, req.RequestID, &req)
	if err != nil {
		return ListResult{}, err
	}
	if res.Revision == nil {
		return ListResult{}, protocolError(wire.OpList, "no revision")
	}
	entries := res.Entries
	if entries == nil {
		entries = []wire.Entry{}
	}
	return ListResult{Entries: entries, NextAfterKey: res.NextAfterKey, Revision: *res.Revision}, nil
}

// Info returns the server's identity, epoch, features and bounds. Any principal may ask.
func (c *Client) Info(ctx context.Context) (wire.Info, error) {
	req := wire.InfoRequest{RequestID: c.nextID()}
	res, err := c.call(ctx, wire.OpInfo, req.RequestID, &req)
	if err != nil {
		return wire.Info{}, err
	}
	if res.Epoch != "" {
		c.epochMu.Lock()
		if c.epoch != "" && c.epoch != res.Epoch {
			c.changed = boottime.Now()
		}
		c.epoch = res.Epoch
		c.epochMu.Unlock()
	}
	info := wire.Info{ServerID: res.ServerID, Version: res.Version, Epoch: res.Epoch, Features: res.Features}
	if res.Bounds != nil {
		info.Bounds = *res.Bounds
	}
	return info, nil
}

// SinceEpochChange reports how long ago this client first saw the store's epoch epoch (from an info
// reply: its caches' and leases' too) replace another epoch it had seen: a restore (SPEC section 4)
// it witnessed. ok is false when epoch is not the last epoch it saw, or it saw no other before it.
// A lease claimed in the old epoch may still be acted on by its holder until it notices the restore
// (the restored store may not even hold it): lease.Claim waits a TTL from the change for that.
func (c *Client) SinceEpochChange(epoch string) (since time.Duration, ok bool) {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	if epoch == "" || epoch != c.epoch || c.changed.IsZero() {
		return 0, false
	}
	return boottime.Since(c.changed), true
}

// Ack acknowledges that every update of watchID up to seq was applied. An unknown (or closed) watch
// is wire.ErrNotFound; a sequence below an earlier ack or above the highest sent is
// wire.ErrInvalidArgument.
func (c *Client) Ack(ctx context.Context, watchID string, seq uint64) error {
	if seq > wire.MaxSafeInteger {
		return wire.Errorf(wire.CodeInvalidArgument, "applied_sequence %d is above 2^53-1", seq)
	}
	applied := int64(seq)
	req := wire.AckRequest{RequestID: c.nextID(), WatchID: watchID, AppliedSequence: &applied}
	res, err := c.call(ctx, wire.OpAck, req.RequestID, &req)
	if err != nil {
		return err
	}
	if res.AppliedSequence == nil {
		return protocolError(wire.OpAck, "no applied_sequence")
	}
	if res.WatchID != watchID || *res.AppliedSequence != seq {
		return protocolError(wire.OpAck, "acknowledges %q up to %d, sent %q up to %d", res.WatchID, *res.AppliedSequence, watchID, seq)
	}
	return nil
}

// startWatchRequest waits until no watch request for watchID is in flight (see watchBusy), then
// marks one as in flight, and returns the function that ends it; or returns ctx's error if ctx ends
// first, with nothing marked. A watch request must then be sent whatever happens to ctx (finish, not
// Finish), and release called once it is done with. Unwatch marks the id the same way while its
// request is out.
func (c *Client) startWatchRequest(ctx context.Context, watchID string) (release func(), err error) {
	for {
		c.watchMu.Lock()
		if err := ctx.Err(); err != nil {
			c.watchMu.Unlock()
			return nil, err
		}
		busy := c.watchBusy[watchID]
		if busy == nil {
			done := make(chan struct{})
			if c.watchBusy == nil {
				c.watchBusy = map[string]chan struct{}{}
			}
			c.watchBusy[watchID] = done
			c.watchMu.Unlock()
			return func() {
				c.watchMu.Lock()
				delete(c.watchBusy, watchID)
				c.watchMu.Unlock()
				close(done)
			}, nil
		}
		waits := c.watchWaits
		c.watchMu.Unlock()
		if waits != nil {
			waits(watchID)
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// reap unwatches a watch that a request cut short registered after its caller had given up on it.
func (c *Client) reap(watchID string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// The reaper holds the id's mark (see watchBusy): Unwatch would wait for itself.
	if err := c.unwatch(ctx, watchID); err != nil && !errors.Is(err, wire.ErrNotFound) && !errors.Is(err, nats.ErrConnectionClosed) {
		c.log.Warn("could not unwatch a watch registered after its request was given up", "watch_id", watchID, "err", err)
	}
}

// Unwatch removes a live watch of this principal; the server sends no close for it. An unknown (or
// already closed) watch is wire.ErrNotFound.
//
// A watch request of the same id still in flight (a Watch or a Cache's re-watch not answered yet, or
// one given up and not yet reaped) is waited for first, within ctx: an unwatch sent at once could
// reach the server before that request and find nothing, and the watch registered next would then
// stay, held by no one once the connection closes (a program that closes a Cache, or gives up on a
// watch, and then its connection). After the wait, a watch the given-up request registered has been
// unwatched already, and Unwatch answers NOT_FOUND.
func (c *Client) Unwatch(ctx context.Context, watchID string) error {
	return c.unwatchOf(ctx, watchID, nil)
}

// unwatchOf is Unwatch of watchID; with owner set (a raw Watch's Stop), only while owner is the Watch
// that registered the id last, checked holding the id, so that no watch request of it runs meanwhile:
// a newer Watch of the id, registered once the server closed owner's (its CLOSED perhaps not decoded
// yet), is not owner's to unwatch. An unwatch that leaves the id free forgets owner as its owner.
func (c *Client) unwatchOf(ctx context.Context, watchID string, owner *Watch) error {
	release, err := c.startWatchRequest(ctx, watchID)
	if err != nil {
		return fmt.Errorf("store/client: %s request on %s: %w", wire.OpUnwatch, c.requestSubject(wire.OpUnwatch), err)
	}
	defer release()
	if owner != nil {
		c.watchMu.Lock()
		newer := c.watchOwner[watchID] != owner
		c.watchMu.Unlock()
		if newer {
			return nil // owner's registration is gone from the server
		}
	}
	err = c.unwatch(ctx, watchID)
	if owner != nil && (err == nil || errors.Is(err, wire.ErrNotFound) || errors.Is(err, nats.ErrConnectionClosed)) {
		c.disown(owner)
	}
	return err
}

// unwatch sends the unwatch request without waiting for the id's watch requests (Unwatch).
func (c *Client) unwatch(ctx context.Context, watchID string) error {
	req := wire.UnwatchRequest{RequestID: c.nextID(), WatchID: watchID}
	res, err := c.call(ctx, wire.OpUnwatch, req.RequestID, &req)
	if err != nil {
		return err
	}
	if res.WatchID != watchID {
		return protocolError(wire.OpUnwatch, "names watch %q, sent %q", res.WatchID, watchID)
	}
	return nil
}
