package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Refetch backoff bounds: a failed fetch, or one that returned an older generation than announced, is
// retried after TrackerOptions.RefetchBackoff (default DefaultRefetchBackoff), each further retry twice
// as long, up to MaxRefetchBackoff.
const (
	DefaultRefetchBackoff = 100 * time.Millisecond
	MaxRefetchBackoff     = 5 * time.Second
)

// TrackerOptions configure a Tracker. Every field is optional.
type TrackerOptions struct {
	// Prefix is the subject prefix. Default DefaultPrefix ("kp").
	Prefix string
	// Logger logs fetch failures and installed generations. Default: discard.
	Logger *slog.Logger
	// RefetchBackoff is the wait before the first retry of a fetch that failed or came back older than
	// announced; it doubles per retry up to MaxRefetchBackoff. Default DefaultRefetchBackoff.
	RefetchBackoff time.Duration
	// FetchTimeout bounds one `caps.v1.get` request. Default DefaultRequestTimeout (5 s).
	FetchTimeout time.Duration
}

// Tracker keeps the latest ServerCapabilities of the media server (SPEC section 12). It follows
// `<prefix>.caps.v1.changed`: any announced generation above the one it holds makes it fetch the whole
// capabilities (a gap is therefore harmless: it fetches the latest), as does every NATS reconnect. A
// fetched snapshot is installed only when its generation is above the one held, so generations only
// grow; when it is still below the highest generation announced, the fetch is retried with backoff.
//
// Its methods are safe for concurrent use. Start it once, Stop it when done.
type Tracker struct {
	nc       *nats.Conn
	prefix   string
	log      *slog.Logger
	backoff0 time.Duration
	timeout  time.Duration
	optErr   error

	mu        sync.Mutex
	caps      *ServerCapabilities // installed snapshot; never modified; nil before the first
	announced uint64              // highest generation announced on changed
	changed   chan struct{}       // closed and replaced on every install
	notify    map[chan struct{}]struct{}
	started   bool

	kick    chan struct{} // a fetch is wanted (cap 1)
	stopped chan struct{} // closed by Stop
	ended   chan struct{} // closed once the tracker follows nothing more: Stop, or its connection closed
	endErr  error         // what waits return once ended is closed; set under mu before it closes
	stop    sync.Once
	cancel  context.CancelFunc // ends run; set by Start
	done    chan struct{}      // closed when run returns; set by Start

	onFetch func(gen uint64, err error) // test hook: called after every fetch
}

// NewTracker returns a tracker of the capabilities published over nc. It does nothing until Start.
func NewTracker(nc *nats.Conn, opts TrackerOptions) *Tracker {
	t := &Tracker{
		nc: nc, prefix: opts.Prefix, log: opts.Logger, backoff0: opts.RefetchBackoff, timeout: opts.FetchTimeout,
		changed: make(chan struct{}), notify: map[chan struct{}]struct{}{},
		kick: make(chan struct{}, 1), stopped: make(chan struct{}), ended: make(chan struct{}),
	}
	if t.prefix == "" {
		t.prefix = DefaultPrefix
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.backoff0 == 0 {
		t.backoff0 = DefaultRefetchBackoff
	}
	if t.timeout == 0 {
		t.timeout = DefaultRequestTimeout
	}
	switch {
	case nc == nil:
		t.optErr = errors.New("capabilities: nil NATS connection")
	case !ValidPrefix(t.prefix):
		t.optErr = fmt.Errorf("capabilities: invalid subject prefix %q", t.prefix)
	case t.backoff0 < 0:
		t.optErr = fmt.Errorf("capabilities: negative RefetchBackoff %v", t.backoff0)
	case t.timeout < 0:
		t.optErr = fmt.Errorf("capabilities: negative FetchTimeout %v", t.timeout)
	}
	t.backoff0 = min(t.backoff0, MaxRefetchBackoff)
	return t
}

// Start subscribes to capability changes and fetches the capabilities, retrying with backoff until a
// snapshot is installed. It returns nil once the first snapshot is in; if ctx ends first, the
// subscription fails or the NATS connection is closed, it stops the tracker and returns the error
// (ErrTrackerStopped wrapping nats.ErrConnectionClosed for the last). ctx bounds only this wait: the
// tracker runs until Stop. Start may be called once.
func (t *Tracker) Start(ctx context.Context) error {
	if t.optErr != nil {
		return t.optErr
	}
	t.mu.Lock()
	if t.started {
		t.mu.Unlock()
		return errors.New("capabilities: tracker already started")
	}
	select {
	case <-t.stopped:
		t.mu.Unlock()
		return ErrTrackerStopped
	default:
	}
	t.started = true
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.cancel, t.done = cancel, done
	t.mu.Unlock()

	first := make(chan error, 1)
	go t.run(lctx, first)
	select {
	case err := <-first:
		if err != nil {
			t.Stop()
			return err
		}
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-done:
		select {
		case err := <-first: // run reported before it returned
			return err
		default:
			return ErrTrackerStopped
		}
	}
}

// Stop ends the tracker: it unsubscribes and stops its goroutine. The last snapshot stays readable;
// waits return ErrTrackerStopped. Stop may be called more than once, and before Start. A tracker whose
// NATS connection was closed for good has stopped following by itself: its waits return
// ErrTrackerStopped wrapping nats.ErrConnectionClosed; Stop is still called to release it.
func (t *Tracker) Stop() {
	t.stop.Do(func() {
		t.mu.Lock()
		close(t.stopped) // under mu: a Start that has not registered yet sees it
		t.endLocked(ErrTrackerStopped)
		cancel, done := t.cancel, t.done
		t.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	})
}

// endLocked ends the waits with err, unless they were ended before. t.mu must be held.
func (t *Tracker) endLocked(err error) {
	select {
	case <-t.ended:
	default:
		t.endErr = err
		close(t.ended)
	}
}

// errConnClosed is what the waits (and a Start still waiting) return once the tracker's NATS
// connection is closed for good: no announcement or fetch can come any more.
var errConnClosed = fmt.Errorf("%w: its NATS connection is closed: %w", ErrTrackerStopped, nats.ErrConnectionClosed)

// onChanged handles a `changed` announcement (on the NATS subscription's goroutine).
func (t *Tracker) onChanged(m *nats.Msg) {
	var c Changed
	if err := json.Unmarshal(m.Data, &c); err != nil {
		t.log.Warn("capabilities: malformed changed message; fetching", "error", err)
		t.wantFetch()
		return
	}
	t.mu.Lock()
	held := t.heldLocked()
	fetch := t.caps == nil || c.Generation > held
	if c.Generation > t.announced {
		t.announced = c.Generation
	}
	t.mu.Unlock()
	if fetch {
		t.wantFetch()
	}
}

// Refresh asks for a fetch of the capabilities now, as a gap in the announced generations does. Call it
// when the media server refuses a command in a way the snapshot does not explain (SOURCE_UNAVAILABLE
// for a session it shows online, VARIANT_NOT_READY for a variant it shows READY): announcements are
// NATS messages, delivered at most once, and one that was lost leaves the tracker behind until the
// next. Refresh does not wait; WaitGeneration, WaitFor or Subscribe tell when a newer snapshot is in.
func (t *Tracker) Refresh() { t.wantFetch() }

func (t *Tracker) wantFetch() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *Tracker) heldLocked() uint64 {
	if t.caps == nil {
		return 0
	}
	return t.caps.Generation
}

// run subscribes to announcements and reconnects, then fetches whenever one is wanted, retrying with
// backoff, until ctx ends or the NATS connection is closed for good (then it ends the waits, which
// could otherwise only wait for their contexts). It reports on first the subscription's failure, the
// closed connection or, once, that the first snapshot is installed.
func (t *Tracker) run(ctx context.Context, first chan<- error) {
	defer close(t.done)
	sub, err := t.nc.Subscribe(ChangedSubject(t.prefix), t.onChanged)
	if err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) || t.nc.IsClosed() {
			// Closed before Start: as when it closes later, the waits say so.
			t.mu.Lock()
			t.endLocked(errConnClosed)
			t.mu.Unlock()
			first <- errConnClosed
			return
		}
		first <- fmt.Errorf("capabilities: subscribe %s: %w", ChangedSubject(t.prefix), err)
		return
	}
	status := t.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	closedConn := func() {
		t.log.Warn("capabilities: NATS connection closed; the tracker stops following")
		t.mu.Lock()
		t.endLocked(errConnClosed)
		t.mu.Unlock()
		if first != nil {
			first <- errConnClosed
		}
	}
	defer func() {
		_ = sub.Unsubscribe()
		t.nc.RemoveStatusListener(status)
	}()
	var (
		backoff time.Duration
		retry   *time.Timer
		retryC  <-chan time.Time
	)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	fetch := true
	for {
		if fetch {
			fetch = false
			if retry != nil {
				retry.Stop()
				retry, retryC = nil, nil
			}
			caughtUp, err := t.fetchOnce(ctx)
			if ctx.Err() != nil {
				return
			}
			if first != nil && t.hasSnapshot() {
				first <- nil
				first = nil
			}
			if errors.Is(err, nats.ErrConnectionClosed) || t.nc.IsClosed() {
				closedConn()
				return
			}
			if err != nil || !caughtUp {
				if backoff == 0 {
					backoff = t.backoff0
				} else {
					backoff = min(2*backoff, MaxRefetchBackoff)
				}
				if err != nil {
					t.log.Warn("capabilities: fetch failed; retrying", "error", err, "retry_in", backoff)
				} else {
					t.log.Debug("capabilities: fetched generation is behind the announced one; retrying", "retry_in", backoff)
				}
				retry = time.NewTimer(backoff)
				retryC = retry.C
			} else {
				backoff = 0
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
			fetch = true
		case s, ok := <-status:
			if !ok {
				status = nil
				continue
			}
			if s == nats.CLOSED || t.nc.IsClosed() {
				closedConn()
				return
			}
			t.log.Debug("capabilities: NATS reconnected; fetching")
			fetch = true
		case <-retryC:
			retry, retryC = nil, nil
			fetch = true
		}
	}
}

func (t *Tracker) hasSnapshot() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.caps != nil
}

// fetchOnce requests the capabilities and installs them when newer. caughtUp reports whether the
// tracker now holds at least the highest announced generation.
func (t *Tracker) fetchOnce(ctx context.Context) (caughtUp bool, err error) {
	var gen uint64
	defer func() {
		if t.onFetch != nil {
			t.onFetch(gen, err)
		}
	}()
	if t.nc.IsClosed() {
		return false, nats.ErrConnectionClosed
	}
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	msg, err := t.nc.RequestWithContext(rctx, GetSubject(t.prefix), nil)
	if err != nil {
		return false, fmt.Errorf("capabilities: fetch %s: %w", GetSubject(t.prefix), err)
	}
	caps, err := decodeCapabilities(msg.Data)
	if err != nil {
		return false, err
	}
	gen = caps.Generation
	t.install(caps)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.caps != nil && t.caps.Generation >= t.announced, nil
}

// decodeCapabilities decodes a reply of caps.v1.get. A reply that is not a ServerCapabilities, a JSON
// object with its generation, is an error: a media server that refuses the fetch (with a bare
// {code, message} or an {"ok":false,...} envelope) or answers null must not be taken for one that
// knows no source. Fields the model does not know are ignored; missing ones read as their zero value.
func decodeCapabilities(data []byte) (*ServerCapabilities, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("capabilities: malformed capabilities: not a JSON object (%.64q)", data)
	}
	if g, ok := fields["generation"]; !ok || string(g) == "null" {
		var refusal struct {
			Error   *Error `json:"error"`
			Code    Code   `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &refusal) // best effort: only to say why
		switch {
		case refusal.Error != nil && refusal.Error.Code != "":
			return nil, fmt.Errorf("capabilities: the media server refused the fetch: %w", refusal.Error)
		case refusal.Code != "":
			return nil, fmt.Errorf("capabilities: the media server refused the fetch: %w", &Error{Code: refusal.Code, Message: refusal.Message})
		}
		return nil, fmt.Errorf("capabilities: malformed capabilities: no generation (%.64q)", data)
	}
	var caps ServerCapabilities
	if err := json.Unmarshal(data, &caps); err != nil {
		return nil, fmt.Errorf("capabilities: malformed capabilities: %w", err)
	}
	return &caps, nil
}

// isJSONObject reports whether data, valid JSON, is an object.
func isJSONObject(data []byte) bool {
	for _, b := range data {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b == '{'
	}
	return false
}

// install makes caps the current snapshot if it is the first or newer than the one held, and wakes
// waiters and subscribers. It reports whether it installed caps. caps must not be modified afterwards.
func (t *Tracker) install(caps *ServerCapabilities) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.caps != nil && caps.Generation <= t.caps.Generation {
		return false
	}
	t.caps = caps
	close(t.changed)
	t.changed = make(chan struct{})
	for ch := range t.notify {
		select {
		case ch <- struct{}{}:
		default: // a notification is already pending: coalesced
		}
	}
	t.log.Debug("capabilities: installed", "generation", caps.Generation, "sources", len(caps.Sources))
	return true
}

// Current returns a copy of the latest capabilities; the zero value (Generation 0, no sources) before
// the first snapshot.
func (t *Tracker) Current() ServerCapabilities {
	t.mu.Lock()
	c := t.caps
	t.mu.Unlock()
	if c == nil {
		return ServerCapabilities{}
	}
	return c.Clone()
}

// Generation returns the generation of the latest capabilities; 0 before the first snapshot.
func (t *Tracker) Generation() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.heldLocked()
}

// Resolve returns the current session of the source whose stable id is sourceID. ok is false when the
// capabilities list no such source (or none are in yet). When online is false the source is
// disconnected and sessionID is its last, stale session: commands naming it fail with
// ErrSourceUnavailable; wait for a snapshot showing it online with a new session.
func (t *Tracker) Resolve(sourceID string) (sessionID string, online bool, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.caps == nil {
		return "", false, false
	}
	s, ok := t.caps.Source(sourceID)
	if !ok {
		return "", false, false
	}
	return s.SessionID, s.Online, true
}

// Subscribe returns a channel that receives a notification whenever a new generation is installed,
// and a function that ends the subscription. Notifications are coalesced (the channel holds at most
// one; a slow reader gets one for any number of installs) and never block the tracker. Read Current
// after a notification; subscribe before the first read so that no change falls in between. The
// channel is not closed, not even by cancel or Stop.
func (t *Tracker) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	t.notify[ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		delete(t.notify, ch)
		t.mu.Unlock()
	}
}

// WaitFor returns once cond is true of an installed snapshot. cond is called with the snapshot held
// when WaitFor is called (if any) and then with the latest snapshot each time it wakes after an
// install: snapshots installed while cond runs, or in quick succession, are seen only as the last of
// them (as the tracker itself sees only the generations it fetches), so cond should test a state,
// not wait for a passing one. It must not modify or keep the snapshot, and runs on the caller's
// goroutine. WaitFor returns ctx's error when ctx ends first and
// ErrTrackerStopped when the tracker stops (wrapping nats.ErrConnectionClosed when its connection
// closed for good).
func (t *Tracker) WaitFor(ctx context.Context, cond func(*ServerCapabilities) bool) error {
	return t.waitFor(ctx, func(c *ServerCapabilities) (bool, error) { return cond(c), nil })
}

func (t *Tracker) waitFor(ctx context.Context, f func(*ServerCapabilities) (bool, error)) error {
	var last *ServerCapabilities
	for {
		t.mu.Lock()
		caps, ch := t.caps, t.changed
		t.mu.Unlock()
		if caps != nil && caps != last {
			last = caps
			done, err := f(caps)
			if err != nil {
				return err
			}
			if done {
				return nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.ended:
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.endErr
		}
	}
}

// WaitGeneration returns once the tracker holds generation gen or a later one.
func (t *Tracker) WaitGeneration(ctx context.Context, gen uint64) error {
	return t.WaitFor(ctx, func(c *ServerCapabilities) bool { return c.Generation >= gen })
}

// WaitVariant returns the variant once the capabilities show it in state want. While it is absent or
// in another state it waits, waking on each new snapshot; when it is FAILED (and want is not FAILED)
// it returns a *VariantFailedError (errors.Is(err, ErrVariantFailed)). A READY variant counts only
// while its source is online: nothing of an offline source can be subscribed to, whatever state a
// media server keeps listing for its variants, so a wait for READY also waits for the source. It
// returns ctx's error when ctx ends first and ErrTrackerStopped when the tracker stops.
//
// A snapshot taken before a command the caller just sent may still show the variant's previous state:
// a variant that FAILED, restarted with StartPublication, fails this wait until the tracker has
// fetched the restart; wait for the variant to leave FAILED first (WaitFor) when that matters.
func (t *Tracker) WaitVariant(ctx context.Context, sourceID, streamID, variantID string, want VariantState) (Variant, error) {
	var got Variant
	err := t.waitFor(ctx, func(c *ServerCapabilities) (bool, error) {
		src, ok := c.Source(sourceID)
		if !ok {
			return false, nil
		}
		st, ok := src.Stream(streamID)
		if !ok {
			return false, nil
		}
		v, ok := st.Variant(variantID)
		if !ok {
			return false, nil
		}
		if v.State == want {
			if want == StateReady && !src.Online {
				return false, nil
			}
			got = v
			return true, nil
		}
		if v.State == StateFailed {
			return false, &VariantFailedError{SourceID: sourceID, StreamID: streamID, Variant: v}
		}
		return false, nil
	})
	return got, err
}

// WaitReady is WaitVariant with want READY: it returns once the variant can be subscribed to (READY,
// its source online), and a *VariantFailedError when it is FAILED.
func (t *Tracker) WaitReady(ctx context.Context, sourceID, streamID, variantID string) (Variant, error) {
	return t.WaitVariant(ctx, sourceID, streamID, variantID, StateReady)
}
