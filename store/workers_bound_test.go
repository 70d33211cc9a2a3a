package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// workerPut is the worker-status put a heartbeat of principal's worker id makes.
func workerPut(principal, id string) wire.PutRequest {
	doc := json.RawMessage(fmt.Sprintf(`{"worker_id":%q,"service":"svc","principal":%q,"status":"ready","interval_ms":1000,"leases":[],"first_seen_ms":1}`, id, principal))
	return wire.PutRequest{Namespace: "system", Key: wire.WorkerKey(principal, id), Schema: wire.SchemaWorkerStatus, Document: doc, TTLMs: i64(3000)}
}

// A principal holds at most max_workers_per_principal live worker entries: the next new worker is
// refused QUOTA_EXCEEDED with nothing written, while its existing workers are rewritten, other
// principals (even one whose id extends its own) create theirs, and an expired worker frees its place.
func TestWorkersPerPrincipalBound(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	opts.Bounds.MaxWorkersPerPrincipal = 3
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	for i := range 3 {
		if _, err := s.PutSystem(ctx, "alice", workerPut("alice", fmt.Sprintf("w%d", i))); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	before := nsRevision(t, s, "system")
	_, err := s.PutSystem(ctx, "alice", workerPut("alice", "w3"))
	wantCode(t, err, wire.CodeQuotaExceeded)
	var werr *wire.Error
	if !errors.As(err, &werr) || !containsAll(werr.Message, "max_workers_per_principal", "workers/alice/") {
		t.Fatalf("refusal %v does not name the bound and the prefix", err)
	}
	if r := nsRevision(t, s, "system"); r != before {
		t.Fatalf("a refused worker moved system from revision %d to %d", before, r)
	}
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: "system", Key: wire.WorkerKey("alice", "w3")}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the refused worker is there: %v", err)
	}
	// A worker it has changes its status as before.
	changed := workerPut("alice", "w0")
	changed.Document = json.RawMessage(`{"worker_id":"w0","service":"svc","principal":"alice","status":"draining","interval_ms":1000,"leases":[],"first_seen_ms":1}`)
	if _, err := s.PutSystem(ctx, "alice", changed); err != nil {
		t.Fatalf("rewrite of an existing worker: %v", err)
	}
	for _, p := range []string{"bob", "alice2"} {
		if _, err := s.PutSystem(ctx, p, workerPut(p, "w0")); err != nil {
			t.Fatalf("%s's first worker: %v", p, err)
		}
	}
	// Once alice's workers expire, new ones take their places.
	clk.advance(4 * time.Second)
	for i := 3; i < 6; i++ {
		if _, err := s.PutSystem(ctx, "alice", workerPut("alice", fmt.Sprintf("w%d", i))); err != nil {
			t.Fatalf("worker %d after the others expired: %v", i, err)
		}
	}
	_, err = s.PutSystem(ctx, "alice", workerPut("alice", "w6"))
	wantCode(t, err, wire.CodeQuotaExceeded)
}

// New workers of one principal committed together (one batch, or several) never pass the bound: of
// many first heartbeats at once, exactly max_workers_per_principal are admitted, every round.
func TestWorkersPerPrincipalBoundUnderConcurrency(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxWorkersPerPrincipal = 5
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	for round := range 10 {
		p := fmt.Sprintf("p%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted, refused := 0, 0
		for i := range 40 {
			wg.Go(func() {
				_, err := s.PutSystem(ctx, p, workerPut(p, fmt.Sprintf("w%02d", i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					admitted++
				case errors.Is(err, wire.ErrQuotaExceeded):
					refused++
				default:
					t.Errorf("round %d worker %d: %v", round, i, err)
				}
			})
		}
		wg.Wait()
		if admitted != 5 || refused != 35 {
			t.Fatalf("round %d: %d admitted, %d refused; want 5 and 35", round, admitted, refused)
		}
		l, err := s.List(ctx, admin, wire.ListRequest{Namespace: "system", KeyPrefix: wire.WorkersPrefix(p)})
		if err != nil || len(l.Entries) != 5 {
			t.Fatalf("round %d: %d worker entries listed, %v", round, len(l.Entries), err)
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// A store opened with a lower max_workers_per_principal than its workers were admitted under serves
// them all: each keeps its entry and its changes, none is dropped; a new worker of the principal is
// refused until its live workers are fewer than the bound, and the refusal does not understate how
// many it has.
func TestWorkersPerPrincipalBoundLoweredAtOpen(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	opts.Bounds.MaxWorkersPerPrincipal = 5
	s, path := openT(t, opts)
	ctx := ctxT(t)
	for i := range 5 {
		if _, err := s.PutSystem(ctx, "alice", workerPut("alice", fmt.Sprintf("w%d", i))); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Bounds.MaxWorkersPerPrincipal = 2
	s = openAt(t, path, opts)
	l, err := s.List(ctx, admin, wire.ListRequest{Namespace: "system", KeyPrefix: wire.WorkersPrefix("alice")})
	if err != nil || len(l.Entries) != 5 {
		t.Fatalf("after reopening under a lower bound: %d workers listed, %v", len(l.Entries), err)
	}
	for i := range 5 {
		if _, err := s.PutSystem(ctx, "alice", workerPut("alice", fmt.Sprintf("w%d", i))); err != nil {
			t.Fatalf("a change of worker %d, admitted before: %v", i, err)
		}
	}
	_, err = s.PutSystem(ctx, "alice", workerPut("alice", "new"))
	wantCode(t, err, wire.CodeQuotaExceeded)
	if msg := err.Error(); !strings.Contains(msg, "holds 5 live entries") {
		t.Fatalf("the refusal %q understates the 5 workers alice has", msg)
	}
	clk.advance(4 * time.Second) // w0 to w4 were rewritten with 3 s leases just now: all due
	if _, err := s.PutSystem(ctx, "alice", workerPut("alice", "new")); err != nil {
		t.Fatalf("a new worker once the others expired: %v", err)
	}
}

// The count of a principal's workers that the max_workers_per_principal check reads stays equal to
// the live worker entries under its prefix through creations, rewrites with and without a lease,
// keepalives, expiries and a reopen, for principals whose ids extend one another's.
func TestWorkersCountMatchesEntries(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	opts.Bounds.MaxWorkersPerPrincipal = 1000
	s, path := openT(t, opts)
	ctx := ctxT(t)
	check := func(step string) {
		t.Helper()
		for _, p := range []string{"alice", "alice2", "bob"} {
			l, err := s.List(ctx, admin, wire.ListRequest{Namespace: "system", KeyPrefix: wire.WorkersPrefix(p), Limit: 256})
			if err != nil {
				t.Fatal(err)
			}
			s.mu.RLock()
			var have int64
			if sp := s.spaces["system"]; sp != nil {
				have = sp.workers[wire.WorkersPrefix(p)]
			}
			s.mu.RUnlock()
			if have != int64(len(l.Entries)) {
				t.Fatalf("%s: %s's workers counted %d, listed %d", step, p, have, len(l.Entries))
			}
		}
	}
	for i := range 30 {
		p := []string{"alice", "alice2", "bob"}[i%3]
		req := workerPut(p, fmt.Sprintf("w%d", i%7))
		if i%4 == 0 {
			req.TTLMs = nil
		}
		if _, err := s.PutSystem(ctx, p, req); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if i%5 == 0 {
			if _, err := s.TouchSystem(ctx, req.Key); err != nil && !errors.Is(err, wire.ErrInvalidArgument) {
				t.Fatalf("touch %d: %v", i, err)
			}
		}
		check(fmt.Sprintf("after put %d", i))
		if i%9 == 8 {
			clk.advance(4 * time.Second)
			if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
				t.Fatal(r.err)
			}
			check(fmt.Sprintf("after the expiries at %d", i))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, opts)
	check("after reopening")
	clk.advance(4 * time.Second)
	if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	check("after the last expiries")
}
