package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

var randReader = rand.Reader

// ServiceName is the micro service name of the state API.
const ServiceName = "keeppeek-state"

// Options configure a Server.
type Options struct {
	// Prefix is the subject prefix. Default wire.DefaultPrefix ("kp").
	Prefix string
	// Principals are the principals the server answers; requests under any other principal token
	// are PERMISSION_DENIED.
	Principals []policy.Principal
	// Version is the micro service version (semver). Default "0.1.0".
	Version string
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics, when set, is updated by the server. Start then wraps the NATS connection's error
	// handler (the one set before is still called) to learn which of the server's subscriptions NATS
	// drops requests from: set the connection's error handler before Start, not after.
	Metrics *Metrics
	// RequestTimeout bounds how long one request may wait on the engine. Default 30 s. A request that
	// reaches it gets no reply: a write may still commit, so no error code would be true.
	RequestTimeout time.Duration
	// MaxConcurrentRequests bounds how many requests (admin calls included; other than acks and
	// unwatches, which wait in bounded queues per principal and are refused RESOURCE_EXHAUSTED past
	// them: see Server.handler) are handled at once. Default 1024, as many as one commit takes. Past
	// it, an endpoint takes its next request only when one ends: the rest wait in NATS (which drops
	// them, as from any slow consumer, past its pending limits: counted in
	// state_requests_dropped_total) instead of each holding a goroutine and its body in stated's
	// memory while a flood of requests waits for a slow disk.
	MaxConcurrentRequests int
	// BackupDir holds the files of opened admin backups (statectl backup), each removed when closed,
	// after two idle minutes, or at Stop. Set, it is the server's own: Start removes backup files a
	// killed server left there, when its store is served (an unavailable one may not hold its
	// database, and another server may be serving backups from the directory). Default: the
	// system's temporary directory, never cleaned.
	BackupDir string
	// Interest, when set, reports whether anyone subscribes to a subject (an embedded NATS server can
	// tell; a client of an external one cannot). The server then looks every SweepInterval for watches
	// whose delivery subject has no subscriber, and drops one that has none at two looks running: its
	// client is gone (closed, crashed or cut off), and a client that comes back must watch again
	// anyway, so the watch would only hold one of its principal's slots until an update timed it out.
	Interest func(subject string) bool
	// SweepInterval is how often the server looks for such watches. Default 15 s.
	SweepInterval time.Duration
	// IdleWatch, when positive, bounds how long a watch may go without a request of its client naming
	// it: its watch request, or an ack of any sequence, taken or refused INVALID_ARGUMENT (see
	// store.CloseIdleWatches). A watch silent for longer is closed as an ACK_TIMEOUT close is (the
	// CLOSED message with reason ACK_TIMEOUT; its id free again), counted in WatchesIdleClosed and
	// logged. It is for an external NATS server, which cannot be asked whether a watch's subscriber
	// is there (Interest): a client that crashed on a quiet namespace gets no update, so no ack is
	// ever due, and its watch would hold one of its principal's slots for ever (a worker that
	// crash-loops, with a new watch id each start, would fill max_watches_per_principal). Every
	// client must then name its watches more often than the bound, as the project's do when idle:
	// a store/client Cache checks its watch every CheckInterval (5 s) unless it acked meanwhile, so
	// it speaks at least every two intervals; a lease campaign's every RenewEvery, so at least every
	// two; statectl watch every 5 s. The server looks every IdleWatch/4, at most every 5 s, so a
	// watch is closed at most that long after the bound. Default 0: off.
	IdleWatch time.Duration
	// PeerCheckInterval is how often the server asks whether another server answers on its subjects
	// (see Conflict; Start refuses to start beside one, with ErrAnotherServer). Default 10 s;
	// negative: never after Start.
	PeerCheckInterval time.Duration

	// pendingBytes, when positive, replaces nats.go's 64 MiB bound on the bytes of requests and of
	// heartbeats that may wait in the server's subscriptions before NATS drops them. Tests lower it,
	// so that a flood is dropped there (and counted) long before the NATS server's own bound on what
	// waits to be written to the server's connection, past which it drops messages the server never
	// sees (NoFastProducerStall).
	pendingBytes int
}

// Server serves one store over one NATS connection.
type Server struct {
	st   *store.Store
	nc   *nats.Conn
	opts Options

	mu         sync.RWMutex
	principals map[string]policy.Principal
	// writing is held shared by every put and delete from the resolution of its principal until the
	// store has answered it; SetPrincipals takes it exclusively, so that no write authorised under
	// the principals it replaces commits after it returns.
	writing sync.RWMutex

	svc   micro.Service
	hbSub *nats.Subscription
	// inflight is held shared by every request and heartbeat being handled; Stop takes it exclusively
	// to wait for them, and sets stopped so later ones answer UNAVAILABLE.
	inflight  sync.RWMutex
	stopped   bool
	backups   backups
	slots     chan struct{} // one per request being handled off the queues (MaxConcurrentRequests)
	queues    queues        // acks and unwatches, ordered per principal
	hbLanes   latestLanes   // heartbeats, ordered per worker, the newest waiting one only
	hbWarn    warnEvery     // refused new workers, warned about once a minute per principal
	activity  atomic.Uint64 // requests handled
	ctx       context.Context
	cancel    context.CancelFunc
	stopOnce  sync.Once
	swept     chan struct{}         // closed when the sweeper has returned (nil: no sweeper: no Interest, no IdleWatch)
	conflict  atomic.Pointer[error] // another server answering on the same subjects (Conflict)
	peersDone chan struct{}         // closed when watchPeers has returned (nil: not started)
}

// New makes a Server; Start begins serving.
func New(st *store.Store, nc *nats.Conn, opts Options) (*Server, error) {
	if opts.Prefix == "" {
		opts.Prefix = wire.DefaultPrefix
	}
	if !wire.ValidPrefix(opts.Prefix) {
		return nil, fmt.Errorf("server: invalid subject prefix %q", opts.Prefix)
	}
	if opts.Version == "" {
		opts.Version = "0.1.0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 15 * time.Second
	}
	if opts.PeerCheckInterval == 0 {
		opts.PeerCheckInterval = 10 * time.Second
	}
	if opts.MaxConcurrentRequests == 0 {
		opts.MaxConcurrentRequests = 1024
	}
	if opts.MaxConcurrentRequests < 0 {
		return nil, fmt.Errorf("server: negative MaxConcurrentRequests %d", opts.MaxConcurrentRequests)
	}
	if opts.SweepInterval < 0 {
		return nil, fmt.Errorf("server: negative sweep interval %v", opts.SweepInterval)
	}
	if opts.IdleWatch < 0 {
		return nil, fmt.Errorf("server: negative idle watch bound %v", opts.IdleWatch)
	}
	if err := CheckPayload(st.Bounds(), nc.MaxPayload()); err != nil {
		return nil, err
	}
	s := &Server{st: st, nc: nc, opts: opts, hbLanes: latestLanes{n: heartbeatLanes, limit: heartbeatsWaiting},
		hbWarn: warnEvery{period: time.Minute},
		queues: queues{limit: ackQueueLimit(st.Bounds())}, slots: make(chan struct{}, opts.MaxConcurrentRequests)}
	if err := s.setPrincipals(opts.Principals); err != nil {
		return nil, err
	}
	// Checked under the warning's lock, which keep takes after a reload has set the principals: a
	// warning about a principal that a reload is removing is either dropped by keep or never kept.
	s.hbWarn.configured = func(id string) bool { _, ok := s.Principal(id); return ok }
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// envelopeRoom is what a message that carries one document needs beside it: the other fields of a
// put request, a get's reply or a watch update (namespace, key, schema, owner, revisions, times, ids),
// with room to spare.
const envelopeRoom = 8192

// CheckPayload reports the bounds that a NATS server taking messages of at most maxPayload bytes could
// not carry: a document of max_document_bytes in a put, a reply or an update, or a watch reply of
// max_snapshot_bytes. Such a message would be refused by the client or the server, so a put, a reply
// or a watch would fail with no state error to say why.
func CheckPayload(b wire.Bounds, maxPayload int64) error {
	if maxPayload <= 0 {
		return nil // not told (not connected yet): the connection's own errors will say
	}
	if b.MaxDocumentBytes+envelopeRoom > maxPayload {
		return fmt.Errorf("server: max_document_bytes %d does not fit the NATS server's max_payload %d with %d bytes for the rest of a message: lower the bound (or, on an external NATS server, raise its max_payload)",
			b.MaxDocumentBytes, maxPayload, envelopeRoom)
	}
	if b.MaxSnapshotBytes > maxPayload {
		return fmt.Errorf("server: max_snapshot_bytes %d is more than the NATS server's max_payload %d: lower the bound (or, on an external NATS server, raise its max_payload)",
			b.MaxSnapshotBytes, maxPayload)
	}
	return nil
}

// CheckBounds reports the bounds of b that the NATS server this server is connected to could not
// carry (see CheckPayload): a reload of the configuration can refuse, while the server runs, bounds
// on which the next start would fail.
func (s *Server) CheckBounds(b wire.Bounds) error { return CheckPayload(b, s.nc.MaxPayload()) }

func principalMap(ps []policy.Principal) (map[string]policy.Principal, error) {
	m := make(map[string]policy.Principal, len(ps))
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := m[p.ID]; dup {
			return nil, fmt.Errorf("server: principal %q is configured twice", p.ID)
		}
		m[p.ID] = p
	}
	return m, nil
}

func (s *Server) setPrincipals(ps []policy.Principal) error {
	m, err := principalMap(ps)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.principals = m
	s.mu.Unlock()
	return nil
}

// SetPrincipals replaces the principals (a reload). Watches of a principal that lost read permission,
// or was removed, are closed with UNAUTHORIZED before it returns. The store learns the new principals
// first, in one step with those closes, so no update reaches a watch after its principal lost
// permission and no watch registers with a permission it no longer has; requests then see the new set.
// A put or delete authorised under the old set is committed (or refused) before it returns, never
// after: it waits for those in flight, and holds new ones back meanwhile. What the server kept about a removed principal (its refused-heartbeat warning) is forgotten.
func (s *Server) SetPrincipals(ps []policy.Principal) error {
	m, err := principalMap(ps)
	if err != nil {
		return err
	}
	s.writing.Lock()
	defer s.writing.Unlock()
	s.st.ReloadPrincipals(func(id string) (policy.Principal, bool) {
		p, ok := m[id]
		return p, ok
	})
	s.mu.Lock()
	s.principals = m
	s.mu.Unlock()
	s.hbWarn.keep(func(id string) bool { _, ok := m[id]; return ok })
	return nil
}

// Activity counts the requests the server has handled; a process can tell from it that the server has
// gone idle (heartbeats do not count: a fleet heartbeats forever).
func (s *Server) Activity() uint64 { return s.activity.Load() }

// Principal returns the configured principal with id.
func (s *Server) Principal(id string) (policy.Principal, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.principals[id]
	return p, ok
}

// Start registers the micro service and the heartbeat subscription. It fails if NATS refuses any of
// their subscriptions to the connection's user (an external server's permissions for stated), or
// refuses it to publish where the server answers: into inboxes (replies) and on watch subjects.
func (s *Server) Start() error {
	if s.opts.BackupDir != "" {
		if err := os.MkdirAll(s.opts.BackupDir, 0o700); err != nil {
			return fmt.Errorf("server: backup directory: %w", err)
		}
		// Only a served store holds its database's lock, and so the directory: one that opened
		// unavailable may share it with a running server (a second stated started on the same data
		// directory), whose open backups are no stale files.
		if s.st.Unavailable() == nil {
			if err := removeStaleBackups(s.opts.BackupDir); err != nil {
				return fmt.Errorf("server: backup directory: %w", err)
			}
		}
	}
	// A second server on the same subjects would have NATS split the requests between two stores.
	if other, err := s.otherServer(s.ctx, ""); err != nil {
		return fmt.Errorf("server: look for another server: %w", err)
	} else if other != nil {
		return fmt.Errorf("server: %w; stop it first, or give this one another subject prefix", anotherServerError(other))
	}
	if m := s.opts.Metrics; m != nil {
		s.countDrops(m)
	}
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        ServiceName,
		Version:     s.opts.Version,
		Description: "keeppeek coordination plane state store",
		Metadata:    peerMetadata(),
	})
	if err != nil {
		return fmt.Errorf("server: add service: %w", err)
	}
	endpointOpts := func(subject string) []micro.EndpointOpt {
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(subject)}
		if s.opts.pendingBytes > 0 {
			opts = append(opts, micro.WithEndpointPendingLimits(nats.DefaultSubPendingMsgsLimit, s.opts.pendingBytes))
		}
		return opts
	}
	for _, op := range wire.Ops {
		subject := s.opts.Prefix + ".state.v1.*." + string(op)
		if err := svc.AddEndpoint(string(op), s.handler(op), endpointOpts(subject)...); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("server: endpoint %s: %w", op, err)
		}
	}
	for _, op := range adminOps {
		subject := s.opts.Prefix + ".admin.v1.*." + string(op)
		if err := svc.AddEndpoint("admin_"+string(op), s.adminHandler(op), endpointOpts(subject)...); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("server: endpoint %s: %w", op, err)
		}
	}
	sub, err := s.nc.Subscribe(s.heartbeatSubject(), s.onHeartbeat)
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("server: heartbeat subscription: %w", err)
	}
	if s.opts.pendingBytes > 0 {
		_ = sub.SetPendingLimits(nats.DefaultSubPendingMsgsLimit, s.opts.pendingBytes)
	}
	// The server publishes replies into the requesters' inboxes (_INBOX.<principal>...) and updates
	// on the watch subjects: one empty message to each kind of subject, under a token that is no
	// principal id (so no principal can subscribe there), tells whether its user may.
	for _, subject := range []string{wire.InboxPrefix(probeToken) + ".probe", wire.WatchSubject(s.opts.Prefix, probeToken, "probe")} {
		if err := s.nc.Publish(subject, nil); err != nil {
			_ = svc.Stop()
			_ = sub.Unsubscribe()
			return fmt.Errorf("server: publish on %s: %w", subject, err)
		}
	}
	// NATS answers a subscription or a publish its user may not make with an asynchronous error,
	// which has come by the time the flush's answer has: a server deaf to requests or heartbeats, or
	// mute to its requesters and watchers, must not start.
	if err := s.nc.Flush(); err != nil {
		_ = svc.Stop()
		_ = sub.Unsubscribe()
		return fmt.Errorf("server: flush: %w", err)
	}
	if err := s.nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) &&
		(strings.Contains(err.Error(), "Subscription") || strings.Contains(err.Error(), "Publish")) {
		_ = svc.Stop()
		_ = sub.Unsubscribe()
		return fmt.Errorf("server: the NATS user may not subscribe to, or publish on, what the server serves (give it every subject under %s., $SRV.> and _INBOX.>): %w",
			s.opts.Prefix, err)
	}
	s.svc, s.hbSub = svc, sub
	if s.opts.Interest != nil || s.opts.IdleWatch > 0 {
		s.swept = make(chan struct{})
		go s.sweep()
	}
	if s.opts.PeerCheckInterval > 0 {
		s.peersDone = make(chan struct{})
		go s.watchPeers()
	}
	return nil
}

// countDrops has the connection's error handler hand the server's subscriptions that NATS reports
// as slow consumers to m (see droppedRequests), then call the handler set before. Requests past
// MaxConcurrentRequests wait in the endpoints' subscriptions, and past their pending limits nats.go
// drops them (heartbeats too, should they come faster than the handler hands them over); it tells
// only the connection's error handler, once per subscription each time it starts dropping, and
// names the subscription only there. It is installed before the micro service is added: the service
// wraps the connection's handler in turn, and reports to this one what it does not handle itself.
// The subjects are known before they are subscribed to: the handler matches the subscriptions by
// subject.
func (s *Server) countDrops(m *Metrics) {
	ops := map[string]string{}
	for _, op := range wire.Ops {
		ops[s.opts.Prefix+".state.v1.*."+string(op)] = string(op)
	}
	for _, op := range adminOps {
		ops[s.opts.Prefix+".admin.v1.*."+string(op)] = string(op)
	}
	heartbeats := s.heartbeatSubject()
	prev := s.nc.ErrorHandler()
	s.nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			subject := subjectOf(sub)
			if op, ok := ops[subject]; ok {
				m.requestsDropped(op, sub)
			} else if subject == heartbeats {
				m.heartbeatsDropped(sub)
			}
		}
		if prev != nil {
			prev(nc, sub, err)
		}
	})
}

// heartbeatSubject is the subject the server takes heartbeats on.
func (s *Server) heartbeatSubject() string { return s.opts.Prefix + ".heartbeat.v1.*.*" }

// subjectOf is sub's subject ("" for none).
func subjectOf(sub *nats.Subscription) string {
	if sub == nil {
		return ""
	}
	return sub.Subject
}

// adminOps are the admin calls the server serves.
var adminOps = []wire.Op{wire.AdminBackup, wire.AdminAuditVerify}

// probeToken stands for a principal in the subjects Start publishes on to learn whether its NATS user
// may: it is no principal id, so no principal may subscribe to them.
const probeToken = "_stated"

// sweep drops, every SweepInterval, the watches whose delivery subject had no subscriber at this look
// and the one before (see Options.Interest), and closes, every idleLookPeriod, the watches no request
// named within IdleWatch (see Options.IdleWatch), until the server stops.
func (s *Server) sweep() {
	defer close(s.swept)
	var sweeps, idleLooks <-chan time.Time
	if s.opts.Interest != nil {
		t := time.NewTicker(s.opts.SweepInterval)
		defer t.Stop()
		sweeps = t.C
	}
	if s.opts.IdleWatch > 0 {
		t := time.NewTicker(idleLookPeriod(s.opts.IdleWatch))
		defer t.Stop()
		idleLooks = t.C
	}
	missing := map[store.WatchRef]bool{} // no subscriber at the last look
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-sweeps:
			missing = s.dropUnheard(missing)
		case <-idleLooks:
			s.closeIdle()
		}
	}
}

// idleLookPeriod is how often the server looks for idle watches: a quarter of the bound, so a watch
// is closed at most a quarter late, but at most every 5 s (a look walks every watch), and at least
// every millisecond.
func idleLookPeriod(idle time.Duration) time.Duration {
	return min(max(idle/4, time.Millisecond), 5*time.Second)
}

// closeIdle closes the watches no request named within IdleWatch, and logs and counts each.
func (s *Server) closeIdle() {
	for _, ref := range s.st.CloseIdleWatches(s.opts.IdleWatch) {
		s.opts.Logger.Info("closed a watch with ACK_TIMEOUT: its client sent no request naming it within the idle bound",
			"principal", ref.Principal, "watch_id", ref.WatchID, "idle", s.opts.IdleWatch)
		if m := s.opts.Metrics; m != nil {
			m.WatchesIdleClosed.Inc()
		}
	}
}

// dropUnheard drops the watches whose delivery subject has no subscriber now and had none at the last
// look (missing), and returns those that have none now.
func (s *Server) dropUnheard(missing map[store.WatchRef]bool) map[store.WatchRef]bool {
	next := map[store.WatchRef]bool{}
	for _, ref := range s.st.LiveWatches() {
		if s.opts.Interest(wire.WatchSubject(s.opts.Prefix, ref.Principal, ref.WatchID)) {
			continue
		}
		if !missing[ref] {
			next[ref] = true
			continue
		}
		if s.st.DropWatch(ref) {
			s.opts.Logger.Info("dropped a watch whose subscriber is gone", "principal", ref.Principal, "watch_id", ref.WatchID)
			if m := s.opts.Metrics; m != nil {
				m.WatchesDropped.Inc()
			}
		}
	}
	if m := s.opts.Metrics; m != nil {
		m.WatchSweeps.Inc()
	}
	return next
}

// Stop stops taking requests and heartbeats, waits for the requests in flight (until ctx ends), then
// closes the store, which finishes queued commits and closes every watch with SHUTDOWN, and flushes
// the close messages to NATS.
func (s *Server) Stop(ctx context.Context) error {
	var err error
	s.stopOnce.Do(func() {
		if m := s.opts.Metrics; m != nil {
			m.dropped.update() // what NATS dropped so far: the subscriptions close below
		}
		if s.svc != nil {
			err = errors.Join(err, s.svc.Stop())
		}
		if s.hbSub != nil {
			err = errors.Join(err, s.hbSub.Unsubscribe())
		}
		s.queues.close()
		if n := s.hbLanes.close(); n > 0 {
			// Heartbeats taken that still waited on their lanes: dropped, as the server stopped.
			if m := s.opts.Metrics; m != nil {
				m.Heartbeats.WithLabelValues("dropped").Add(float64(n))
			}
		}
		done := make(chan struct{})
		go func() {
			s.queues.wg.Wait() // what the queues hold waits for the store like any request: within ctx
			s.hbLanes.wg.Wait()
			s.inflight.Lock()
			s.stopped = true
			s.inflight.Unlock()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("server: requests still in flight: %w", ctx.Err()))
		}
		s.cancel()
		if s.swept != nil {
			<-s.swept
		}
		if s.peersDone != nil {
			<-s.peersDone
		}
		s.backups.closeAll()
		err = errors.Join(err, s.st.Close())
		if !s.nc.IsClosed() {
			fctx := ctx
			if _, ok := ctx.Deadline(); !ok { // FlushWithContext needs one
				var cancel context.CancelFunc
				fctx, cancel = context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
			}
			err = errors.Join(err, s.nc.FlushWithContext(fctx))
		}
	})
	return err
}

// handler returns the micro handler of op. Every request but acks and unwatches runs on its own
// goroutine (at most MaxConcurrentRequests at once), so concurrent writers share group commits and
// readers use every core. Acks and unwatches are handled in their arrival order per principal: each
// principal's wait in a queue of its own (see queues), handled beside other principals' queues. The
// handler hands them over without ever waiting, so one principal's backlog never holds back the
// subscription that every principal's acks share, and so never another principal's acks (nor, past
// nats.go's pending limits, has them dropped). An ack or unwatch of a principal that already has
// ackQueueLimit waiting is answered RESOURCE_EXHAUSTED at once: it was not handled, nothing changed,
// and the client may send it again once its earlier ones are answered (an ack names the highest
// applied sequence, so a later ack covers a refused one). The requests that are handled keep their
// order; a refused one's answer may come before those of earlier ones still waiting.
func (s *Server) handler(op wire.Op) micro.HandlerFunc {
	return func(req micro.Request) {
		start := time.Now()
		switch op {
		case wire.OpAck, wire.OpUnwatch:
			toks, err := wire.SubjectTokens(req.Subject(), s.opts.Prefix, "state.v1", 2)
			if err != nil {
				s.serve(op, req, start) // INVALID_ARGUMENT, without the engine
				return
			}
			if size := len(req.Data()) + headerBytes(req.Headers()); size > maxQueuedRequestBytes {
				// Refused before it is queued: a queue holds its requests, and a principal may have
				// ackQueueLimit of them waiting; an ack or unwatch is a few dozen bytes, and needs
				// no headers.
				err := s.st.Serving() // SPEC section 5, check (0), comes first
				if err == nil {
					err = wire.Errorf(wire.CodeInvalidArgument, "a %s request is at most %d bytes, headers included; this one is %d", op, maxQueuedRequestBytes, size)
				}
				s.refuse(op, req, start, err)
				return
			}
			if _, known := s.Principal(toks[0]); !known {
				// Answered without the engine (INVALID_ARGUMENT or PERMISSION_DENIED), and no
				// queue is kept for a principal that only a NATS without identities lets anyone
				// name: the queues stay as many as the configured principals.
				s.serve(op, req, start)
				return
			}
			// What waits is a copy of the request's body, not the message: nats.go keeps the body in
			// the buffer its headers came in, and a header block it cannot decode (so not counted
			// above) would be held with it.
			queued := s.detach(req)
			queued.data = bytes.Clone(queued.data)
			switch s.queues.offer(toks[0], func() { s.serve(op, queued, start) }) {
			case offerFull:
				err := s.st.Serving() // SPEC section 5, check (0), comes first
				if err == nil {
					err = wire.Errorf(wire.CodeResourceExhausted,
						"principal %s has %d acks and unwatches waiting to be handled: this one was not taken; send it again once earlier ones are answered",
						toks[0], s.queues.limit)
				}
				s.refuse(op, req, start, err)
			case offerClosed:
				s.refuse(op, req, start, wire.Errorf(wire.CodeUnavailable, "the server is stopping"))
			}
		default:
			s.slots <- struct{}{} // a free slot first: past the bound, requests wait in NATS
			detached := s.detach(req)
			go func() {
				defer func() { <-s.slots }()
				s.serve(op, detached, start)
			}()
		}
	}
}

// maxQueuedRequestBytes bounds an ack or unwatch request, its body and headers: one that waits in its
// principal's queue holds its body there, so the bound keeps a principal's queue to a few MiB
// (ackQueueLimit of them) rather than a GiB of padded requests of NATS's max_payload each.
const maxQueuedRequestBytes = 4096

// headerBytes is the size of h as NATS carries it: the version line, a "key: value" line per value
// and the closing line break.
func headerBytes(h map[string][]string) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// detachedRequest is a request handled after its handler has returned: its subject, reply subject
// and body (a copy of it, for one that waits in a queue), without the message they came in. It
// answers on its reply subject over nc, as the message would. The micro request itself must not be
// answered then: a reply that fails (a request without a reply subject, a lost connection) records
// its error on that request, which the micro service reads, unlocked, as soon as the handler returns
// (a data race, whose torn read of the error could crash the process).
type detachedRequest struct {
	nc             *nats.Conn
	subject, reply string
	data           []byte
}

// detach returns req's subject, reply subject and body (not copied: nats.go gives every message a
// body of its own) as a request that may be answered after the handler returned.
func (s *Server) detach(req micro.Request) *detachedRequest {
	return &detachedRequest{nc: s.nc, subject: req.Subject(), reply: req.Reply(), data: req.Data()}
}

func (r *detachedRequest) Respond(b []byte, opts ...micro.RespondOpt) error {
	if r.reply == "" {
		return nats.ErrMsgNoReply
	}
	m := &nats.Msg{Subject: r.reply, Data: b}
	for _, o := range opts {
		o(m)
	}
	return r.nc.PublishMsg(m)
}

func (r *detachedRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.Respond(b, opts...)
}

func (r *detachedRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	h := nats.Header{micro.ErrorHeader: {description}, micro.ErrorCodeHeader: {code}}
	return r.Respond(data, append([]micro.RespondOpt{micro.WithHeaders(micro.Headers(h))}, opts...)...)
}

func (r *detachedRequest) Data() []byte           { return r.data }
func (r *detachedRequest) Headers() micro.Headers { return nil }
func (r *detachedRequest) Subject() string        { return r.subject }
func (r *detachedRequest) Reply() string          { return r.reply }

// ackQueueLimit is how many acks and unwatches of one principal may wait to be handled: two for each
// watch it may hold (max_watches_per_principal), at least 1,024. A client that waits for each answer
// before it sends the next ack or unwatch of a watch (as store/client's Cache does) never reaches it;
// one that floods them is refused past it.
func ackQueueLimit(b wire.Bounds) int {
	return int(max(1024, 2*min(b.MaxWatchesPerPrincipal, 1<<20)))
}

// queues run functions in order per key (a principal) and in parallel across keys, each key's on a
// goroutine of its own that lives while the key has functions waiting. At most limit functions of one
// key wait (besides the one running); offer never blocks, so a key whose functions are slow, or that
// offers them faster than they run, holds back only its own.
type queues struct {
	limit   int
	mu      sync.Mutex
	closed  bool
	waiting map[string][]func() // per key with a goroutine, the functions after the running one
	wg      sync.WaitGroup
}

// offer hands fn over to run after the functions of key offered before it: offerQueued, offerFull
// (key already has limit functions waiting: fn is not taken) or offerClosed (fn is not taken).
func (q *queues) offer(key string, fn func()) offerResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return offerClosed
	}
	if q.waiting == nil {
		q.waiting = map[string][]func(){}
	}
	fns, busy := q.waiting[key]
	if !busy {
		q.waiting[key] = []func(){}
		q.wg.Go(func() { q.drain(key, fn) })
		return offerQueued
	}
	if len(fns) >= q.limit {
		return offerFull
	}
	q.waiting[key] = append(fns, fn)
	return offerQueued
}

// drain runs fn, then key's waiting functions in order, and returns when none is left.
func (q *queues) drain(key string, fn func()) {
	for {
		fn()
		q.mu.Lock()
		fns := q.waiting[key]
		if len(fns) == 0 {
			delete(q.waiting, key)
			q.mu.Unlock()
			return
		}
		fn = fns[0]
		fns[0] = nil
		q.waiting[key] = fns[1:]
		q.mu.Unlock()
	}
}

// close stops taking functions; those already taken still run, and wg is done when they have.
func (q *queues) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// refuse answers a request that was not handled with err, as serve would (reply subject checked,
// counted), at once.
func (s *Server) refuse(op wire.Op, req micro.Request, start time.Time, err error) {
	if !s.admit(op, req, start) {
		return
	}
	s.respond(op, req, start, wire.ErrorResult(wire.RequestIDOf(req.Data()), err), nil)
}

// serve handles req, taken off NATS at start (its latency is counted from then).
func (s *Server) serve(op wire.Op, req micro.Request, start time.Time) {
	s.activity.Add(1)
	if !s.admit(op, req, start) {
		return
	}
	s.inflight.RLock()
	defer s.inflight.RUnlock()
	var id int64
	var res wire.Result
	var after func(error)
	if s.stopped {
		id = wire.RequestIDOf(req.Data())
		res = wire.ErrorResult(id, wire.Errorf(wire.CodeUnavailable, "the server is stopping"))
	} else {
		id, res, after = s.dispatch(op, req)
	}
	if !res.OK && res.Error == nil {
		s.opts.Logger.Warn("request not answered: its context ended while the store had it, so its outcome is unknown",
			"op", string(op), "request_id", id, "timeout", s.opts.RequestTimeout)
		if m := s.opts.Metrics; m != nil {
			m.observeRequest(string(op), codeNoReply, time.Since(start))
		}
		return
	}
	res.RequestID = id
	s.respond(op, req, start, res, after)
}

// admit reports whether req may be answered: its reply subject lies in its principal's space (see
// replyAllowed). A request it refuses is counted as ReplyRefused and gets no reply.
func (s *Server) admit(op wire.Op, req micro.Request, start time.Time) bool {
	if s.replyAllowed(req.Subject(), "state.v1", req.Reply()) {
		return true
	}
	s.opts.Logger.Debug("request not served: its reply subject lies outside its principal's space",
		"subject", req.Subject(), "reply", req.Reply())
	if m := s.opts.Metrics; m != nil {
		m.observeRequest(string(op), ReplyRefused, time.Since(start))
	}
	return false
}

// respond sends res as req's reply, calls after (if set) with the outcome of the send, and counts the
// request by its code.
func (s *Server) respond(op wire.Op, req micro.Request, start time.Time, res wire.Result, after func(error)) {
	if res.RequestID < 0 || res.RequestID > wire.MaxSafeInteger {
		// Refused (INVALID_ARGUMENT) by the checks: an id outside the contract's integers cannot be
		// echoed, so the reply carries 0, as the reply to a request that is not JSON does.
		res.RequestID = 0
	}
	res.Error = cutMessage(res.Error)
	// Entries are encoded without re-validating their documents, into a reused buffer: Respond copies
	// the reply into the connection's buffer.
	if op == wire.OpList {
		cutPage(&res, s.nc.MaxPayload()) // before encoding: what cannot fit is not encoded
	}
	bp := encodeBuffers.Get().(*[]byte)
	*bp = wire.AppendResult((*bp)[:0], &res)
	if op == wire.OpList {
		*bp = fitPage(*bp, &res, s.nc.MaxPayload()) // the page as encoded, exactly
	}
	respErr := req.Respond(*bp)
	putEncodeBuffer(bp)
	if after != nil {
		after(respErr)
	}
	if m := s.opts.Metrics; m != nil {
		m.observeRequest(string(op), resultCode(res.Error, respErr), time.Since(start))
	}
}

// resultCode is the code label of a request served with the answer e (nil: OK) whose reply's send
// returned respErr.
func resultCode(e *wire.Error, respErr error) string {
	switch {
	case respErr != nil:
		return ReplyFailed
	case e != nil:
		return string(e.Code)
	}
	return "OK"
}

// maxErrorMessage bounds the message of an error reply, in bytes. A message may quote what a request
// got wrong (an invalid key, watch id or backup id), and a request may be as large as the NATS server
// takes: quoted, and escaped again for JSON (a '<' is sent as \u003c), such a message can be several
// times the request's size, and a reply over max_payload is never sent, so a malformed request would
// get no answer at all. The code says what is wrong; the message's first bytes say where.
const maxErrorMessage = 1024

// cutMessage returns e with its message cut to maxErrorMessage bytes (at a character's start), or e
// itself when it is short enough. e is copied, not changed: errors may be shared.
func cutMessage(e *wire.Error) *wire.Error {
	if e == nil || len(e.Message) <= maxErrorMessage {
		return e
	}
	n := maxErrorMessage
	for n > 0 && !utf8.RuneStart(e.Message[n]) {
		n--
	}
	c := *e
	c.Message = e.Message[:n] + fmt.Sprintf("... (%d more bytes cut)", len(e.Message)-n)
	return &c
}

// ReplyRefused is the code label of the requests the server did not serve because of their reply
// subject (see replyAllowed).
const ReplyRefused = "REPLY_REFUSED"

// ReplyFailed is the code label of the requests the server served (what they do was done) but whose
// reply it could not send: no reply subject (published, not requested), a connection closed, a reply
// over the NATS server's max_payload.
const ReplyFailed = "REPLY_FAILED"

// replyAllowed reports whether the server may publish the reply to a request on subject (of kind
// "state.v1" or "admin.v1") on reply. NATS lets a principal publish only under its own subjects, but a
// request's reply subject is the requester's choice, and the server publishes as itself, anywhere: a
// reply on any other subject (another principal's watch subjects, heartbeats, media commands,
// capabilities, a $ system subject, another application's subjects on a shared NATS) or in another
// configured principal's inbox (_INBOX.<principal>...) would have the server publish there on the
// requester's behalf: into another principal's watch, say, which then ends on a message that is not an
// update. Such a request is not served. Replies go to inboxes only (SPEC section 9): the requester's
// own, or one of no configured principal (a client without the inbox prefix, where NATS runs without
// authorization: the dev principal, or the nats CLI). A request without a reply subject is served
// (nothing is sent).
func (s *Server) replyAllowed(subject, kind, reply string) bool {
	if reply == "" {
		return true
	}
	rest, ok := strings.CutPrefix(reply, "_INBOX.")
	if !ok {
		return false
	}
	owner, _, _ := strings.Cut(rest, ".")
	toks, err := wire.SubjectTokens(subject, s.opts.Prefix, kind, 2)
	if err != nil || owner == toks[0] {
		return true
	}
	if _, known := s.Principal(toks[0]); !known {
		// Answered PERMISSION_DENIED: only where NATS does not enforce identities can anyone
		// publish under a principal that is not configured.
		return true
	}
	_, other := s.Principal(owner)
	return !other
}

// fitPage shortens a list page whose encoding b is larger than the NATS server takes in one message
// (limit, as the connection learned it): a page of 100 documents of 16 KiB is. Such a reply could not be
// sent, and the client would wait for it in vain. The page keeps the first entries that fit, and its
// next_after_key names the last of them, so the client reads the rest as the next page: limit is the
// most a page holds, and next_after_key says more entries follow. A page of one entry stays as it is.
func fitPage(b []byte, res *wire.Result, limit int64) []byte {
	for limit > 0 && int64(len(b)) > limit && len(res.Entries) > 1 {
		n := len(res.Entries)
		keep := min(max(int(int64(n)*limit/int64(len(b))), 1), n-1)
		res.Entries = res.Entries[:keep]
		res.NextAfterKey = res.Entries[keep-1].Key
		b = wire.AppendResult(b[:0], res)
	}
	return b
}

// cutPage shortens a list page before it is encoded, to the entries whose encoding cannot be larger
// than limit bytes (at least one): a page of 256 entries of 16 KiB is never encoded whole (4 MiB per
// request) only for fitPage to cut it to the NATS message size. It counts each entry's least
// encoded size (entryFloor), so it never drops an entry that would have fit; fitPage trims the rest.
func cutPage(res *wire.Result, limit int64) {
	if limit <= 0 {
		return
	}
	var size int64
	for i, e := range res.Entries {
		if size += entryFloor(&e); size > limit && i > 0 {
			res.Entries = res.Entries[:i]
			res.NextAfterKey = res.Entries[i-1].Key
			return
		}
	}
}

// entryFloor is at most the length of e's JSON encoding within a page: its strings and document as
// they are (escaping only lengthens them) and its field names.
func entryFloor(e *wire.Entry) int64 {
	return int64(len(e.Namespace)+len(e.Key)+len(e.Schema)+len(e.Owner)+len(e.Document)) + entryFieldBytes
}

// entryFieldBytes is the length of the names, quotes, colons, commas and braces of an entry's
// always-present fields: {"namespace":"","key":"","schema":"","owner":"","revision":,"created_at_ms":,"updated_at_ms":,"document":}
// plus a digit for each of its three numbers.
const entryFieldBytes = int64(len(`{"namespace":"","key":"","schema":"","owner":"","revision":,"created_at_ms":,"updated_at_ms":,"document":}`) + 3)

// errorResult is the reply to a request the engine answered err. A request whose context ended while
// the engine had it (RequestTimeout, or Stop's deadline) has an unknown outcome: a write may still
// commit. It gets no reply at all, as if the reply were lost, rather than an error code that would say
// nothing changed: noReply marks it.
func errorResult(id int64, err error) wire.Result {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return noReply
	}
	return wire.ErrorResult(id, err)
}

// noReply is the result of a request that must not be answered: not OK, and without an error, which
// no real reply is.
var noReply = wire.Result{}

// dispatch runs one request. after, when not nil, runs once the reply was sent (or failed to be).
func (s *Server) dispatch(op wire.Op, req micro.Request) (int64, wire.Result, func(error)) {
	data := req.Data()
	if op != wire.OpInfo {
		// SPEC section 5, check (0): a store that is not served answers UNAVAILABLE before any
		// other check. info is answered regardless (without the store's feature).
		if err := s.st.Serving(); err != nil {
			id := wire.RequestIDOf(data)
			return id, wire.ErrorResult(id, err), nil
		}
	}
	toks, err := wire.SubjectTokens(req.Subject(), s.opts.Prefix, "state.v1", 2)
	if err != nil {
		return wire.RequestIDOf(data), wire.ErrorResult(wire.RequestIDOf(data), wire.Errorf(wire.CodeInvalidArgument, "%v", err)), nil
	}
	if op == wire.OpInfo && len(data) == 0 {
		data = []byte("{}")
	}
	if op == wire.OpPut || op == wire.OpDelete {
		s.writing.RLock()
		defer s.writing.RUnlock()
	}
	p, ok := s.Principal(toks[0])
	if !ok {
		// A principal the server does not know fails the namespace policy (check 2), which comes
		// after the request's shape (check 1). Only where NATS does not enforce identities can
		// anyone publish under such a token.
		id, err := checkShape(op, data)
		if err == nil {
			err = wire.Errorf(wire.CodePermissionDenied, "unknown principal %q", toks[0])
		}
		return id, wire.ErrorResult(id, err), nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.RequestTimeout)
	defer cancel()
	fail := func(id int64, err error) (int64, wire.Result, func(error)) {
		return id, errorResult(id, err), nil
	}
	switch op {
	case wire.OpGet:
		var r wire.GetRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		e, err := s.st.Get(ctx, p, r)
		if err != nil {
			return fail(r.RequestID, err)
		}
		return r.RequestID, wire.Result{OK: true, Entry: &e}, nil
	case wire.OpPut:
		var r wire.PutRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		e, err := s.st.Put(ctx, p, r)
		if err != nil {
			return fail(r.RequestID, err)
		}
		return r.RequestID, wire.Result{OK: true, Entry: &e}, nil
	case wire.OpDelete:
		var r wire.DeleteRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		rev, err := s.st.Delete(ctx, p, r)
		if err != nil {
			return fail(r.RequestID, err)
		}
		return r.RequestID, wire.Result{OK: true, Revision: &rev}, nil
	case wire.OpList:
		var r wire.ListRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		l, err := s.st.List(ctx, p, r)
		if err != nil {
			return fail(r.RequestID, err)
		}
		return r.RequestID, wire.Result{OK: true, Entries: l.Entries, NextAfterKey: l.NextAfterKey, Revision: &l.Revision}, nil
	case wire.OpWatch:
		var r wire.WatchRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		return s.watch(ctx, p, r)
	case wire.OpUnwatch:
		var r wire.UnwatchRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		if err := s.st.Unwatch(ctx, p, r); err != nil {
			return fail(r.RequestID, err)
		}
		return r.RequestID, wire.Result{OK: true, WatchID: r.WatchID}, nil
	case wire.OpAck:
		var r wire.AckRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		if err := s.st.Ack(ctx, p, r); err != nil {
			return fail(r.RequestID, err)
		}
		seq := uint64(*r.AppliedSequence)
		return r.RequestID, wire.Result{OK: true, WatchID: r.WatchID, AppliedSequence: &seq}, nil
	case wire.OpInfo:
		var r wire.InfoRequest
		if err := wire.Decode(data, &r); err != nil {
			return fail(wire.RequestIDOf(data), err)
		}
		if err := r.Validate(); err != nil {
			return fail(r.RequestID, err)
		}
		info := s.st.Info()
		return r.RequestID, wire.Result{OK: true, ServerID: info.ServerID, Version: info.Version, Epoch: info.Epoch,
			Features: info.Features, Bounds: &info.Bounds}, nil
	}
	return fail(wire.RequestIDOf(data), wire.Errorf(wire.CodeInvalidArgument, "unknown op %q", op))
}

// checkShape runs check 1 of SPEC section 5 (shape and identifiers) on a request of op, as the store
// would before any other, and returns its request_id.
func checkShape(op wire.Op, data []byte) (int64, error) {
	var r interface{ Validate() error }
	switch op {
	case wire.OpGet:
		r = &wire.GetRequest{}
	case wire.OpPut:
		r = &wire.PutRequest{}
	case wire.OpDelete:
		r = &wire.DeleteRequest{}
	case wire.OpList:
		r = &wire.ListRequest{}
	case wire.OpWatch:
		r = &wire.WatchRequest{}
	case wire.OpUnwatch:
		r = &wire.UnwatchRequest{}
	case wire.OpAck:
		r = &wire.AckRequest{}
	case wire.OpInfo:
		r = &wire.InfoRequest{}
	default:
		return wire.RequestIDOf(data), wire.Errorf(wire.CodeInvalidArgument, "unknown op %q", op)
	}
	if err := wire.Decode(data, r); err != nil {
		return wire.RequestIDOf(data), err
	}
	return wire.RequestIDOf(data), r.Validate() // decoded strictly: the id it reads is the field's
}

// watch registers the watch with a sink that holds its updates until the snapshot reply is sent, so a
// client sees the snapshot first. If the reply cannot be sent the watch closes with SNAPSHOT_FAILED.
func (s *Server) watch(ctx context.Context, p policy.Principal, r wire.WatchRequest) (int64, wire.Result, func(error)) {
	subject := wire.WatchSubject(s.opts.Prefix, p.ID, r.WatchID)
	g := &gate{nc: s.nc, subject: subject}
	if m := s.opts.Metrics; m != nil {
		g.unsent = m.WatchMessagesUnsent
	}
	ws, ref, err := s.st.Register(ctx, p, r, g.sink)
	if err != nil {
		return r.RequestID, errorResult(r.RequestID, err), nil
	}
	after := func(respErr error) {
		if respErr != nil {
			// This registration only: the client may have unwatched it and watched the id again.
			s.st.CloseWatchRef(ref, wire.CloseSnapshotFailed, "the snapshot reply could not be delivered: "+respErr.Error())
			g.openClosed()
			return
		}
		// The client has the reply, and may have unwatched this registration since and watched the id
		// again: the updates held for it must not then reach the new one, which shares its subject.
		s.st.WithWatchRef(ref, func(live bool) {
			if live {
				g.open()
			} else {
				g.openClosed()
			}
		})
	}
	return r.RequestID, wire.Result{OK: true, Watch: ws}, after
}

// gate publishes a watch's messages, holding them until the snapshot reply has gone out.
type gate struct {
	nc      *nats.Conn
	subject string
	unsent  prometheus.Counter // messages NATS refused (nil: not counted)
	mu      sync.Mutex
	opened  bool
	held    [][]byte
	closure []byte // the held closure of the watch, if one is held
}

// publish hands b to NATS, which buffers it; one it refuses (the connection closed, or reconnecting
// with a full buffer) is counted: its watcher sees the loss as a gap.
func (g *gate) publish(b []byte) {
	if err := g.nc.Publish(g.subject, b); err != nil && g.unsent != nil {
		g.unsent.Inc()
	}
}

func (g *gate) sink(m store.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		b := m.JSON()
		g.held = append(g.held, b)
		if m.Closed != nil {
			g.closure = b
		}
		return
	}
	// Publish copies the message into the connection's buffer: the encoding's buffer is reused.
	bp := encodeBuffers.Get().(*[]byte)
	*bp = m.AppendJSON((*bp)[:0])
	g.publish(*bp)
	putEncodeBuffer(bp)
}

// encodeBuffers hold replies and watch messages while they are published.
var encodeBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuffer bounds the buffers kept for reuse: a large snapshot reply's buffer goes to the
// garbage collector rather than staying in the pool.
const maxPooledBuffer = 64 << 10

func putEncodeBuffer(bp *[]byte) {
	if cap(*bp) <= maxPooledBuffer {
		encodeBuffers.Put(bp)
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.held {
		g.publish(b)
	}
	g.held, g.opened = nil, true
}

// openClosed opens a gate whose watch is gone: its snapshot reply was not sent, or it was closed or
// unwatched before the gate opened. Only its closure, if one was held, goes out. The updates held
// follow a snapshot the client never had, so it could not apply them: sent, they would come before the
// CLOSED that tells it to start again; and once it has unwatched, the subject may be a new watch's.
func (g *gate) openClosed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closure != nil {
		g.publish(g.closure)
	}
	g.held, g.closure, g.opened = nil, nil, true
}
