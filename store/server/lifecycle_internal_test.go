package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// These tests drive a server through many cycles of principals, watches, acks and workers that come
// and go, over NATS, and check that the server's own structures (the ack and unwatch queues, the
// heartbeat lanes, the refusal warnings, the store's watches and worker entries) are back to where they
// started: a stated that runs for months must not keep a trace of each one it ever served.

const lifeTimeout = 10 * time.Second

// lifeEnv is a server over a store on disk and an embedded NATS server, stopped at cleanup.
type lifeEnv struct {
	srv *Server
	st  *store.Store
	url string
	reg *prometheus.Registry
}

var lifeAdmin = policy.Principal{ID: "coordinator", Admin: true}

func startLife(t *testing.T, b wire.Bounds) *lifeEnv {
	t.Helper()
	so := store.DefaultOptions()
	so.Bounds = b
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ns := natstest.Start(t, natsserver.Options{})
	s, st := newServer(t, ns, so, Options{Principals: []policy.Principal{lifeAdmin}, Metrics: m, Logger: slog.New(slog.DiscardHandler),
		Interest: ns.HasSubscriber, SweepInterval: 20 * time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), lifeTimeout)
		defer cancel()
		_ = s.Stop(ctx)
	})
	if err := m.RegisterStore(reg, st, "bbolt"); err != nil {
		t.Fatal(err)
	}
	return &lifeEnv{srv: s, st: st, url: ns.ClientURL(), reg: reg}
}

// connect opens a connection as principal (its inbox prefix), closed at cleanup.
func (e *lifeEnv) connect(t *testing.T, principal string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.url, nats.CustomInboxPrefix(wire.InboxPrefix(principal)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func lifeRequest(t *testing.T, nc *nats.Conn, principal string, op wire.Op, body string) wire.Result {
	t.Helper()
	return natstest.Request(t, nc, principal, op, body, lifeTimeout)
}

func lifeOK(t *testing.T, nc *nats.Conn, principal string, op wire.Op, body string) wire.Result {
	t.Helper()
	r := lifeRequest(t, nc, principal, op, body)
	if !r.OK {
		t.Fatalf("%s %s: %+v", op, body, r.Error)
	}
	return r
}

// lifeWatch subscribes to the watch's delivery subject, then opens the watch.
func lifeWatch(t *testing.T, nc *nats.Conn, principal, id, ns string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, principal, id))
	if err != nil {
		t.Fatal(err)
	}
	lifeOK(t, nc, principal, wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":%q}`, id, ns))
	return sub
}

// nextWatchMessage is the next message on a watch's delivery subject.
func nextWatchMessage(t *testing.T, sub *nats.Subscription) wire.WatchMessage {
	t.Helper()
	m, err := sub.NextMsg(lifeTimeout)
	if err != nil {
		t.Fatalf("watch %s: %v", sub.Subject, err)
	}
	var u wire.WatchMessage
	if err := json.Unmarshal(m.Data, &u); err != nil {
		t.Fatalf("watch message %s: %v", m.Data, err)
	}
	return u
}

// wantClosedWith reads a watch's messages until its close, which must give reason.
func wantClosedWith(t *testing.T, sub *nats.Subscription, reason wire.CloseReason) {
	t.Helper()
	for {
		u := nextWatchMessage(t, sub)
		if u.Kind != wire.UpdateClosed {
			continue
		}
		if u.Reason != reason {
			t.Fatalf("watch %s closed with %s, want %s", sub.Subject, u.Reason, reason)
		}
		return
	}
}

// lifeWait polls cond until it holds, failing the test after lifeTimeout.
func lifeWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(lifeTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queuedPrincipals is how many principals have a queue of acks and unwatches.
func (s *Server) queuedPrincipals() int {
	s.queues.mu.Lock()
	defer s.queues.mu.Unlock()
	return len(s.queues.waiting)
}

// laneSizes are the heartbeat lanes' waiting workers, waiting principals and keys on each lane.
func (s *Server) laneSizes() (waiting, groups, keys int) {
	l := &s.hbLanes
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.lanes {
		keys += len(ln.keys) + len(ln.turns)
	}
	return len(l.waiting), len(l.groups), keys
}

// warned is how many principals the refused-heartbeat warning remembers.
func (s *Server) warned() int {
	s.hbWarn.mu.Lock()
	defer s.hbWarn.mu.Unlock()
	return len(s.hbWarn.last)
}

// Principals come and go at reloads; each opens watches that end every way a watch ends over NATS
// (unwatch, OVERFLOW, ACK_TIMEOUT, the sweep of a subscriber that vanished, UNAUTHORIZED when the
// principal is removed) and acknowledges through its queue. Afterwards the store holds no watch and
// the server no queue; the admin's watches close with SHUTDOWN at Stop.
func TestWatchesAndQueuesLeaveNoTraceOverNATS(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxPendingUpdates = 1
	b.AckDeadlineMs = 500 // long enough for the OVERFLOW watch's two puts, on a slow disk too
	e := startLife(t, b)
	coord := e.connect(t, "coordinator")
	const cycles = 6
	for i := range cycles {
		p := policy.Principal{ID: fmt.Sprintf("p%d", i)}
		ns := "user/" + p.ID
		if err := e.srv.SetPrincipals([]policy.Principal{lifeAdmin, p}); err != nil {
			t.Fatal(err)
		}
		nc := e.connect(t, p.ID)
		put := func(key string) {
			t.Helper()
			lifeOK(t, nc, p.ID, wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":%q,"schema":"keeppeek.preference.v1","document":{"kind":"display"}}`, ns, key))
		}

		lifeWatch(t, nc, p.ID, "unwatched", ns)
		lifeOK(t, nc, p.ID, wire.OpUnwatch, `{"watch_id":"unwatched"}`)

		acked := lifeWatch(t, nc, p.ID, "acked", ns)
		put("a1")
		u := nextWatchMessage(t, acked)
		lifeOK(t, nc, p.ID, wire.OpAck, fmt.Sprintf(`{"watch_id":"acked","applied_sequence":%d}`, u.WatchSequence))
		put("a2") // not acknowledged: ACK_TIMEOUT
		wantClosedWith(t, acked, wire.CloseAckTimeout)

		overflow := lifeWatch(t, nc, p.ID, "overflow", ns)
		put("o1")
		put("o2")
		wantClosedWith(t, overflow, wire.CloseOverflow)

		gone, err := nats.Connect(e.url, nats.CustomInboxPrefix(wire.InboxPrefix(p.ID)))
		if err != nil {
			t.Fatal(err)
		}
		lifeWatch(t, gone, p.ID, "vanished", ns)
		gone.Close() // without unwatching: the sweep drops it

		revoked := lifeWatch(t, nc, p.ID, "revoked", ns)
		lifeWait(t, "the vanished subscriber's watch is swept", func() bool { return e.st.Stats().Watches == 1 })
		if err := e.srv.SetPrincipals([]policy.Principal{lifeAdmin}); err != nil {
			t.Fatal(err)
		}
		wantClosedWith(t, revoked, wire.CloseUnauthorized)
		if g := gathered(t, e.reg, "state_watches", nil); g == nil || g.GetGauge().GetValue() != 0 {
			t.Fatalf("cycle %d: state_watches is %v after every watch ended", i, g)
		}
	}
	lifeWait(t, "the ack and unwatch queues are gone", func() bool { return e.srv.queuedPrincipals() == 0 })
	shut := lifeWatch(t, coord, "coordinator", "shut", "service/x")
	ctx, cancel := context.WithTimeout(context.Background(), lifeTimeout)
	defer cancel()
	if err := e.srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	wantClosedWith(t, shut, wire.CloseShutdown)
	if n := e.st.Stats().Watches; n != 0 {
		t.Fatalf("%d watches live after Stop", n)
	}
}

// Principals come and go at reloads; each runs a worker that heartbeats and then stops, and heartbeats
// a second worker past max_workers_per_principal, which is refused (and warned about). Afterwards the
// workers' entries have expired, the heartbeat lanes hold nothing, and the warning remembers none of
// the principals that were removed: a server whose principals change at every reload for months would
// otherwise keep one record per principal it ever warned about.
func TestHeartbeatStateGoesAwayWithWorkersAndPrincipals(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxWorkersPerPrincipal = 1
	e := startLife(t, b)
	refused := func() float64 {
		return counterOf(t, e.reg, "state_heartbeats_total", map[string]string{"outcome": "refused"})
	}
	const cycles = 6
	for i := range cycles {
		p := policy.Principal{ID: fmt.Sprintf("p%d", i)}
		if err := e.srv.SetPrincipals([]policy.Principal{lifeAdmin, p}); err != nil {
			t.Fatal(err)
		}
		nc := e.connect(t, p.ID)
		beat := func(worker string) {
			t.Helper()
			body := fmt.Sprintf(`{"worker_id":%q,"service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":100,"status":"ready","leases":[]}`, worker)
			if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, p.ID, worker), []byte(body)); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		beat("w1")
		lifeWait(t, p.ID+"'s first worker is kept", func() bool {
			_, err := e.st.Get(context.Background(), lifeAdmin, wire.GetRequest{Namespace: "system", Key: wire.WorkerKey(p.ID, "w1")})
			return err == nil
		})
		beat("w2") // past max_workers_per_principal 1
		lifeWait(t, p.ID+"'s second worker is refused", func() bool { return refused() == float64(i+1) })
		// The workers stop, and the principal is removed.
		if err := e.srv.SetPrincipals([]policy.Principal{lifeAdmin}); err != nil {
			t.Fatal(err)
		}
	}
	lifeWait(t, "every worker's entry expired", func() bool {
		l, err := e.st.List(context.Background(), lifeAdmin, wire.ListRequest{Namespace: "system", KeyPrefix: "workers/"})
		return err == nil && len(l.Entries) == 0
	})
	if w, g, k := e.srv.laneSizes(); w != 0 || g != 0 || k != 0 {
		t.Fatalf("the heartbeat lanes hold %d workers, %d principals and %d keys, want none", w, g, k)
	}
	if n := e.srv.warned(); n != 0 {
		t.Fatalf("the refused-heartbeat warning remembers %d principals, all of them removed", n)
	}
}
