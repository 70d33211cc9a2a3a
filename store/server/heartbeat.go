package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// heartbeatLanes is how many workers' heartbeats are handled at once: each waits for its commit, so
// more lanes put more keepalives in each commit (about 1,500 heartbeats/s on one lane, 4,000 on 8,
// 17,000 on 32 here: go test ./store/server -bench Heartbeats).
const heartbeatLanes = 32

// serverPrincipal reads the system namespace on the server's own behalf.
var serverPrincipal = policy.Principal{ID: "stated", Admin: true}

// onHeartbeat keeps system/workers/<principal>/<worker_id> (SPEC section 11): a put for a worker's
// first heartbeat and whenever status, leases, service or interval change; otherwise a keepalive that
// only pushes the deadline. Heartbeats that do not parse or break a rule are dropped and counted.
// Each worker's heartbeats are handled one at a time, in arrival order, so its read-compare-write never
// races its own next heartbeat; different workers' run on several lanes at once, so their keepalives
// share commits.
func (s *Server) onHeartbeat(msg *nats.Msg) {
	s.hbLanes.run(msg.Subject, func() { s.handleHeartbeat(msg) })
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
