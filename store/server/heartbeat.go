package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// heartbeatLanes is how many workers' heartbeats are handled at once: each waits for its commit, so
// more lanes put more keepalives in each commit (about 1,500 heartbeats/s on one lane, 4,000 on 8,
// 17,000 on 32 here: go test ./store/server -bench Heartbeats).
const heartbeatLanes = 32

// heartbeatsWaiting bounds, per principal, the workers whose heartbeat waits to be handled; past it a
// heartbeat of a further worker of that principal is dropped (and counted) rather than hold back, or
// crowd out, the heartbeats of every other principal's workers. A fleet that starts more workers at once
// loses some first heartbeats; their next ones come an interval later.
const heartbeatsWaiting = 1024

// maxHeartbeatBytes bounds a heartbeat message, its headers included: four times max_document_bytes
// (a worker status is at most one, its leases cut to fit), at least 64 KiB.
func maxHeartbeatBytes(b wire.Bounds) int64 { return max(65536, 4*b.MaxDocumentBytes) }

// serverPrincipal reads the system namespace on the server's own behalf.
var serverPrincipal = policy.Principal{ID: "stated", Admin: true}

// onHeartbeat keeps system/workers/<principal>/<worker_id> (SPEC section 11): a put for a worker's
// first heartbeat and whenever status, leases, service or interval change; otherwise a keepalive that
// only pushes the deadline. Heartbeats that do not parse or break a rule are dropped and counted.
// Each worker's heartbeats are handled one at a time, in arrival order, so its read-compare-write never
// races its own next heartbeat; different workers' run on several lanes at once, so their keepalives
// share commits. A worker's heartbeat that arrives while an earlier one of it still waits replaces
// that one (counted superseded): each carries the worker's whole state, so the newest says all, and a
// worker that heartbeats faster than the store commits (every heartbeat is a commit) never queues
// more than one, nor holds back, behind its own backlog, the heartbeats of every other worker. The
// principals whose workers wait on a lane take turns, one heartbeat each, and each has at most
// heartbeatsWaiting workers waiting: a principal that starts (or forges) thousands of workers at once
// delays another principal's heartbeat by at most one of its own per turn, and never has it dropped.
// The handler never waits: a heartbeat is handed over, or dropped, at once.
func (s *Server) onHeartbeat(msg *nats.Msg) {
	outcome := ""
	toks, err := wire.SubjectTokens(msg.Subject, s.opts.Prefix, "heartbeat.v1", 2)
	if limit := maxHeartbeatBytes(s.st.Bounds()); err == nil && int64(msg.Size()) > limit {
		// A waiting heartbeat holds its message, and a principal may have heartbeatsWaiting of them
		// waiting: one far larger than any worker status can be is dropped before it waits. Its size
		// is the message's as it came (subject, headers and body): nats.go keeps the body in the
		// buffer the headers came in, so headers of nearly max_payload beside a small, valid body
		// would be held as long, and a header block it cannot decode is not even in msg.Header.
		err = fmt.Errorf("the heartbeat is %d bytes with its subject and headers, more than %d", msg.Size(), limit)
	}
	if err == nil {
		if _, ok := s.Principal(toks[0]); !ok {
			// No lane keeps turns for a principal that is not configured (only a NATS without
			// identities lets anyone publish as one).
			err = errors.New("unknown principal")
		}
	}
	if err != nil {
		outcome = "dropped"
		s.opts.Logger.Debug("heartbeat dropped", "subject", msg.Subject, "err", err)
	} else {
		switch s.hbLanes.offer(toks[0], msg.Subject, func() { s.handleHeartbeat(msg, toks[0], toks[1]) }) {
		case offerSuperseded:
			outcome = "superseded"
		case offerFull, offerClosed:
			outcome = "dropped"
			s.opts.Logger.Debug("heartbeat dropped: too many of its principal's workers' heartbeats wait, or the server is stopping",
				"subject", msg.Subject)
		}
	}
	if m := s.opts.Metrics; m != nil && outcome != "" {
		m.Heartbeats.WithLabelValues(outcome).Inc()
	}
}

// latestLanes run functions in order per key and in parallel across keys, as queues do, but keep at
// most one function waiting per key: one offered while another of its key waits takes its place. Each
// key belongs to a group (a worker to its principal); the groups with keys waiting on a lane take
// turns there, one key each, and a group has at most limit keys waiting in all. offer never blocks,
// so one key's or one group's backlog never holds back the others'.
type latestLanes struct {
	n       int // lanes
	limit   int // keys waiting per group
	mu      sync.Mutex
	started bool
	closed  bool
	waiting map[string]func() // per key, the function to run when the key's turn comes
	groups  map[string]int    // per group, its keys waiting
	lanes   []*lane
	wg      sync.WaitGroup
}

// lane is one of latestLanes' lanes: the keys waiting on it, by group, and the groups' turns.
type lane struct {
	wake  chan struct{}       // signalled (capacity 1) when a key is added; closed by close
	turns []string            // the groups with keys waiting here, in the order of their turns
	keys  map[string][]string // per group, its keys waiting here, in arrival order
}

// offerResult says what offer did with a function.
type offerResult int

const (
	offerQueued     offerResult = iota // it waits for its turn
	offerSuperseded                    // it took the place of a waiting function of its key
	offerFull                          // dropped: its group has as many keys waiting as it may
	offerClosed                        // dropped: the lanes are closed
)

// offer hands fn over to run after the functions of key (of group) already running; a waiting
// function of key is replaced.
func (l *latestLanes) offer(group, key string, fn func()) offerResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return offerClosed
	}
	if !l.started {
		l.started = true
		l.waiting = map[string]func(){}
		l.groups = map[string]int{}
		l.lanes = make([]*lane, l.n)
		for i := range l.lanes {
			ln := &lane{wake: make(chan struct{}, 1), keys: map[string][]string{}}
			l.lanes[i] = ln
			l.wg.Go(func() { l.run(ln) })
		}
	}
	if _, ok := l.waiting[key]; ok {
		l.waiting[key] = fn
		return offerSuperseded
	}
	if l.groups[group] >= l.limit {
		return offerFull
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	ln := l.lanes[h.Sum32()%uint32(len(l.lanes))]
	if len(ln.keys[group]) == 0 {
		ln.turns = append(ln.turns, group)
	}
	ln.keys[group] = append(ln.keys[group], key)
	l.groups[group]++
	l.waiting[key] = fn
	select {
	case ln.wake <- struct{}{}:
	default: // already signalled
	}
	return offerQueued
}

// run runs ln's keys' functions, one key of each group in turn, until the lanes close.
func (l *latestLanes) run(ln *lane) {
	for {
		l.mu.Lock()
		if len(ln.turns) == 0 {
			closed := l.closed
			l.mu.Unlock()
			if closed {
				return
			}
			<-ln.wake
			continue
		}
		group := ln.turns[0]
		ln.turns = ln.turns[1:]
		keys := ln.keys[group]
		key := keys[0]
		if len(keys) == 1 {
			delete(ln.keys, group)
		} else {
			ln.keys[group] = keys[1:]
			ln.turns = append(ln.turns, group) // its next key waits for the other groups' turns
		}
		if l.groups[group]--; l.groups[group] == 0 {
			delete(l.groups, group)
		}
		fn := l.waiting[key]
		delete(l.waiting, key)
		l.mu.Unlock()
		fn()
	}
}

// close drops the functions still waiting and ends the lanes; wg is done when the running ones have
// returned. It returns how many it dropped (none the second time).
func (l *latestLanes) close() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0
	}
	l.closed = true
	dropped := len(l.waiting)
	clear(l.waiting)
	clear(l.groups)
	for _, ln := range l.lanes {
		ln.turns = nil
		clear(ln.keys)
		close(ln.wake)
	}
	return dropped
}

// handleHeartbeat handles msg, the heartbeat of principal's workerID (its subject's tokens).
func (s *Server) handleHeartbeat(msg *nats.Msg, principal, workerID string) {
	s.inflight.RLock()
	defer s.inflight.RUnlock()
	if s.stopped {
		return
	}
	outcome := "accepted"
	if err := s.heartbeat(msg, principal, workerID); errors.Is(err, wire.ErrQuotaExceeded) || errors.Is(err, wire.ErrTooLarge) {
		// Over a quota: most often a new worker of a principal that has max_workers_per_principal
		// live ones, or of a full system namespace; or a worker status that does not fit
		// max_document_bytes even without its leases (long ids under a small bound). The heartbeat
		// broke no rule: the server's own bound refused the entry it keeps (the error names the
		// bound), told once a minute per principal, not per heartbeat of a fleet.
		outcome = "refused"
		if s.hbWarn.due(principal, time.Now()) {
			s.opts.Logger.Warn("heartbeats refused by a bound (err names it; for new workers of a principal at max_workers_per_principal, or worker statuses over max_document_bytes, raise it in [bounds] if it should not be)",
				"principal", principal, "err", err)
		}
	} else if err != nil {
		outcome = "dropped"
		s.opts.Logger.Debug("heartbeat dropped", "subject", msg.Subject, "err", err)
	}
	if m := s.opts.Metrics; m != nil {
		m.Heartbeats.WithLabelValues(outcome).Inc()
	}
}

// heartbeat keeps the worker status of principal's workerID from msg (see onHeartbeat, which read
// both from its subject). The principal is checked again: a reload may have removed it since.
func (s *Server) heartbeat(msg *nats.Msg, principal, workerID string) error {
	if _, ok := s.Principal(principal); !ok {
		return errors.New("unknown principal")
	}
	var hb wire.Heartbeat
	if err := wire.Decode(msg.Data, &hb); err != nil {
		return err
	}
	if err := hb.Validate(); err != nil {
		return err
	}
	if hb.WorkerID != workerID {
		return errors.New("worker_id differs from the subject's")
	}
	interval := hb.EffectiveInterval()
	leases := hb.Leases
	if leases == nil {
		leases = []string{}
	}
	key := wire.WorkerKey(principal, workerID)
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.RequestTimeout)
	defer cancel()
	want := wire.WorkerStatus{WorkerID: workerID, Service: hb.Service, Principal: principal, Status: hb.Status,
		IntervalMs: interval, Leases: leases}
	if n := fitLeases(&want, s.st.Bounds().MaxDocumentBytes); n > 0 {
		s.opts.Logger.Debug("heartbeat lists more leases than a worker status holds; the last are left out",
			"principal", principal, "worker_id", workerID, "left_out", n)
	}
	cur, err := s.st.Get(ctx, serverPrincipal, wire.GetRequest{Namespace: string(wire.KindSystem), Key: key})
	switch {
	case err == nil:
		var have wire.WorkerStatus
		if json.Unmarshal(cur.Document, &have) == nil && have.Status == want.Status && have.Service == want.Service &&
			have.IntervalMs == want.IntervalMs && slices.Equal(have.Leases, want.Leases) {
			_, err = s.st.TouchSystem(ctx, key)
			if !errors.Is(err, wire.ErrNotFound) {
				return err
			}
			// It expired between the read and the keepalive: start it over.
		} else {
			want.FirstSeenMs = have.FirstSeenMs
		}
	case !errors.Is(err, wire.ErrNotFound):
		return err
	}
	if want.FirstSeenMs == 0 {
		want.FirstSeenMs = time.Now().UnixMilli()
	}
	doc, _ := json.Marshal(want)
	ttl := max(3*interval, 1000)
	_, err = s.st.PutSystem(ctx, principal, wire.PutRequest{Namespace: string(wire.KindSystem), Key: key,
		Schema: wire.SchemaWorkerStatus, Document: doc, TTLMs: &ttl})
	return err
}

// fitLeases shortens st's lease list, from its end, until the worker-status document fits within
// maxBytes (max_document_bytes), and returns how many leases it left out. A worker that holds so many
// leases (some 250 at the default 16 KiB) would otherwise have every heartbeat refused and look dead
// while it runs; the lease entries themselves stay what says who holds a lease. The list is cut the
// same way for the same heartbeat, so steady heartbeats stay keepalives.
func fitLeases(st *wire.WorkerStatus, maxBytes int64) int {
	probe := *st
	probe.FirstSeenMs = wire.MaxSafeInteger // the widest it can be
	doc, _ := json.Marshal(probe)
	over := int64(len(doc)) - maxBytes
	n := len(st.Leases)
	for over > 0 && n > 0 {
		n--
		over -= int64(len(st.Leases[n])) + 3 // the key's quotes and comma (JSON keys need no escapes)
	}
	left := len(st.Leases) - n
	st.Leases = st.Leases[:n]
	return left
}

// warnEvery lets a warning about one principal through at most once per period.
type warnEvery struct {
	period time.Duration
	// configured, when set, reports whether a principal is configured now: due remembers no other
	// (a heartbeat refused just before a reload removed its principal warns after keep has run).
	configured func(principal string) bool
	mu         sync.Mutex
	last       map[string]time.Time
}

// due reports whether a warning about principal goes out now, and if so starts its period. A
// principal whose period has ended is forgotten then, when a warning goes out: one warned about once
// is not remembered for as long as the server runs. Between warnings the map may still hold
// principals whose period ended, at most every configured one (keep drops those removed at reload). A
// principal that is no longer configured is not warned about, nor remembered: the reload that removed
// it may have run keep already.
func (w *warnEvery) due(principal string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.configured != nil && !w.configured(principal) {
		return false
	}
	if t, ok := w.last[principal]; ok && now.Sub(t) < w.period {
		return false
	}
	if w.last == nil {
		w.last = map[string]time.Time{}
	}
	for p, t := range w.last {
		if now.Sub(t) >= w.period {
			delete(w.last, p)
		}
	}
	w.last[principal] = now
	return true
}

// keep forgets the principals for which configured is false (removed at a reload) at once.
func (w *warnEvery) keep(configured func(principal string) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.last {
		if !configured(p) {
			delete(w.last, p)
		}
	}
}
