package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// DefaultResyncInterval is how long a caught-up tracker goes without a fetch, by default, before it
// fetches unasked (TrackerOptions.ResyncInterval). By default a snapshot that no fetch confirmed for
// three of these intervals is stale (TrackerOptions.StaleAfter), as a worker's status entry expires
// after three of its heartbeat intervals (SPEC section 11).
const DefaultResyncInterval = 10 * time.Second

// maxFetchesInFlight bounds the fetches a tracker has outstanding at once: a fetch the media server
// never answers does not hold back a newer one, and a flood of announcements is no flood of requests.
const maxFetchesInFlight = 4

// TrackerOptions configure a Tracker. Every field is optional.
type TrackerOptions struct {
	// Prefix is the subject prefix. Default DefaultPrefix ("kp").
	Prefix string
	// Logger logs fetch failures (a warning for each new failure, repeats at Debug until a fetch
	// succeeds) and installed generations. Default: discard.
	Logger *slog.Logger
	// RefetchBackoff is the wait before the first retry of a fetch that failed or came back older than
	// announced; it doubles per retry up to MaxRefetchBackoff. Default DefaultRefetchBackoff.
	RefetchBackoff time.Duration
	// FetchTimeout bounds one `caps.v1.get` request. Default DefaultRequestTimeout (5 s).
	FetchTimeout time.Duration
	// ResyncInterval is how long the tracker, caught up, goes without a fetch before it fetches again
	// unasked: announcements are delivered at most once, and a media server that dies silently
	// announces nothing. Default DefaultResyncInterval (10 s). Negative: no periodic fetch, and then
	// no StaleAfter bound either (StaleAfter must not be positive).
	ResyncInterval time.Duration
	// StaleAfter bounds how long the snapshot held stays current without a fetch that confirms it (one
	// answering its generation or a later one); past it the snapshot is stale (see Tracker.Stale).
	// Default three ResyncIntervals, and at least ResyncInterval + FetchTimeout; a smaller value is
	// refused, since a media server answering every periodic fetch in time would then read as stale.
	// Negative: no bound (a fetch that finds no responder still makes the snapshot stale).
	StaleAfter time.Duration
}

// Tracker keeps the latest ServerCapabilities of the media server (SPEC section 12). It follows
// `<prefix>.caps.v1.changed`: any announced generation above the one it holds makes it fetch the whole
// capabilities (a gap is therefore harmless: it fetches the latest), as does every NATS reconnect and,
// once it is caught up, every ResyncInterval without a fetch (announcements are delivered at most
// once). A fetched snapshot is installed only when its generation is above the one held, so
// generations only grow; when it is still below the highest generation announced, the fetch is
// retried with backoff. Fetches do not queue behind one another: an announcement above the one the
// newest fetch was sent for (or, while the tracker is behind, any above the generation held: the
// one it is behind may never be answered), a Refresh or a reconnect sends a new fetch at once, even while an
// earlier one is still unanswered (a reply lost, a media server stopping with the request in hand),
// and whichever answers first is installed.
//
// Liveness: a media server that dies or hangs announces nothing, and its last snapshot (sources
// online, variants READY) must not stay current for ever. The snapshot held becomes stale when a
// fetch finds no responder on caps.v1.get (nobody serves the capabilities: the media server is
// gone), or when no fetch has confirmed it for StaleAfter (the media server hangs or cannot be
// reached). While it is stale, the tracker shows it with every source offline: Current, Resolve and
// the waits see that view (Generation is unchanged), since what the media server has is unknown and
// nothing of it can be acted on. A wait for READY therefore waits, and a reconciler reading Current
// finds its sources unavailable rather than its publications active. The first fetch that confirms
// the snapshot, or brings a newer one, makes it current again, unless it was sent before a fetch that
// found no responder: a media server that stops may answer the requests it held once it is gone
// (a drain does), and such an answer is installed if newer but leaves the snapshot stale. A NATS
// connection closed for good leaves it stale for good.
//
// A media server goes back when it restarts and starts its generations over (SPEC section 12 wants them
// to keep growing across restarts: start it after the generations it announced), or when a second one
// answers caps.v1.get beside it (a misconfiguration: each fetch takes whichever answer comes first,
// and a command may be carried out by both). The tracker finds it out from an answer below the
// generation it held when it sent the fetch, or of the generation it holds with other capabilities,
// and makes the snapshot stale at once (the snapshot held is not the media server's, and generations
// do not go backwards here either, so the answer is not installed). It stays stale until a newer
// generation is installed or a fetch confirms it: after a restart that started over, until the new
// instance's generations pass the one held; beside a second media server, until the one ahead
// answers again (the tracker then goes stale and current in turn, with a warning each time it goes
// stale). Stale tells which view is shown, Snapshot
// returns the view and Stale together (read apart, they may straddle a change); Subscribe notifies
// both changes.
//
// Its methods are safe for concurrent use. Start it once, Stop it when done.
type Tracker struct {
	nc         *nats.Conn
	prefix     string
	log        *slog.Logger
	backoff0   time.Duration
	timeout    time.Duration
	resync     time.Duration // <0: no periodic fetch
	staleAfter time.Duration // <0: no time bound
	optErr     error

	mu        sync.Mutex
	caps      *ServerCapabilities // installed snapshot, as fetched; never modified; nil before the first
	view      *ServerCapabilities // what readers see: caps, or while stale a copy with every source offline
	stale     bool                // view is the offline copy of caps
	announced uint64              // highest generation announced on changed
	forced    bool                // a fetch sent after now is wanted, whatever is in flight (Refresh)
	changed   chan struct{}       // closed and replaced whenever view changes
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
// Invalid options make Start fail.
func NewTracker(nc *nats.Conn, opts TrackerOptions) *Tracker {
	t := &Tracker{
		nc: nc, prefix: opts.Prefix, log: opts.Logger, backoff0: opts.RefetchBackoff, timeout: opts.FetchTimeout,
		resync: opts.ResyncInterval, staleAfter: opts.StaleAfter,
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
	if t.resync == 0 {
		t.resync = DefaultResyncInterval
	}
	if t.staleAfter == 0 {
		t.staleAfter = -1
		if t.resync > 0 {
			t.staleAfter = max(3*t.resync, t.resync+t.timeout)
		}
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
	case t.resync < 0 && t.staleAfter > 0:
		t.optErr = fmt.Errorf("capabilities: StaleAfter %v without a ResyncInterval: a quiet media server would read as stale", t.staleAfter)
	case t.staleAfter > 0 && t.staleAfter < t.resync+t.timeout:
		t.optErr = fmt.Errorf("capabilities: StaleAfter %v below ResyncInterval %v + FetchTimeout %v: a media server answering in time would read as stale",
			t.staleAfter, t.resync, t.timeout)
	}
	t.backoff0 = min(t.backoff0, MaxRefetchBackoff)
	return t
}

// Start subscribes to capability changes and fetches the capabilities, retrying with backoff until a
// snapshot is installed. It returns nil once the first snapshot is in (stale, see Stale, when it
// answers a fetch sent before another found no media server answering); if ctx ends first, the
// subscription fails or the NATS connection is closed, it stops the tracker and returns the error
// (ErrTrackerStopped wrapping nats.ErrConnectionClosed for the last). ctx bounds only this wait: the
// tracker runs until Stop. Start may be called once; after Stop it returns ErrTrackerStopped.
func (t *Tracker) Start(ctx context.Context) error {
	if t.optErr != nil {
		return t.optErr
	}
	t.mu.Lock()
	select {
	case <-t.stopped: // whether or not it ran: ErrTrackerStopped promises this answer after Stop
		t.mu.Unlock()
		return ErrTrackerStopped
	default:
	}
	if t.started {
		t.mu.Unlock()
		return errors.New("capabilities: tracker already started")
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
			if err != nil {
				t.Stop() // as in the first case: the waits end too
			}
			return err
		default:
			t.Stop()
			return ErrTrackerStopped
		}
	}
}

// Stop ends the tracker: it unsubscribes, stops its goroutine and abandons the fetches in flight. The
// last snapshot stays readable as it was (no longer refreshed, never made stale); every wait returns
// ErrTrackerStopped, even one the last snapshot would satisfy. Stop may be called more than once, and
// before Start. A tracker whose NATS connection was closed for good has stopped following by itself:
// its snapshot is stale from then on (every source offline, see Stale), since nothing can confirm
// it, and its waits return ErrTrackerStopped wrapping nats.ErrConnectionClosed; Stop is still called
// to release it.
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
		// It may announce anything, a generation above every fetch in flight included.
		t.log.Warn("capabilities: malformed changed message; fetching", "error", err)
		t.Refresh()
		return
	}
	t.mu.Lock()
	held := t.heldLocked()
	fetch := t.caps == nil || c.Generation > held
	if t.stale && c.Generation == held {
		// The media server is back: confirm the stale snapshot now, not at the next retry.
		fetch, t.forced = true, true
	}
	if c.Generation > t.announced {
		t.announced = c.Generation
	} else if c.Generation > held {
		// Above the one held, not above one announced before: the tracker is behind, waiting for a
		// retry. It may be far off (up to MaxRefetchBackoff), and the announcement it retries for
		// may never be answered (a stray one, 2^64-1 say): this one is news of its own, fetched now.
		t.forced = true
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
// next (or until the next periodic fetch, ResyncInterval). The fetch is sent even while an earlier
// one is unanswered, so that its answer postdates the call. Refresh does not wait; WaitGeneration,
// WaitFor or Subscribe tell when a newer snapshot is in.
func (t *Tracker) Refresh() {
	t.mu.Lock()
	t.forced = true
	t.mu.Unlock()
	t.wantFetch()
}

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

// fetchResult is the outcome of fetch number seq.
type fetchResult struct {
	seq  uint64
	held uint64 // the generation held when it was sent
	caps *ServerCapabilities
	err  error
}

// timer is a one-shot timer that can be disarmed; C is nil while it is disarmed.
type timer struct {
	t *time.Timer
	C <-chan time.Time
}

func (x *timer) arm(d time.Duration) {
	x.stop()
	x.t = time.NewTimer(d)
	x.C = x.t.C
}

// stop disarms x (also after it fired).
func (x *timer) stop() {
	if x.t != nil {
		x.t.Stop()
		x.t, x.C = nil, nil
	}
}

// run subscribes to announcements and reconnects, then fetches whenever one is wanted, retrying with
// backoff, until ctx ends or the NATS connection is closed for good (then it ends the waits, which
// could otherwise only wait for their contexts). It reports on first the subscription's failure, the
// closed connection or, once, that the first snapshot is installed.
//
// Fetches run on goroutines of their own, at most maxFetchesInFlight at once, and report here in the
// order they complete: a new fetch is sent when one is wanted that those in flight cannot satisfy (an
// announcement above the one the newest was sent for, Refresh, a reconnect) or, the newest answered,
// when one is wanted at all. Only the answer to the newest fetch sent decides on a retry (it failed,
// or the tracker is behind the announcements) or, caught up, arms the periodic fetch: an older fetch
// still unanswered tells nothing the newest did not, and waiting out its FetchTimeout would put the
// periodic fetch off by as much (a reply lost would leave a lost announcement unnoticed that long).
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
		// Nothing can confirm the snapshot any more: it is stale for good, or whoever reads it (a
		// reconciler reading Current, say) would take its sources for online and its variants for
		// READY long after the media server changed them.
		t.markStaleLocked("its NATS connection is closed")
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

	var fetches sync.WaitGroup
	defer fetches.Wait() // after cancelFetches: no fetch outlives run
	fctx, cancelFetches := context.WithCancel(ctx)
	defer cancelFetches()
	results := make(chan fetchResult, maxFetchesInFlight) // never blocks a fetch: at most that many run

	var (
		seq        uint64 // of the newest fetch sent
		seqAnn     uint64 // the highest generation announced when it was sent
		newestOK   uint64 // seq of the newest fetch sent that succeeded
		newestDone uint64 // seq of the newest fetch sent that completed
		newestBad  bool   // ... and it failed
		goneSeq    uint64 // seq of the newest fetch that found no media server answering
		inFlight   int
		pending    bool // a fetch is wanted, held back by maxFetchesInFlight
		backoff    time.Duration
		retry      timer  // a retry with backoff
		resync     timer  // the periodic fetch
		staleTimer timer  // StaleAfter since the snapshot was last confirmed
		failing    string // the failure last warned of, until a fetch succeeds
	)
	defer func() {
		retry.stop()
		resync.stop()
		staleTimer.stop()
	}()
	send := func() {
		if inFlight >= maxFetchesInFlight {
			pending = true
			return
		}
		pending = false
		retry.stop()
		resync.stop()
		seq++
		t.mu.Lock()
		seqAnn = t.announced
		held := t.heldLocked()
		t.mu.Unlock()
		inFlight++
		fetches.Add(1)
		go func(seq uint64) {
			defer fetches.Done()
			caps, err := t.fetch(fctx)
			results <- fetchResult{seq: seq, held: held, caps: caps, err: err}
		}(seq)
	}

	send()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
			t.mu.Lock()
			forced, announced := t.forced, t.announced
			t.forced = false
			t.mu.Unlock()
			// A fetch in flight sent before a newer generation was announced may answer the older
			// one, or never answer: it does not make this one wait. A repeated announcement is left
			// to the newest fetch, still in flight, or the retry already armed.
			if forced || announced > seqAnn || seq == newestDone && retry.C == nil {
				send()
			}
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
			send() // announcements sent while disconnected are lost, and so may be the replies in flight
		case <-retry.C:
			retry.stop()
			send()
		case <-resync.C:
			resync.stop()
			if seq == newestDone { // else the newest fetch, in flight, tells
				t.log.Debug("capabilities: periodic fetch")
				send()
			}
		case <-staleTimer.C:
			staleTimer.stop()
			t.markStale("no fetch confirmed it within StaleAfter", "stale_after", t.staleAfter)
		case r := <-results:
			inFlight--
			if ctx.Err() != nil {
				return
			}
			if r.err != nil && (errors.Is(r.err, nats.ErrConnectionClosed) || t.nc.IsClosed()) {
				closedConn()
				return
			}
			if r.seq > newestDone {
				newestDone, newestBad = r.seq, r.err != nil
			}
			var gen uint64
			switch {
			case r.err != nil && r.seq < newestOK:
				// A fetch sent after it was answered: this one says nothing newer.
				t.log.Debug("capabilities: an earlier fetch failed after a later one succeeded", "error", r.err)
			case r.err != nil:
				// Warned of once, not at every retry: a tracker waiting for NATS or for a media
				// server retries every few seconds, for as long as it takes.
				if msg := r.err.Error(); msg != failing {
					failing = msg
					t.log.Warn("capabilities: fetch failed", "error", r.err)
				} else {
					t.log.Debug("capabilities: fetch failed", "error", r.err)
				}
				if errors.Is(r.err, nats.ErrNoResponders) {
					goneSeq = max(goneSeq, r.seq)
					t.markStale("no media server answers " + GetSubject(t.prefix))
				}
			default:
				if failing != "" {
					failing = ""
					t.log.Info("capabilities: fetched again", "generation", r.caps.Generation)
				}
				gen = r.caps.Generation
				newestOK = max(newestOK, r.seq)
				if t.contradicted(r.caps, r.held) {
					// As when nobody answers: an earlier answer of the generation held (the old
					// instance's, sent before it went) does not make the snapshot current again.
					goneSeq = max(goneSeq, r.seq)
					break
				}
				// An answer to a fetch sent before one found nobody answering (a media server that
				// stops serves what it holds) predates that finding: it is taken as news, never as
				// a sign that the media server is there.
				if t.accept(r.caps, r.seq > goneSeq) && t.staleAfter > 0 {
					staleTimer.arm(t.staleAfter)
				}
			}
			if t.onFetch != nil {
				t.onFetch(gen, r.err)
			}
			if first != nil && t.hasSnapshot() {
				first <- nil
				first = nil
			}
			if pending {
				send()
				continue
			}
			if r.seq != seq {
				continue // the newest fetch, in flight or already answered, tells
			}
			t.mu.Lock()
			behind := t.caps == nil || t.caps.Generation < t.announced
			t.mu.Unlock()
			if newestBad || behind {
				if backoff == 0 {
					backoff = t.backoff0
				} else {
					backoff = min(2*backoff, MaxRefetchBackoff)
				}
				if newestBad {
					t.log.Debug("capabilities: retrying the failed fetch", "retry_in", backoff)
				} else {
					t.log.Debug("capabilities: fetched generation is behind the announced one; retrying", "retry_in", backoff)
				}
				retry.arm(backoff)
			} else {
				backoff = 0
				if t.resync > 0 {
					resync.arm(t.resync)
				}
			}
		}
	}
}

func (t *Tracker) hasSnapshot() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.caps != nil
}

// fetch requests the capabilities.
func (t *Tracker) fetch(ctx context.Context) (*ServerCapabilities, error) {
	if t.nc.IsClosed() {
		return nil, nats.ErrConnectionClosed
	}
	if !t.nc.IsConnected() {
		// Said plainly: without a reconnect buffer (store/client.Connect) nats.go would report an
		// "outbound buffer limit exceeded". The reconnect makes the tracker fetch at once.
		return nil, fmt.Errorf("capabilities: fetch %s: NATS not connected: %w", GetSubject(t.prefix), nats.ErrConnectionReconnecting)
	}
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	msg, err := t.nc.RequestWithContext(rctx, GetSubject(t.prefix), nil)
	if err != nil {
		return nil, fmt.Errorf("capabilities: fetch %s: %w", GetSubject(t.prefix), err)
	}
	return decodeCapabilities(msg.Data)
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

// accept takes a fetched snapshot: it installs it when it is the first or newer than the one held,
// and makes the one held current again when it is stale and caps has its generation. It reports
// whether caps confirms the snapshot held (it is now the one held, or has its generation). live is
// false for an answer sent before a later fetch found no media server answering: it is news (a newer
// generation is installed) but no sign that the media server is there, so a stale snapshot stays
// stale, a first snapshot is installed stale (there was none to make stale when the media server
// was found gone, and no fetch has succeeded since), and nothing is confirmed.
func (t *Tracker) accept(caps *ServerCapabilities, live bool) (confirmed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keepStale := !live && (t.stale || t.caps == nil)
	if t.installLocked(caps, keepStale) {
		return !keepStale
	}
	if caps.Generation != t.caps.Generation || keepStale {
		return false // older (a lagging responder), or an answer from before the media server went
	}
	if t.stale {
		t.stale, t.view = false, t.caps
		t.log.Info("capabilities: the media server answers again; the snapshot is current", "generation", t.caps.Generation)
		t.publishLocked()
	}
	return true
}

// contradicted reports whether caps, the answer to a fetch sent while the tracker held generation
// heldAtSend, shows that the media server no longer has the snapshot held, and then marks it stale:
// caps is below heldAtSend, though the media server had reached that generation before the fetch was
// sent, or has the generation held with other content. Generations only grow (SPEC section 12), so
// the media server went back: it restarted and started its generations over, or a second media
// server answers caps.v1.get. The snapshot held is not taken back (generations do not go backwards
// here either) nor shown as current: it stays stale until a newer generation is installed, or a
// fetch confirms it (whose answer, from the second media server, may be the other's).
func (t *Tracker) contradicted(caps *ServerCapabilities, heldAtSend uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.caps == nil {
		return false
	}
	switch {
	case caps.Generation < heldAtSend:
		t.markStaleLocked("the media server answered generation "+fmt.Sprint(caps.Generation)+
			", below the one it had reached: it restarted with its generations started over, or another media server answers "+GetSubject(t.prefix),
			"answered", caps.Generation)
	case caps.Generation == t.caps.Generation && !sameCapabilities(caps, t.caps):
		t.markStaleLocked("the media server answered the generation held with other capabilities: it restarted with its generations started over, or another media server answers "+GetSubject(t.prefix),
			"answered", caps.Generation)
	default:
		return false
	}
	return true
}

// sameCapabilities reports whether a and b are the same capabilities: the same sources, streams and
// variants, in any order (the SPEC does not say that a media server lists them in a stable one), and
// the same recording modes (a missing list is an empty one).
func sameCapabilities(a, b *ServerCapabilities) bool {
	if a.Generation != b.Generation || len(a.Sources) != len(b.Sources) {
		return false
	}
	for _, x := range a.Sources {
		y, ok := b.Source(x.SourceID)
		if !ok || x.SessionID != y.SessionID || x.Online != y.Online || len(x.Streams) != len(y.Streams) ||
			!sameSet(x.Publication.RecordingModes, y.Publication.RecordingModes) {
			return false
		}
		for _, s := range x.Streams {
			u, ok := y.Stream(s.StreamID)
			if !ok || s.MediaKind != u.MediaKind || len(s.Variants) != len(u.Variants) {
				return false
			}
			for _, v := range s.Variants {
				w, ok := u.Variant(v.VariantID)
				v.ReadySince, w.ReadySince = 0, 0 // the tracker's, not the media server's
				if !ok || v != w {
					return false
				}
			}
		}
	}
	return true
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(m string) bool { return !slices.Contains(b, m) })
}

// install makes caps the current snapshot if it is the first or newer than the one held, and wakes
// waiters and subscribers. It reports whether it installed caps. caps must not be modified afterwards.
func (t *Tracker) install(caps *ServerCapabilities) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.installLocked(caps, false)
}

// installLocked is install; with stale, caps is installed stale (readers see its sources offline).
// t.mu must be held.
func (t *Tracker) installLocked(caps *ServerCapabilities, stale bool) bool {
	if t.caps != nil && caps.Generation <= t.caps.Generation {
		return false
	}
	markReadySince(caps, t.caps, t.stale)
	t.caps, t.view, t.stale = caps, caps, stale
	if stale {
		t.view = offlineView(caps)
	}
	t.publishLocked()
	t.log.Debug("capabilities: installed", "generation", caps.Generation, "sources", len(caps.Sources), "stale", stale)
	return true
}

// markReadySince sets Variant.ReadySince on the READY variants of caps, about to be installed over
// prev (nil for the first snapshot; wasStale when it is stale). A variant keeps the value it had in
// prev when caps is the generation right after prev, prev was current, and the variant was READY
// there too, from the same publisher on the same session: one change lies between them, and it was
// not this variant's going PENDING. Otherwise its value is caps's generation: across a gap (or a
// stale spell) the tracker cannot tell a takeover from no change, and says that one may have been.
func markReadySince(caps, prev *ServerCapabilities, wasStale bool) {
	next := prev != nil && !wasStale && caps.Generation == prev.Generation+1
	for i := range caps.Sources {
		src := &caps.Sources[i]
		var old Source
		keep := false
		if next {
			old, keep = prev.Source(src.SourceID)
			keep = keep && old.Online && old.SessionID == src.SessionID
		}
		for _, st := range src.Streams {
			oldSt, _ := old.Stream(st.StreamID) // none when !keep
			for k := range st.Variants {
				v := &st.Variants[k]
				v.ReadySince = 0
				if !src.Online || v.State != StateReady {
					continue
				}
				v.ReadySince = caps.Generation
				if was, ok := oldSt.Variant(v.VariantID); keep && ok && was.State == StateReady && was.Publisher == v.Publisher && was.ReadySince != 0 {
					v.ReadySince = was.ReadySince
				}
			}
		}
	}
}

// offlineView returns a copy of caps with every source offline: what readers see of a stale snapshot.
func offlineView(caps *ServerCapabilities) *ServerCapabilities {
	view := caps.Clone()
	for i := range view.Sources {
		view.Sources[i].Online = false
	}
	return &view
}

// markStale makes the snapshot held stale (see Tracker): readers see it with every source offline.
func (t *Tracker) markStale(why string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.markStaleLocked(why, args...)
}

// markStaleLocked is markStale; t.mu must be held.
func (t *Tracker) markStaleLocked(why string, args ...any) {
	if t.caps == nil || t.stale {
		return
	}
	t.stale, t.view = true, offlineView(t.caps)
	t.log.Warn("capabilities: the snapshot is stale ("+why+"); its sources read offline until a fetch confirms it",
		append([]any{"generation", t.caps.Generation}, args...)...)
	t.publishLocked()
}

// publishLocked wakes waiters and subscribers after a change of view. t.mu must be held.
func (t *Tracker) publishLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
	for ch := range t.notify {
		select {
		case ch <- struct{}{}:
		default: // a notification is already pending: coalesced
		}
	}
}

// Stale reports whether the snapshot held is stale: a fetch found no media server answering
// caps.v1.get, none confirmed the snapshot for StaleAfter, or an answer showed that the media server
// went back (see Tracker). Current, Resolve and the waits then show
// it with every source offline (see Tracker). False before the first snapshot and once a fetch
// confirms it again; true for good once the NATS connection is closed; a tracker stopped by Stop
// keeps what it last reported. To act on the capabilities and their staleness together, read both
// with Snapshot: a Current read before or after Stale may show the other state.
func (t *Tracker) Stale() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stale
}

// Current returns a copy of the latest capabilities, with every source offline while they are stale
// (see Stale); the zero value (Generation 0, no sources) before the first snapshot. A caller that
// also needs to know whether they are stale reads both with Snapshot.
func (t *Tracker) Current() ServerCapabilities {
	caps, _ := t.Snapshot()
	return caps
}

// Snapshot returns what Current and Stale return, read together: a copy of the latest capabilities
// (every source offline while they are stale) and whether they are stale. Read one after the other,
// the two can straddle a change: a stale view (its sources offline) paired with false when a fetch
// confirmed the snapshot in between, or the current view paired with true. A reconciler that keeps
// what it holds while the capabilities are stale, and ends what they show gone otherwise, would then
// end a subscription or a publication that is still there. Before the first snapshot it returns the
// zero value and false.
func (t *Tracker) Snapshot() (caps ServerCapabilities, stale bool) {
	t.mu.Lock()
	c, stale := t.view, t.stale
	t.mu.Unlock()
	if c == nil {
		return ServerCapabilities{}, stale
	}
	return c.Clone(), stale
}

// Generation returns the generation of the latest capabilities, stale or not; 0 before the first
// snapshot.
func (t *Tracker) Generation() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.heldLocked()
}

// Resolve returns the current session of the source whose stable id is sourceID. ok is false when the
// capabilities list no such source (or none are in yet). When online is false the source is
// disconnected, or the capabilities are stale (see Stale), and sessionID is its last session, which
// may be stale: commands naming it fail with ErrSourceUnavailable, or find no media server; wait for a
// snapshot showing it online.
func (t *Tracker) Resolve(sourceID string) (sessionID string, online bool, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.view == nil {
		return "", false, false
	}
	s, ok := t.view.Source(sourceID)
	if !ok {
		return "", false, false
	}
	return s.SessionID, s.Online, true
}

// Subscribe returns a channel that receives a notification whenever a new generation is installed or
// the snapshot held becomes stale or current again (see Stale), and a function that ends the
// subscription. Notifications are coalesced (the channel holds at most one; a slow reader gets one
// for any number of changes) and never block the tracker. Read Current
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

// WaitFor returns once cond is true of the capabilities as Current shows them (with every source
// offline while they are stale). cond is called with the snapshot held when WaitFor is called (if
// any) and then with the latest view each time it wakes after a change: snapshots installed while cond runs, or in quick succession, are seen only as the last of
// them (as the tracker itself sees only the generations it fetches), so cond should test a state,
// not wait for a passing one. It must not modify or keep the snapshot, and runs on the caller's
// goroutine. WaitFor returns ctx's error when ctx ends first and
// ErrTrackerStopped when the tracker stops (wrapping nats.ErrConnectionClosed when its connection
// closed for good); on a stopped tracker it returns ErrTrackerStopped at once, without calling cond.
func (t *Tracker) WaitFor(ctx context.Context, cond func(*ServerCapabilities) bool) error {
	return t.waitFor(ctx, func(c *ServerCapabilities) (bool, error) { return cond(c), nil })
}

func (t *Tracker) waitFor(ctx context.Context, f func(*ServerCapabilities) (bool, error)) error {
	var last *ServerCapabilities
	for {
		t.mu.Lock()
		caps, ch := t.view, t.changed
		select {
		case <-t.ended:
			// A snapshot nobody follows any more answers no wait, not even one whose condition it
			// meets: it may be long out of date.
			err := t.endErr
			t.mu.Unlock()
			return err
		default:
		}
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

// WaitGeneration returns once the tracker holds generation gen or a later one, stale or not.
func (t *Tracker) WaitGeneration(ctx context.Context, gen uint64) error {
	return t.WaitFor(ctx, func(c *ServerCapabilities) bool { return c.Generation >= gen })
}

// WaitVariant returns the variant once the capabilities show it in state want. While it is absent or
// in another state it waits, waking on each new snapshot; when it is FAILED (and want is not FAILED)
// it returns a *VariantFailedError (errors.Is(err, ErrVariantFailed)). A READY variant counts only
// while its source is online: nothing of an offline source can be subscribed to, whatever state a
// media server keeps listing for its variants, so a wait for READY also waits for the source, and for
// capabilities that are not stale (see Stale). It
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
