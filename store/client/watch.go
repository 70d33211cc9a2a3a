package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// Watch is one live watch (SPEC section 7): the snapshot, then the updates and the final close in
// the order the server sent them. It is the raw primitive; a Cache keeps a watch gap-free for you.
//
// The user of a Watch owns its correctness: apply an update only when its watch_sequence is one above
// the last applied, Ack what was applied (the server closes a watch with more than
// max_pending_updates unacknowledged), and treat a gap, a CLOSED message, a closed channel and a NATS
// reconnect (messages published while disconnected are lost) as "watch again". Always call Stop.
// On a server that bounds idle watches (stated's watch_idle_ms), Ack (any sequence: one past the last
// applied is a probe, refused INVALID_ARGUMENT while nothing was lost) more often than the bound, even
// while nothing comes, or the server closes the watch with ACK_TIMEOUT as abandoned.
type Watch struct {
	c    *Client
	id   string
	snap *wire.WatchState
	sub  *nats.Subscription

	out      chan wire.WatchMessage
	done     chan struct{} // closed by halt: unblocks a pending delivery
	haltOnce sync.Once

	mu    sync.RWMutex // held for reading while delivering, for writing to end
	ended bool
	err   error

	// serverClosed is set once a CLOSED message arrived: the server has dropped the watch and its id
	// is free again (SPEC section 7.6), perhaps already taken by a newer watch that Stop must not
	// unwatch.
	serverClosed atomic.Bool

	stopMu sync.Mutex
	local  bool // Messages closed and the subscription gone
	gone   bool // the server no longer has the watch (unwatched, or already closed)
}

// Watch subscribes to the watch's delivery subject, then sends the watch request, so that no update
// sent after the snapshot can be missed; updates that arrive before the reply wait until it is in.
// req.RequestID is set by the client; req.WatchID must be a valid watch id (it is a subject token).
//
// A watch request of the same id still in flight on this client (one given up, whose late
// registration is being unwatched) is waited for first, within ctx, and the subscription made only
// then: that registration's updates and close, sent on the same subject, never reach the new watch.
func (c *Client) Watch(ctx context.Context, req wire.WatchRequest) (*Watch, error) {
	if !wire.ValidWatchID(req.WatchID) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "invalid watch_id %q", req.WatchID)
	}
	w := &Watch{c: c, id: req.WatchID, out: make(chan wire.WatchMessage, 32), done: make(chan struct{})}
	subscribe := func() error {
		sub, err := c.nc.Subscribe(c.watchSubject(req.WatchID), w.deliver)
		if err != nil {
			return fmt.Errorf("store/client: subscribe to watch %s: %w", req.WatchID, err)
		}
		w.sub = sub
		// A subscription that ends otherwise than by Stop (the connection closed for good) delivers
		// nothing more: Messages is closed then, so a reader ranging over it is not left waiting
		// forever. nats.go calls the handler once the subscription's delivery goroutine has
		// returned; a connection closed before the handler was set is seen by the check after it.
		sub.SetClosedHandler(func(string) { w.end(w.subscriptionEnded()) })
		if c.nc.IsClosed() {
			w.end(w.subscriptionEnded())
		}
		return nil
	}
	registered := func() {
		c.watchMu.Lock()
		if c.watchOwner == nil {
			c.watchOwner = map[string]*Watch{}
		}
		c.watchOwner[req.WatchID] = w
		c.watchMu.Unlock()
	}
	ws, err := c.watchRequest(ctx, req, subscribe, registered)
	if err != nil {
		w.halt()
		if w.sub != nil {
			_ = w.sub.Unsubscribe()
		}
		w.end(nil)
		return nil, err
	}
	w.snap = ws
	return w, nil
}

// watchRequest sends the watch request and checks the reply names the watch asked for.
//
// A watch request whose ctx ends before its reply may still register the watch on the server, which
// would then hold the id and one of the principal's watch slots until it closed the watch itself.
// So the request runs on, in the background, until its reply comes (or the later of ctx's deadline
// and the client's request timeout passes); a watch its reply says was registered is then unwatched.
// An unwatch sent at once instead could reach the server before the watch it means. Until then, the
// next watch request of the id waits (startWatchRequest).
//
// before (if not nil) runs once the id is this request's, before anything is sent: a subscription to
// the id's delivery subject made there misses no update of the watch, and sees none of an earlier
// registration of the id (whose unwatch was answered, after all its messages, before the id was
// free). An error of before ends the request unsent. registered (if not nil) runs when the reply
// registered the watch, before the id is free for the next request.
func (c *Client) watchRequest(ctx context.Context, req wire.WatchRequest, before func() error, registered func()) (*wire.WatchState, error) {
	req.RequestID = c.nextID()
	release, err := c.startWatchRequest(ctx, req.WatchID)
	if err != nil {
		// Nothing is sent.
		return nil, fmt.Errorf("store/client: %s request on %s: %w", wire.OpWatch, c.requestSubject(wire.OpWatch), err)
	}
	if before != nil {
		if err := before(); err != nil {
			release()
			return nil, err
		}
	}
	// Marked as in flight, it is sent even if ctx ends from here on, and then reaped like any request
	// given up: Finish, which sends nothing once ctx has ended, would never call late, and the id
	// would stay marked.
	res, gaveUp, err := finish(ctx, c, func(rctx context.Context) (wire.Result, error) {
		return c.call(rctx, wire.OpWatch, req.RequestID, &req)
	}, func(_ wire.Result, err error) {
		defer release()
		if err == nil {
			c.reap(req.WatchID)
		}
	})
	if gaveUp { // late releases the id
		return nil, fmt.Errorf("store/client: %s request on %s: %w", wire.OpWatch, c.requestSubject(wire.OpWatch), err)
	}
	defer release()
	if err != nil {
		return nil, err
	}
	if res.Watch == nil {
		return nil, protocolError(wire.OpWatch, "no watch")
	}
	ws := res.Watch
	if ws.WatchID != req.WatchID || ws.Namespace != req.Namespace || ws.KeyPrefix != req.KeyPrefix {
		return nil, protocolError(wire.OpWatch, "watch %q on %s prefix %q answers a request for %q on %s prefix %q",
			ws.WatchID, ws.Namespace, ws.KeyPrefix, req.WatchID, req.Namespace, req.KeyPrefix)
	}
	if ws.Entries == nil {
		ws.Entries = []wire.Entry{}
	}
	if registered != nil {
		registered()
	}
	return ws, nil
}

// decodeWatchMessage decodes one message of watchID's delivery subject (tolerating fields a newer
// server may add) and checks that it is a well-formed update or close of that watch.
func decodeWatchMessage(watchID string, data []byte) (wire.WatchMessage, error) {
	var m wire.WatchMessage
	if err := wire.DecodeWatchMessage(data, &m); err != nil {
		return m, fmt.Errorf("watch message does not decode: %v", err)
	}
	if m.WatchID != watchID {
		return m, fmt.Errorf("watch message names watch %q, expected %q", m.WatchID, watchID)
	}
	switch m.Kind {
	case wire.UpdateClosed:
		if m.Reason == "" {
			return m, errors.New("CLOSED message without a reason")
		}
	case wire.UpdatePut, wire.UpdateDelete, wire.UpdateExpire:
		if m.WatchSequence == 0 {
			return m, fmt.Errorf("%s update without a watch_sequence", m.Kind)
		}
		if m.Key == "" {
			return m, fmt.Errorf("%s update without a key", m.Kind)
		}
		if (m.Kind == wire.UpdatePut) != (m.Entry != nil) {
			return m, fmt.Errorf("%s update with entry %v", m.Kind, m.Entry != nil)
		}
	default:
		return m, fmt.Errorf("watch message of unknown kind %q", m.Kind)
	}
	return m, nil
}

// deliver is the subscription callback: it runs on the subscription's own goroutine, one message at
// a time, and may block until the reader takes the message or Stop is called.
func (w *Watch) deliver(msg *nats.Msg) {
	m, err := decodeWatchMessage(w.id, msg.Data)
	w.mu.RLock()
	if w.ended {
		w.mu.RUnlock()
		return
	}
	if err == nil {
		if m.Kind == wire.UpdateClosed {
			w.serverClosed.Store(true) // before the reader can see the close and reuse the id
		}
		select {
		case w.out <- m:
		case <-w.done:
		}
	}
	w.mu.RUnlock()
	switch {
	case err != nil:
		w.c.log.Warn("state watch ended on a bad message", "watch_id", w.id, "err", err)
		w.end(err)
	case m.Kind == wire.UpdateClosed:
		w.end(nil)
	}
}

// subscriptionEnded is Err's value for a subscription that ended without Stop. (When Stop or a failed
// Watch ended it, Messages is closed already, and end keeps the nil error it closed it with.)
func (w *Watch) subscriptionEnded() error {
	if w.c.nc.IsClosed() {
		return fmt.Errorf("store/client: watch %s: %w", w.id, nats.ErrConnectionClosed)
	}
	return fmt.Errorf("store/client: watch %s: the subscription to its delivery subject ended", w.id)
}

// halt unblocks a pending delivery; nothing more is delivered.
func (w *Watch) halt() { w.haltOnce.Do(func() { close(w.done) }) }

// end closes Messages once, recording why.
func (w *Watch) end(err error) {
	w.halt() // first: a blocked delivery returns and releases its read lock
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.ended, w.err = true, err
		close(w.out)
	}
}

// ID returns the watch id.
func (w *Watch) ID() string { return w.id }

// Snapshot returns the atomic snapshot the watch started from: the entries at snapshot_revision.
func (w *Watch) Snapshot() *wire.WatchState { return w.snap }

// Messages returns the updates (watch_sequence 1, 2, ...) and the final CLOSED message, in arrival
// order. The channel is closed after the CLOSED message, when Stop is called, when a message
// arrives that does not decode, or when the subscription ends otherwise, as when the NATS connection
// is closed (Err then says why).
func (w *Watch) Messages() <-chan wire.WatchMessage { return w.out }

// Err returns why Messages was closed early: a message that did not decode or named another watch,
// or the NATS connection closed (errors.Is(err, nats.ErrConnectionClosed)). It is nil while the
// watch runs and after a CLOSED message or Stop.
func (w *Watch) Err() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.err
}

// Ack acknowledges every update up to seq.
func (w *Watch) Ack(ctx context.Context, seq uint64) error { return w.c.Ack(ctx, w.id, seq) }

// Stop unwatches, unsubscribes and closes Messages. A watch whose CLOSED message arrived, or whose id
// a newer Watch of this client has registered since (the server closed this one), is not unwatched:
// the id is free again, or the newer watch's; a watch the server already closed otherwise (NOT_FOUND
// from unwatch) is not an error. Messages is closed and the
// subscription ended by the first call, whatever happens; if the unwatch failed (ctx ended, no answer), the server may still hold the watch
// and Stop returns the error: call it again to retry. Once an unwatch succeeded, Stop returns nil.
func (w *Watch) Stop(ctx context.Context) error {
	w.stopMu.Lock()
	defer w.stopMu.Unlock()
	var err error
	if w.serverClosed.Load() {
		w.gone = true
		w.c.disown(w)
	}
	if !w.gone {
		err = w.c.unwatchOf(ctx, w.id, w)
		if err == nil || errors.Is(err, wire.ErrNotFound) || errors.Is(err, nats.ErrConnectionClosed) {
			err, w.gone = nil, true // with the connection gone, nothing more can be done from here
		}
	}
	if !w.local {
		w.local = true
		w.end(nil)
		if uerr := w.sub.Unsubscribe(); uerr != nil && !errors.Is(uerr, nats.ErrConnectionClosed) && !errors.Is(uerr, nats.ErrBadSubscription) {
			err = errors.Join(err, fmt.Errorf("store/client: unsubscribe watch %s: %w", w.id, uerr))
		}
	}
	return err
}

// disown forgets w as its id's owner, if it still is.
func (c *Client) disown(w *Watch) {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.watchOwner[w.id] == w {
		delete(c.watchOwner, w.id)
	}
}
