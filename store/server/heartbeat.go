package server

import (
	"context"
	"encoding/json"
	"errors"
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

// heartbeatsWaiting bounds, per lane, the workers whose heartbeat waits to be handled; past it a
// heartbeat is dropped (and counted) rather than hold back the subscription every worker shares.
const heartbeatsWaiting = 256

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
// more than one, nor holds back, behind its own backlog, the heartbeats of every other worker.
func (s *Server) onHeartbeat(msg *nats.Msg) {
	outcome := ""
	switch s.hbLanes.offer(msg.Subject, func() { s.handleHeartbeat(msg) }) {
	case offerSuperseded:
		outcome = "superseded"
	case offerFull:
		outcome = "dropped"
		s.opts.Logger.Debug("heartbeat dropped: too many workers' heartbeats wait", "subject", msg.Subject)
	}
	if m := s.opts.Metrics; m != nil && outcome != "" {
		m.Heartbeats.WithLabelValues(outcome).Inc()
	}
}

// latestLanes run functions in order per key and in parallel across keys, as lanes do, but keep at most
// one function waiting per key: one offered while another of its key waits takes its place. offer
// never blocks, so one key's backlog never holds back the others'.
type latestLanes struct {
	n       int // lanes
	mu      sync.Mutex
	started bool
	closed  bool
	waiting map[string]func() // per key, the function to run when the key's turn comes
	chs     []chan string     // per lane, the keys whose turn is to come, each at most once
	wg      sync.WaitGroup
}

// offerResult says what offer did with a function.
type offerResult int

const (
	offerQueued     offerResult = iota // it waits for its turn
	offerSuperseded                    // it took the place of a waiting function of its key
	offerFull                          // dropped: its lane has no room for another key
	offerClosed                        // dropped: the lanes are closed
)

// offer hands fn over to run after the functions of key already running; a waiting function of key
// is replaced.
func (l *latestLanes) offer(key string, fn func()) offerResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return offerClosed
	}
	if !l.started {
		l.started = true
		l.waiting = map[string]func(){}
		l.chs = make([]chan string, l.n)
		for i := range l.chs {
			ch := make(chan string, heartbeatsWaiting)
			l.chs[i] = ch
			l.wg.Go(func() {
				for key := range ch {
					l.mu.Lock()
					fn := l.waiting[key]
					delete(l.waiting, key)
					l.mu.Unlock()
					if fn != nil { // nil: dropped by close
						fn()
					}
				}
			})
		}
	}
	if _, ok := l.waiting[key]; ok {
		l.waiting[key] = fn
		return offerSuperseded
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	ch := l.chs[h.Sum32()%uint32(len(l.chs))]
	if len(ch) == cap(ch) {
		return offerFull
	}
	l.waiting[key] = fn
	ch <- key // room checked under mu, which every send holds: it does not block
	return offerQueued
}

// close drops the functions still waiting and ends the lanes; wg is done when the running ones have
// returned.
func (l *latestLanes) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	clear(l.waiting)
	for _, ch := range l.chs {
		close(ch)
	}
}

func (s *Server) handleHeartbeat(msg *nats.Msg) {
	s.inflight.RLock()
	defer s.inflight.RUnlock()
	if s.stopped {
		return
	}
	outcome := "accepted"
	if err := s.heartbeat(msg); err != nil {
		outcome = "dropped"
		s.opts.Logger.Debug("heartbeat dropped", "subject", msg.Subject, "err", err)
	}
	if m := s.opts.Metrics; m != nil {
		m.Heartbeats.WithLabelValues(outcome).Inc()
	}
}

func (s *Server) heartbeat(msg *nats.Msg) error {
	toks, err := wire.SubjectTokens(msg.Subject, s.opts.Prefix, "heartbeat.v1", 2)
	if err != nil {
		return err
	}
	principal, workerID := toks[0], toks[1]
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
