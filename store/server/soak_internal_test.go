package server

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// soakState is what a server holds that could grow with what it served: goroutines, subscriptions on
// its NATS connection, series of its metrics, its queues, lanes, warnings and open backups, and the
// store's live watches.
type soakState struct {
	goroutines, subs, series, queues, lanes, warned, backups, watches int
	// namespaces the store holds in memory: every namespace ever written keeps its revision (SPEC
	// section 4), so each cycle's user namespace adds one; nothing else may.
	namespaces int
}

func (e *lifeEnv) soakState(t *testing.T) soakState {
	t.Helper()
	w, g, k := e.srv.laneSizes()
	e.srv.backups.mu.Lock()
	backups := len(e.srv.backups.files)
	e.srv.backups.mu.Unlock()
	return soakState{goroutines: runtime.NumGoroutine(), subs: e.srv.nc.NumSubscriptions(), series: stateSeries(t, e.reg),
		queues: e.srv.queuedPrincipals(), lanes: w + g + k, warned: e.srv.warned(), backups: backups, watches: e.st.Stats().Watches,
		namespaces: e.st.Stats().Namespaces}
}

// stateSeries counts the series of the server's own metrics (state_*).
func stateSeries(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "state_") {
			n += len(f.GetMetric())
		}
	}
	return n
}

// A server that serves clients that come and go for months keeps nothing of each once it is gone.
// Every cycle adds a principal at a reload, connects it, and has it do what clients do, succeed and
// fail: puts and deletes of keys never seen before, a lease that expires, requests refused
// (NOT_FOUND, CONFLICT, INVALID_ARGUMENT, PERMISSION_DENIED, WATCH_EXISTS) that name new keys,
// namespaces and watch ids, watches that end by unwatch, OVERFLOW, SNAPSHOT_FAILED and a client
// that vanishes without unwatching, heartbeats of a new worker that then stops, an admin backup opened and closed;
// then the principal is removed and its connection closed. Afterwards goroutines, subscriptions of the
// server's connection, metric series, queues, lanes, warnings, open backups and live watches are back
// where they were after the first cycle.
func TestChurnLeavesTheServerWhereItStarted(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxPendingUpdates = 1
	b.MaxWorkersPerPrincipal = 1
	e := startLife(t, b)
	coord := e.connect(t, "coordinator")
	ctx := context.Background()
	const cycles = 40

	cycle := func(i int) {
		p := policy.Principal{ID: fmt.Sprintf("soak%d", i)}
		ns := "user/" + p.ID
		if err := e.srv.SetPrincipals([]policy.Principal{lifeAdmin, p}); err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(e.url, nats.CustomInboxPrefix(wire.InboxPrefix(p.ID)))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		req := func(op wire.Op, body string) wire.Result { return lifeRequest(t, nc, p.ID, op, body) }
		want := func(op wire.Op, body string, code wire.Code) {
			t.Helper()
			if r := req(op, body); r.OK || r.Error == nil || r.Error.Code != code {
				t.Fatalf("cycle %d: %s %s answered %+v, want %s", i, op, body, r, code)
			}
		}
		put := func(key, extra string) wire.Result {
			return lifeOK(t, nc, p.ID, wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":%q,"schema":"keeppeek.preference.v1","document":{"kind":"display"}%s}`, ns, key, extra))
		}

		// Writes of new keys, and a lease that expires.
		r := put(fmt.Sprintf("k%d", i), "")
		lifeOK(t, nc, p.ID, wire.OpDelete, fmt.Sprintf(`{"namespace":%q,"key":"k%d"}`, ns, i))
		put(fmt.Sprintf("t%d", i), `,"ttl_ms":1000`)
		// Refusals naming new keys, namespaces and watch ids.
		want(wire.OpGet, fmt.Sprintf(`{"namespace":%q,"key":"missing%d"}`, ns, i), wire.CodeNotFound)
		want(wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":"c%d","schema":"keeppeek.preference.v1","document":{"kind":"x"},"expected_revision":%d}`, ns, i, r.Entry.Revision+100), wire.CodeConflict)
		want(wire.OpGet, fmt.Sprintf(`{"namespace":"user/other%d","key":"k"}`, i), wire.CodePermissionDenied)
		want(wire.OpGet, fmt.Sprintf(`{"namespace":"nope/x%d","key":"k"}`, i), wire.CodeInvalidArgument)
		want(wire.OpAck, fmt.Sprintf(`{"watch_id":"never%d","applied_sequence":1}`, i), wire.CodeNotFound)
		want(wire.OpUnwatch, fmt.Sprintf(`{"watch_id":"never%d"}`, i), wire.CodeNotFound)
		want(wire.OpWatch, fmt.Sprintf(`{"watch_id":"w%d","namespace":"service/x%d"}`, i, i), wire.CodePermissionDenied)
		// Watches: unwatched, WATCH_EXISTS, OVERFLOW.
		lifeWatch(t, nc, p.ID, fmt.Sprintf("u%d", i), ns)
		want(wire.OpWatch, fmt.Sprintf(`{"watch_id":"u%d","namespace":%q}`, i, ns), wire.CodeWatchExists)
		lifeOK(t, nc, p.ID, wire.OpUnwatch, fmt.Sprintf(`{"watch_id":"u%d"}`, i))
		over := lifeWatch(t, nc, p.ID, fmt.Sprintf("o%d", i), ns)
		put("o1", "")
		put("o2", "")
		wantClosedWith(t, over, wire.CloseOverflow)
		// A watch request without a reply subject: its snapshot cannot be delivered.
		failed, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, p.ID, fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(wire.StateSubject(wire.DefaultPrefix, p.ID, wire.OpWatch), fmt.Appendf(nil, `{"watch_id":"f%d","namespace":%q}`, i, ns)); err != nil {
			t.Fatal(err)
		}
		wantClosedWith(t, failed, wire.CloseSnapshotFailed)
		// A watch whose client vanishes without unwatching (the sweep drops it).
		lifeWatch(t, nc, p.ID, fmt.Sprintf("v%d", i), ns)
		// A worker that heartbeats, and a second one refused past max_workers_per_principal.
		for _, w := range []string{fmt.Sprintf("wa%d", i), fmt.Sprintf("wb%d", i)} {
			body := fmt.Sprintf(`{"worker_id":%q,"service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":100,"status":"ready","leases":[]}`, w)
			if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, p.ID, w), []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// The worker accepted (whichever of the two came first) is in before the cycle ends: the
		// first cycle's makes the system namespace, which the baseline taken after it must count.
		natstest.Poll(t, lifeTimeout, "the heartbeat's entry", func() (bool, string) {
			l, err := e.st.List(ctx, lifeAdmin, wire.ListRequest{Namespace: "system", KeyPrefix: "workers/" + p.ID + "/"})
			return err == nil && len(l.Entries) == 1, fmt.Sprintf("%d entries (%v)", len(l.Entries), err)
		})
		// An admin backup, opened and closed.
		msg, err := coord.Request(wire.AdminSubject(wire.DefaultPrefix, lifeAdmin.ID, wire.AdminBackup), []byte(`{"step":"open"}`), lifeTimeout)
		if err != nil {
			t.Fatal(err)
		}
		var a wire.AdminResult
		if err := json.Unmarshal(msg.Data, &a); err != nil || !a.OK {
			t.Fatalf("backup open: %s %v", msg.Data, err)
		}
		if _, err := coord.Request(wire.AdminSubject(wire.DefaultPrefix, lifeAdmin.ID, wire.AdminBackup),
			fmt.Appendf(nil, `{"step":"close","backup_id":%q}`, a.BackupID), lifeTimeout); err != nil {
			t.Fatal(err)
		}
		// The admin's reads, watches and refused writes in namespaces never written.
		fresh := fmt.Sprintf("service/fresh%d", i)
		for _, q := range []struct {
			op   wire.Op
			body string
			code wire.Code // "": ok
		}{
			{wire.OpGet, fmt.Sprintf(`{"namespace":%q,"key":"k"}`, fresh), wire.CodeNotFound},
			{wire.OpList, fmt.Sprintf(`{"namespace":%q}`, fresh), ""},
			{wire.OpDelete, fmt.Sprintf(`{"namespace":%q,"key":"k"}`, fresh), wire.CodeNotFound},
			{wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":"k","schema":"keeppeek.lease.v1","document":{"holder":"w","claimed_at_ms":1},"expected_revision":3}`, fresh), wire.CodeConflict},
			{wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":"k","schema":"keeppeek.lease.v1","document":{"holder":"w","claimed_at_ms":1},"guard":{"key":"g","revision":1}}`, fresh), wire.CodeGuardFailed},
			{wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":"k","schema":"keeppeek.lease.v1","document":{"nope":1}}`, fresh), wire.CodeSchemaInvalid},
			{wire.OpWatch, fmt.Sprintf(`{"watch_id":"fresh%d","namespace":%q}`, i, fresh), ""},
			{wire.OpUnwatch, fmt.Sprintf(`{"watch_id":"fresh%d"}`, i), ""},
		} {
			r := lifeRequest(t, coord, lifeAdmin.ID, q.op, q.body)
			if (q.code == "" && !r.OK) || (q.code != "" && (r.OK || r.Error.Code != q.code)) {
				t.Fatalf("cycle %d: %s %s answered %+v, want %q", i, q.op, q.body, r, q.code)
			}
		}
		nc.Close()
		if err := e.srv.SetPrincipals([]policy.Principal{lifeAdmin}); err != nil {
			t.Fatal(err)
		}
	}

	settled := func(what string, base soakState) {
		t.Helper()
		natstest.Poll(t, lifeTimeout, what, func() (bool, string) {
			l, err := e.st.List(ctx, lifeAdmin, wire.ListRequest{Namespace: "system", KeyPrefix: "workers/"})
			if err != nil || len(l.Entries) != 0 {
				return false, fmt.Sprintf("%d worker entries (%v)", len(l.Entries), err)
			}
			s := e.soakState(t)
			if s.watches != 0 || s.queues != 0 || s.lanes != 0 || s.warned != 0 || s.backups != 0 {
				return false, fmt.Sprintf("%+v", s)
			}
			if base.subs >= 0 && (s.subs != base.subs || s.series != base.series || s.goroutines > base.goroutines+2 ||
				s.namespaces != base.namespaces+cycles) {
				return false, fmt.Sprintf("%+v, baseline %+v", s, base)
			}
			return true, ""
		})
	}
	cycle(0) // starts what the server starts once: the heartbeat lanes, pools
	settled("after the first cycle", soakState{subs: -1})
	runtime.GC()
	base := e.soakState(t)

	for i := 1; i <= cycles; i++ {
		cycle(i)
	}
	settled(fmt.Sprintf("after %d cycles", cycles), base)
}

// A heartbeat refused by a bound just before a reload removes its principal warns after the reload:
// its principal had been checked before it, and its warning comes after keep forgot the removed
// principals. The warning must not remember a principal that is gone, or a server whose principals
// change at every reload keeps one record per such principal until another warning goes out.
func TestRefusalWarningAfterTheReloadForgetsTheRemovedPrincipal(t *testing.T) {
	s := startServer(t, Options{Principals: []policy.Principal{lifeAdmin, {ID: "gone"}}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), lifeTimeout)
		defer cancel()
		_ = s.Stop(ctx)
	})
	if err := s.SetPrincipals([]policy.Principal{lifeAdmin}); err != nil {
		t.Fatal(err)
	}
	// The refused heartbeat's warning, as handleHeartbeat gives it once its put was refused.
	s.hbWarn.due("gone", time.Now())
	if n := s.warned(); n != 0 {
		t.Fatalf("the refused-heartbeat warning remembers %d principals after the only one it warned about was removed", n)
	}
}
