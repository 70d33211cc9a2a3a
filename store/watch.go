package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// Event is one committed change as watchers see it. One Event is shared by every watch it reaches;
// its encoding is made once.
type Event struct {
	Revision  uint64
	Kind      wire.UpdateKind
	Key       string
	Entry     *wire.Entry // PUT only
	entryJSON []byte      // Entry's encoding, when the committer made it
	tail      []byte      // `"revision":..,"kind":..,"key":..[,"entry":..]}`, made at the first match
}

func (ev *Event) encodeTail() {
	if ev.tail != nil {
		return
	}
	if ev.Entry != nil && ev.entryJSON == nil {
		ev.entryJSON = encodeEntry(ev.Entry)
	}
	b := make([]byte, 0, 64+len(ev.Key)+len(ev.entryJSON))
	b = append(b, `"revision":`...)
	b = strconv.AppendUint(b, ev.Revision, 10)
	b = append(b, `,"kind":"`...)
	b = append(b, ev.Kind...)
	b = append(b, `","key":`...)
	b = wire.AppendString(b, ev.Key)
	if ev.Entry != nil {
		b = append(b, `,"entry":`...)
		b = append(b, ev.entryJSON...)
	}
	ev.tail = append(b, '}')
}

// Message is what a watch's Sink receives: an update (Event set, Sequence from 1) or the final close
// (Closed set).
type Message struct {
	WatchID  string
	Sequence uint64
	Event    *Event
	Closed   *wire.WatchClosed
}

// JSON encodes the message as SPEC section 7 spells it (StateStoreWatchUpdate or
// StateStoreWatchClosed). An update's entry is encoded once, whatever the number of watchers.
func (m Message) JSON() []byte {
	n := 64
	if m.Event != nil {
		n += len(m.WatchID) + len(m.Event.tail)
	}
	return m.AppendJSON(make([]byte, 0, n))
}

// AppendJSON appends JSON() to b: a sink that publishes at once can encode into a buffer it reuses.
func (m Message) AppendJSON(b []byte) []byte {
	if m.Closed != nil {
		c, _ := json.Marshal(m.Closed)
		return append(b, c...)
	}
	b = append(b, `{"watch_id":`...)
	b = wire.AppendString(b, m.WatchID)
	b = append(b, `,"watch_sequence":`...)
	b = strconv.AppendUint(b, m.Sequence, 10)
	b = append(b, ',')
	return append(b, m.Event.tail...)
}

// Update returns the message as a wire.WatchUpdate (for an update message).
func (m Message) Update() wire.WatchUpdate {
	return wire.WatchUpdate{WatchID: m.WatchID, WatchSequence: m.Sequence, Revision: m.Event.Revision,
		Kind: m.Event.Kind, Key: m.Event.Key, Entry: m.Event.Entry}
}

// Sink receives a watch's messages in order. The engine calls it while it fans a commit out, holding
// the store's and the watch registry's locks, so it must not block and must not call the Store (an Ack
// or Unwatch from inside a sink would wait on those locks for ever): hand the message to a buffered
// channel or a non-blocking publish (a NATS publish is), and acknowledge from the goroutine that reads
// it. A watch never has more than max_pending_updates updates outstanding plus its close, so a
// channel of that capacity plus one never fills.
type Sink func(Message)

type watchKey struct{ principal, id string }

type watch struct {
	key       watchKey
	serial    uint64 // this registration's number: tells it from a later one with the same id
	principal policy.Principal
	ns        string
	prefix    string
	sink      Sink
	seq       uint64  // highest sequence sent
	acked     uint64  // highest sequence acknowledged
	sentAt    []int64 // ring of send times (monotonic ns): sequence q at sentAt[q % len]
	// seen is when (monotonic ns) its client last sent a request naming it: the watch request, or an
	// ack of any sequence, taken or refused (see CloseIdleWatches).
	seen int64
}

// oldestUnacked is the send time of the oldest unacknowledged update; ok is false when none is.
func (w *watch) oldestUnacked() (int64, bool) {
	if w.seq == w.acked {
		return 0, false
	}
	return w.sentAt[(w.acked+1)%uint64(len(w.sentAt))], true
}

// registry holds the live watches. Its lock is taken after Store.mu when both are held.
type registry struct {
	mu           sync.Mutex
	bounds       wire.Bounds
	observer     Observer
	byID         map[watchKey]*watch
	byNS         map[string][]*watch // each sorted by (principal, id): one principal's updates go out together
	perPrincipal map[string]int64
	// owing holds the live watches with an update sent and not acknowledged: the ack deadline's look
	// (expireAcks) visits those only, not every live watch, while it holds the lock every fan-out
	// waits for.
	owing   map[*watch]struct{}
	serials uint64 // registrations so far
	shut    bool   // the store closed: nothing registers any more
	// lookup, once ReloadPrincipals has run, is the authority on principals: a watch registering
	// after a reload is checked against it, not against the principal its caller resolved before.
	lookup func(id string) (policy.Principal, bool)
}

func (r *registry) init(b wire.Bounds, o Observer) {
	r.bounds = b
	r.observer = o
	r.byID = map[watchKey]*watch{}
	r.byNS = map[string][]*watch{}
	r.perPrincipal = map[string]int64{}
	r.owing = map[*watch]struct{}{}
}

func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// admitLocked checks that the store is open (UNAVAILABLE), that p may still read ns after any reload
// (PERMISSION_DENIED), then WATCH_EXISTS, then RESOURCE_EXHAUSTED. It returns the principal the watch
// is registered with.
func (r *registry) admitLocked(k watchKey, p policy.Principal, ns string) (policy.Principal, error) {
	if r.shut {
		return p, errClosed
	}
	if r.lookup != nil {
		cur, ok := r.lookup(p.ID)
		if !ok {
			return p, wire.Errorf(wire.CodePermissionDenied, "unknown principal %q", p.ID)
		}
		if err := policy.CheckRead(cur, ns); err != nil {
			return p, err
		}
		p = cur
	}
	if _, ok := r.byID[k]; ok {
		return p, wire.Errorf(wire.CodeWatchExists, "watch %q is already live for %s", k.id, k.principal)
	}
	if int64(len(r.byID)) >= r.bounds.MaxWatches {
		return p, wire.Errorf(wire.CodeResourceExhausted, "%d watches are live (max_watches)", len(r.byID))
	}
	if r.perPrincipal[k.principal] >= r.bounds.MaxWatchesPerPrincipal {
		return p, wire.Errorf(wire.CodeResourceExhausted, "principal %s has %d live watches (max_watches_per_principal)", k.principal, r.perPrincipal[k.principal])
	}
	return p, nil
}

func (r *registry) addLocked(w *watch) {
	r.serials++
	w.serial = r.serials
	r.byID[w.key] = w
	list := r.byNS[w.ns]
	i, _ := slices.BinarySearchFunc(list, w.key, cmpWatch)
	r.byNS[w.ns] = slices.Insert(list, i, w)
	r.perPrincipal[w.key.principal]++
}

func (r *registry) removeLocked(w *watch) {
	delete(r.byID, w.key)
	delete(r.owing, w)
	list := r.byNS[w.ns]
	if i, ok := slices.BinarySearchFunc(list, w.key, cmpWatch); ok {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(r.byNS, w.ns)
	} else {
		r.byNS[w.ns] = list
	}
	if r.perPrincipal[w.key.principal]--; r.perPrincipal[w.key.principal] <= 0 {
		delete(r.perPrincipal, w.key.principal)
	}
}

// closeLocked removes w and sends its one close message; nothing is sent on it after.
func (r *registry) closeLocked(w *watch, reason wire.CloseReason, msg string) {
	r.removeLocked(w)
	r.observer.WatchClosed(reason)
	w.sink(Message{WatchID: w.key.id, Closed: &wire.WatchClosed{WatchID: w.key.id, Kind: wire.UpdateClosed, Reason: reason, Message: msg}})
}

// cmpWatch orders a namespace's watches by principal, then id.
func cmpWatch(w *watch, k watchKey) int {
	if c := strings.Compare(w.key.principal, k.principal); c != 0 {
		return c
	}
	return strings.Compare(w.key.id, k.id)
}

// fanout sends ev to every watch of ns whose prefix matches, in commit order, one principal's watches
// one after another (so a transport sends a connection's messages together). A watch that would pass
// max_pending_updates is closed with OVERFLOW instead.
func (r *registry) fanout(ns string, ev *Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := r.byNS[ns]
	if len(list) == 0 {
		return
	}
	var now int64
	var overflow []*watch
	for _, w := range list {
		if !strings.HasPrefix(ev.Key, w.prefix) {
			continue
		}
		if int64(w.seq-w.acked) >= r.bounds.MaxPendingUpdates {
			overflow = append(overflow, w) // closed after the loop, which closing would shift
			continue
		}
		if now == 0 {
			now = monoNow()
			ev.encodeTail()
		}
		w.seq++
		w.sentAt[w.seq%uint64(len(w.sentAt))] = now
		r.owing[w] = struct{}{}
		w.sink(Message{WatchID: w.key.id, Sequence: w.seq, Event: ev})
	}
	for _, w := range overflow {
		r.closeLocked(w, wire.CloseOverflow, "more than max_pending_updates updates are unacknowledged")
	}
}

// expireAcks closes with ACK_TIMEOUT every watch whose oldest unacknowledged update is older than the
// ack deadline. It visits the watches that owe an ack only.
func (r *registry) expireAcks(now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := r.bounds.AckDeadlineMs * int64(time.Millisecond)
	for w := range r.owing {
		if oldest, ok := w.oldestUnacked(); ok && now-oldest > limit {
			r.closeLocked(w, wire.CloseAckTimeout, "the oldest update was not acknowledged within ack_deadline_ms")
		}
	}
}

func (r *registry) closeAll(reason wire.CloseReason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeAllLocked(reason, msg)
}

func (r *registry) closeAllLocked(reason wire.CloseReason, msg string) {
	for _, w := range r.byID {
		r.closeLocked(w, reason, msg)
	}
}

// shutdown closes every watch with reason and admits none after: a watch racing Close either gets
// its close message or is refused UNAVAILABLE.
func (r *registry) shutdown(reason wire.CloseReason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shut = true
	r.closeAllLocked(reason, msg)
}

// monoStart anchors monoNow.
var monoStart = time.Now()

// monoNow is monotonic nanoseconds since process start (never 0 in practice).
func monoNow() int64 { return int64(time.Since(monoStart)) + 1 }

// janitor enforces the ack deadline, so an ACK_TIMEOUT close comes well within 1 s of it.
func (s *Store) janitor() {
	defer s.wg.Done()
	period := time.Duration(s.opts.Bounds.AckDeadlineMs) * time.Millisecond / 4
	period = min(max(period, 10*time.Millisecond), 250*time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.watches.expireAcks(monoNow())
		}
	}
}

// maxWatchAttempts bounds how often a watch waits for due leases to expire before it takes its
// snapshot anyway (expired entries are never in a snapshot either way).
const maxWatchAttempts = 8

// Watch atomically captures every live entry of req.Namespace under req.KeyPrefix and registers the
// watch at snapshot_revision: no committed mutation falls between the two. Later updates go to sink in
// revision order with watch_sequence from 1. Leases of the namespace already due are expired first
// (while the disk refuses commits, the snapshot leaves them out and their EXPIRE comes later).
func (s *Store) Watch(ctx context.Context, p policy.Principal, req wire.WatchRequest, sink Sink) (*wire.WatchState, error) {
	ws, _, err := s.Register(ctx, p, req, sink)
	return ws, err
}

// Register is Watch, and also returns the WatchRef of the registration it made, for a transport that
// may have to close that registration, and only it, later (CloseWatchRef): by then the client may
// have unwatched it and registered the same id again.
func (s *Store) Register(ctx context.Context, p policy.Principal, req wire.WatchRequest, sink Sink) (*wire.WatchState, WatchRef, error) {
	if err := s.serving(); err != nil {
		return nil, WatchRef{}, err
	}
	if err := req.Validate(); err != nil {
		return nil, WatchRef{}, err
	}
	if sink == nil {
		return nil, WatchRef{}, wire.Errorf(wire.CodeInvalidArgument, "a watch needs a sink")
	}
	if err := policy.CheckRead(p, req.Namespace); err != nil {
		return nil, WatchRef{}, err
	}
	for attempt := 1; ; attempt++ {
		ws, ref, retry, err := s.tryWatch(p, req, sink, attempt < maxWatchAttempts)
		if !retry {
			return ws, ref, err
		}
		r := s.submit(ctx, &mutation{kind: mutBarrier})
		switch {
		case r.err == nil:
		case errors.Is(r.err, wire.ErrStorage):
			// The disk refuses commits, so the due expiries cannot be committed now. A snapshot is
			// a read, served from memory like Get, which a full disk does not stop: take it
			// without them (entries whose deadline passed are left out of it, and their EXPIRE
			// follows once a commit succeeds).
			ws, ref, _, err := s.tryWatch(p, req, sink, false)
			return ws, ref, err
		default:
			return nil, WatchRef{}, r.err
		}
	}
}

func (s *Store) tryWatch(p policy.Principal, req wire.WatchRequest, sink Sink, mayWait bool) (*wire.WatchState, WatchRef, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	now := s.nowMs()
	// SPEC section 6: the namespace's due leases are expired before its snapshot (not others': a
	// watch does not wait on, nor fail with, commits it does not need).
	if mayWait && (s.expiring[req.Namespace] || s.deadlines.dueIn(req.Namespace, now)) {
		return nil, WatchRef{}, true, nil
	}
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	k := watchKey{principal: p.ID, id: req.WatchID}
	p, err := r.admitLocked(k, p, req.Namespace)
	if err != nil {
		return nil, WatchRef{}, false, err
	}
	ws := &wire.WatchState{WatchID: req.WatchID, Namespace: req.Namespace, KeyPrefix: req.KeyPrefix, Entries: []wire.Entry{}}
	if sp := s.spaces[req.Namespace]; sp != nil {
		ws.SnapshotRevision = sp.revision
		tooBroad := false
		sp.ascendPrefix(req.KeyPrefix, "", func(e *wire.Entry) bool {
			if !live(e, now) {
				return true
			}
			if int64(len(ws.Entries)) >= s.opts.Bounds.MaxSnapshotEntries {
				tooBroad = true
				return false
			}
			ws.Entries = append(ws.Entries, *e)
			return true
		})
		if tooBroad {
			return nil, WatchRef{}, false, wire.Errorf(wire.CodeWatchTooBroad, "more than %d entries match (max_snapshot_entries); narrow the prefix", s.opts.Bounds.MaxSnapshotEntries)
		}
	}
	if size := snapshotSize(req.RequestID, ws); size > s.opts.Bounds.MaxSnapshotBytes {
		return nil, WatchRef{}, false, wire.Errorf(wire.CodeWatchTooBroad, "the snapshot encodes to %d bytes (max_snapshot_bytes %d); narrow the prefix", size, s.opts.Bounds.MaxSnapshotBytes)
	}
	w := &watch{key: k, principal: p, ns: req.Namespace, prefix: req.KeyPrefix, sink: sink,
		sentAt: make([]int64, s.opts.Bounds.MaxPendingUpdates), seen: monoNow()}
	r.addLocked(w)
	return ws, WatchRef{Principal: k.principal, WatchID: k.id, serial: w.serial}, false, nil
}

// snapshotSize is the length of the encoded watch reply: the StateStoreResult of request requestID
// carrying ws.
func snapshotSize(requestID int64, ws *wire.WatchState) int64 {
	head := *ws
	head.Entries = []wire.Entry{}
	b, _ := json.Marshal(wire.Result{RequestID: requestID, OK: true, Watch: &head})
	size := int64(len(b))
	var scratch []byte
	for i := range ws.Entries {
		scratch = wire.AppendEntry(scratch[:0], &ws.Entries[i])
		size += int64(len(scratch))
	}
	if n := int64(len(ws.Entries)); n > 1 {
		size += n - 1 // commas
	}
	return size
}

// Ack records that the watch's client applied every update up to req.AppliedSequence. An ack below an
// earlier one or above the highest sent is INVALID_ARGUMENT and changes nothing but the time the
// watch was last named (CloseIdleWatches): its client is there, probing the watch as SPEC section 7.5
// lets it (one past the highest it applied).
func (s *Store) Ack(ctx context.Context, p policy.Principal, req wire.AckRequest) error {
	if err := s.serving(); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byID[watchKey{principal: p.ID, id: req.WatchID}]
	if w == nil {
		return wire.Errorf(wire.CodeNotFound, "no live watch %q", req.WatchID)
	}
	w.seen = monoNow()
	seq := uint64(*req.AppliedSequence)
	if seq < w.acked {
		return wire.Errorf(wire.CodeInvalidArgument, "applied_sequence %d is below the earlier ack %d", seq, w.acked)
	}
	if seq > w.seq {
		return wire.Errorf(wire.CodeInvalidArgument, "applied_sequence %d is above the highest sent %d", seq, w.seq)
	}
	w.acked = seq
	if w.acked == w.seq {
		delete(r.owing, w)
	}
	return nil
}

// Unwatch removes a live watch; no close message is sent for it.
func (s *Store) Unwatch(ctx context.Context, p policy.Principal, req wire.UnwatchRequest) error {
	if err := s.serving(); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byID[watchKey{principal: p.ID, id: req.WatchID}]
	if w == nil {
		return wire.Errorf(wire.CodeNotFound, "no live watch %q", req.WatchID)
	}
	r.removeLocked(w)
	return nil
}

// WatchRef names one registration of a live watch: a later watch with the same principal and id is
// another registration, with another WatchRef.
type WatchRef struct {
	Principal string
	WatchID   string
	serial    uint64
}

// LiveWatches returns the live watches, in no particular order.
func (s *Store) LiveWatches() []WatchRef {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	refs := make([]WatchRef, 0, len(r.byID))
	for k, w := range r.byID {
		refs = append(refs, WatchRef{Principal: k.principal, WatchID: k.id, serial: w.serial})
	}
	return refs
}

// DropWatch removes the watch registration ref names, as Unwatch does, and reports whether it was still
// live; a later registration with the same id is left alone. It is for a transport that knows nobody
// receives the watch's updates any more (its subscriber is gone), so no close message is sent: the
// client, on reconnecting, must watch again anyway.
func (s *Store) DropWatch(ref WatchRef) bool {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.refLocked(ref)
	if w == nil {
		return false
	}
	r.removeLocked(w)
	return true
}

// WithWatchRef calls f with whether the registration ref names is still live, holding the watch
// registry's lock: while f runs, nothing is sent to the registration's sink and nobody removes or closes
// it. A transport that holds a watch's messages until its snapshot reply is out decides there whether to
// send them: a registration its client has unwatched since (and maybe watched again, under the same id)
// must send nothing more. f must not block and must not call the Store, as a Sink.
func (s *Store) WithWatchRef(ref WatchRef, f func(live bool)) {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r.refLocked(ref) != nil)
}

// refLocked returns the live registration ref names, or nil.
func (r *registry) refLocked(ref WatchRef) *watch {
	w := r.byID[watchKey{principal: ref.Principal, id: ref.WatchID}]
	if w == nil || w.serial != ref.serial {
		return nil
	}
	return w
}

// ReloadPrincipals re-evaluates every live watch against the principals lookup returns (false: the
// principal was removed). A watch whose principal can no longer read its namespace is closed with
// UNAUTHORIZED before ReloadPrincipals returns, so no update reaches it after the change. From then
// on lookup is the authority for watches: one that registers later, even with a principal its caller
// resolved before the reload, is checked against lookup and refused PERMISSION_DENIED if it may no
// longer read. lookup must be safe to call at any time and must not call the Store.
func (s *Store) ReloadPrincipals(lookup func(id string) (policy.Principal, bool)) {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookup = lookup
	for _, w := range r.byID {
		p, ok := lookup(w.key.principal)
		if !ok || !policy.CanRead(p, w.ns) {
			r.closeLocked(w, wire.CloseUnauthorized, "the principal lost read permission")
			continue
		}
		w.principal = p
	}
}

// CloseIdleWatches closes with ACK_TIMEOUT, as the ack deadline does, every live watch whose client
// sent no request naming it for longer than idle, and returns the registrations it closed. A request
// names a watch when it comes from the watch's principal with its id: the watch request that
// registered it, and every ack after, of any sequence, whether taken or refused INVALID_ARGUMENT (a
// probe one past the highest applied, which store/client's Cache sends when idle). An ack naming an
// unknown id, or another principal's watch of the same id, names nothing. It is for a transport that
// cannot tell that a watch's subscriber is gone (a client of an external NATS server): a client that
// crashed on a quiet namespace gets no update, so no ack is ever due and the ack deadline never closes
// its watch, which would hold one of its principal's max_watches_per_principal slots for ever. A live
// client that is closed this way learns of it from the close message (or from a NOT_FOUND answer to
// its next ack) and watches again.
func (s *Store) CloseIdleWatches(idle time.Duration) []WatchRef {
	return s.watches.closeIdle(monoNow(), idle)
}

// closeIdle closes the watches not named since now-idle (see CloseIdleWatches).
func (r *registry) closeIdle(now int64, idle time.Duration) []WatchRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	var closed []WatchRef
	for _, w := range r.byID {
		if now-w.seen > int64(idle) {
			closed = append(closed, WatchRef{Principal: w.key.principal, WatchID: w.key.id, serial: w.serial})
			r.closeLocked(w, wire.CloseAckTimeout, fmt.Sprintf("the client sent no request naming the watch (an ack, of any sequence) for more than %v", idle))
		}
	}
	return closed
}

// CloseWatches closes every live watch with reason (RESTORED, SNAPSHOT_FAILED, ...).
func (s *Store) CloseWatches(reason wire.CloseReason, msg string) { s.watches.closeAll(reason, msg) }

// CloseWatchRef closes the watch registration ref names with reason, for a transport that could not
// deliver its snapshot (SNAPSHOT_FAILED), and reports whether it was still live; a later registration
// with the same id is left alone.
func (s *Store) CloseWatchRef(ref WatchRef, reason wire.CloseReason, msg string) bool {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.refLocked(ref)
	if w == nil {
		return false
	}
	r.closeLocked(w, reason, msg)
	return true
}

// CloseWatch closes the live watch of p with id watchID, whichever registration it is, with reason. It
// reports whether there was one. A transport closing a registration it made uses CloseWatchRef.
func (s *Store) CloseWatch(p policy.Principal, watchID string, reason wire.CloseReason, msg string) bool {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byID[watchKey{principal: p.ID, id: watchID}]
	if w == nil {
		return false
	}
	r.closeLocked(w, reason, msg)
	return true
}
