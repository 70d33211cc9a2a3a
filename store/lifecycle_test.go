package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// These tests drive many cycles of create-and-go-away through the engine's real paths and check that
// every structure that grows with use (the watch registry's maps, the deadline heap, the namespaces in
// memory) is back to its size at the start: a store that runs for months must not keep a trace of each
// watch, lease or namespace it ever served beyond what SPEC asks it to remember.

// registrySizes are the lengths of the watch registry's maps.
func registrySizes(s *Store) (byID, byNS, perPrincipal int) {
	r := &s.watches
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID), len(r.byNS), len(r.perPrincipal)
}

func wantEmptyRegistry(t *testing.T, s *Store, when string) {
	t.Helper()
	if id, ns, pp := registrySizes(s); id != 0 || ns != 0 || pp != 0 {
		t.Fatalf("%s: the watch registry holds %d watches, %d namespace lists and %d principal counts, want none", when, id, ns, pp)
	}
}

// principalSet is a ReloadPrincipals lookup over a set the test changes between reloads.
type principalSet struct {
	mu sync.Mutex
	m  map[string]policy.Principal
}

func (p *principalSet) lookup(id string) (policy.Principal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q, ok := p.m[id]
	return q, ok
}

func (p *principalSet) set(ps ...policy.Principal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = map[string]policy.Principal{}
	for _, q := range ps {
		p.m[q.ID] = q
	}
}

// Every way a watch ends (unwatch, OVERFLOW, ACK_TIMEOUT, UNAUTHORIZED at a reload that removes its
// principal, SNAPSHOT_FAILED, a transport's drop of a vanished subscriber, RESTORED, SHUTDOWN) removes
// it from every map of the registry, for principals and namespaces that come and go, cycle after cycle.
func TestWatchRegistryReturnsToEmptyAfterEveryKindOfClose(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxPendingUpdates = 1
	opts.Bounds.AckDeadlineMs = 500 // long enough for the OVERFLOW watch's two puts, on a slow disk too
	s, _ := openT(t, opts)
	var ps principalSet
	ps.set(admin)
	s.ReloadPrincipals(ps.lookup)
	const cycles = 10
	for i := range cycles {
		ctx := ctxT(t)
		// A principal and a namespace of this cycle only.
		p := policy.Principal{ID: fmt.Sprintf("p%d", i)}
		ns := "user/" + p.ID
		ps.set(admin, p)
		s.ReloadPrincipals(ps.lookup)
		put := func(key string) {
			t.Helper()
			if _, err := s.Put(ctx, p, wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.preference.v1",
				Document: []byte(`{"kind":"display"}`)}); err != nil {
				t.Fatal(err)
			}
		}
		watchPrefix := func(id, prefix string) (WatchRef, chan Message) {
			t.Helper()
			sink, ch := chanSink(16)
			_, ref, err := s.Register(ctx, p, wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: prefix}, sink)
			if err != nil {
				t.Fatalf("watch %s: %v", id, err)
			}
			return ref, ch
		}
		watch := func(id string) (WatchRef, chan Message) { t.Helper(); return watchPrefix(id, "") }

		_, restored := watch("restored") // CloseWatches closes every watch: first, alone
		s.CloseWatches(wire.CloseRestored, "test")
		wantClosed(t, restored, wire.CloseRestored)

		// Never acknowledges: ACK_TIMEOUT, awaited once the others ended. Its prefix keeps the
		// other cases' updates from it.
		_, late := watchPrefix("late", "late")
		put("late")

		watch("unwatched")
		if err := s.Unwatch(ctx, p, wire.UnwatchRequest{WatchID: "unwatched"}); err != nil {
			t.Fatal(err)
		}

		_, overflow := watch("overflow")
		put("o1")
		put("o2") // a second unacknowledged update: past max_pending_updates
		wantClosed(t, overflow, wire.CloseOverflow)

		ref, failed := watch("snapshot")
		if !s.CloseWatchRef(ref, wire.CloseSnapshotFailed, "test") {
			t.Fatal("CloseWatchRef: not live")
		}
		wantClosed(t, failed, wire.CloseSnapshotFailed)

		ref, _ = watch("vanished")
		if !s.DropWatch(ref) {
			t.Fatal("DropWatch: not live")
		}

		wantClosed(t, late, wire.CloseAckTimeout) // before the reload, which would close it too

		_, revoked := watch("revoked")
		ps.set(admin) // p is removed
		s.ReloadPrincipals(ps.lookup)
		wantClosed(t, revoked, wire.CloseUnauthorized)

		wantEmptyRegistry(t, s, fmt.Sprintf("cycle %d", i))
	}
	var shut []chan Message
	for i := range 8 {
		_, ch := watchT(t, s, admin, fmt.Sprintf("w%d", i), fmt.Sprintf("service/s%d", i%3), "")
		shut = append(shut, ch)
	}
	if id, _, _ := registrySizes(s); id != len(shut) {
		t.Fatalf("%d watches registered, want %d", id, len(shut))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range shut {
		wantClosed(t, ch, wire.CloseShutdown)
	}
	wantEmptyRegistry(t, s, "after Close")
}

// heapSizes are the deadline heap's length and the count of live leased entries.
func heapSizes(s *Store) (deadlines, leased int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.deadlines), s.leased
}

// Leases that come and go every way there is (expired, deleted, replaced by a put with another
// lease, stripped of their lease by a put without one, kept alive by a keepalive) leave the deadline
// heap in proportion to the leases that are live while they run, and empty once none is.
func TestDeadlineHeapReturnsToEmptyAfterLeasesComeAndGo(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	peak := 0 // the most leases live at once so far
	check := func(when string) {
		t.Helper()
		n, leased := heapSizes(s)
		peak = max(peak, leased)
		if n > 2*peak+deadlineSlack+1 {
			t.Fatalf("%s: %d deadlines in the heap, with at most %d leases live at once", when, n, peak)
		}
	}
	worker := func(i int) string { return wire.WorkerKey("alice", fmt.Sprintf("w%d", i)) }
	workerPut := func(i int) wire.PutRequest {
		doc := fmt.Sprintf(`{"worker_id":"w%d","service":"tx","principal":"alice","status":"ready","interval_ms":1000,"leases":[],"first_seen_ms":1}`, i)
		return wire.PutRequest{Namespace: string(wire.KindSystem), Key: worker(i), Schema: wire.SchemaWorkerStatus,
			Document: []byte(doc), TTLMs: i64(MaxTTLMs)}
	}
	const cycles = 600
	for i := range cycles {
		ctx := ctxT(t)
		// Deleted: a day-long lease, deleted at once.
		mustPut(t, s, admin, ttlPut(ns, fmt.Sprintf("deleted/%d", i), MaxTTLMs))
		if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: fmt.Sprintf("deleted/%d", i)}); err != nil {
			t.Fatal(err)
		}
		// Replaced: one key, its day-long lease put again and again.
		mustPut(t, s, admin, ttlPut(ns, "replaced", MaxTTLMs))
		// Stripped: a lease, then a put without one.
		mustPut(t, s, admin, ttlPut(ns, "stripped", MaxTTLMs))
		mustPut(t, s, admin, putLease(ns, "stripped"))
		// Kept alive: a worker status pushed forward by keepalives, as heartbeats do.
		if i%10 == 0 {
			if _, err := s.PutSystem(ctx, "alice", workerPut(i/10)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.TouchSystem(ctx, worker(i/10)); err != nil {
			t.Fatal(err)
		}
		// Expired: a short lease whose deadline passes.
		mustPut(t, s, admin, ttlPut(ns, "expired", MinTTLMs))
		clk.advance(MinTTLMs * time.Millisecond)
		check(fmt.Sprintf("cycle %d", i))
	}
	clk.advance(MaxTTLMs * time.Millisecond)
	ctx := ctxT(t)
	if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	if n, leased := heapSizes(s); n != 0 || leased != 0 {
		t.Fatalf("every lease gone: %d deadlines in the heap, %d leases counted", n, leased)
	}
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: "stripped"}); err != nil {
		t.Fatalf("the entry whose lease was stripped: %v", err)
	}
}

// spacesHoldingAnIndex counts the namespaces in memory that keep an index, and the namespaces in memory.
func spacesHoldingAnIndex(s *Store) (indexed, all int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sp := range s.spaces {
		if sp.tree != nil {
			indexed++
		}
	}
	return indexed, len(s.spaces)
}

// A namespace filled and then emptied is no longer one of max_namespaces (SPEC section 8 counts
// namespaces holding at least one entry) and keeps its revision (section 4), across a restart too;
// what memory keeps of it is that revision, not the index its entries were in: a server that sees
// namespaces come and go for months (a group per meeting, a service per transient worker pool) would
// otherwise hold an empty index, and the index nodes it kept for reuse, for each one it ever served.
func TestEmptiedNamespacesKeepOnlyTheirRevision(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxNamespaces = 4
	s, path := openT(t, opts)
	const rounds, perNS, entries = 10, 4, 24
	revs := map[string]uint64{}
	for r := range rounds {
		ctx := ctxT(t)
		for n := range perNS {
			ns := fmt.Sprintf("group/r%d-n%d", r, n)
			for k := range entries {
				if _, err := s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: fmt.Sprintf("k%03d", k), Schema: "keeppeek.preference.v1",
					Document: []byte(`{"kind":"display"}`)}); err != nil {
					t.Fatalf("round %d, %s: %v", r, ns, err) // QUOTA_EXCEEDED: emptied namespaces still counted
				}
			}
			for k := range entries {
				if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: fmt.Sprintf("k%03d", k)}); err != nil {
					t.Fatal(err)
				}
			}
			revs[ns] = 2 * entries
		}
		if st := s.Stats(); st.LiveNamespaces != 0 {
			t.Fatalf("round %d: %d live namespaces, want 0", r, st.LiveNamespaces)
		}
	}
	if indexed, all := spacesHoldingAnIndex(s); indexed != 0 || all != len(revs) {
		t.Fatalf("%d emptied namespaces in memory, %d of them holding an index; want %d and none", all, indexed, len(revs))
	}
	check := func(s *Store, when string) {
		t.Helper()
		for ns, rev := range revs {
			if got := nsRevision(t, s, ns); got != rev {
				t.Fatalf("%s: %s is at revision %d, want %d", when, ns, got, rev)
			}
		}
	}
	check(s, "emptied")
	// Written again, an emptied namespace goes on from its revision.
	e := mustPut(t, s, admin, wire.PutRequest{Namespace: "group/r0-n0", Key: "again", Schema: "keeppeek.preference.v1",
		Document: []byte(`{"kind":"display"}`)})
	if e.Revision != 2*entries+1 {
		t.Fatalf("a put in an emptied namespace committed at revision %d, want %d", e.Revision, 2*entries+1)
	}
	if _, err := s.Delete(ctxT(t), admin, wire.DeleteRequest{Namespace: "group/r0-n0", Key: "again"}); err != nil {
		t.Fatal(err)
	}
	revs["group/r0-n0"] += 2
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, path, opts)
	check(s2, "after a restart")
	if indexed, _ := spacesHoldingAnIndex(s2); indexed != 0 {
		t.Fatalf("after a restart, %d emptied namespaces hold an index", indexed)
	}
}

// dbPages is the database's high-water mark in pages: what the file holds, used or free.
func dbPages(t *testing.T, s *Store) int64 {
	t.Helper()
	b := s.be.(*boltBackend)
	var n int64
	if err := b.db.View(func(tx *bolt.Tx) error { n = tx.Size() / int64(b.db.Info().PageSize); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Keys filled and drained again and again, by writers sharing commits, leave the database's pages
// (entries, counters, freed pages reused) and its audit log (pruned behind its checkpoint) where they
// were after the first rounds: the file of a server that runs for months stays in proportion to what
// it holds and to the audit records it keeps, not to the writes it ever committed.
func TestChurnKeepsTheDatabaseAndItsAuditLogBounded(t *testing.T) {
	opts := DefaultOptions()
	opts.AuditRetention = 512
	s, _ := openT(t, opts)
	const writers, keys, puts = 16, 8, 6
	round := func(r int) {
		t.Helper()
		ctx := ctxT(t)
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for g := range writers {
			wg.Go(func() {
				ns := fmt.Sprintf("service/g%d", g)
				for k := range keys {
					key := fmt.Sprintf("r%d/k%d", r, k) // a new key each round: entries come and go
					for range puts {
						if _, err := s.Put(ctx, admin, putLease(ns, key)); err != nil {
							errs <- err
							return
						}
					}
					if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	const warm, rounds = 4, 40
	for r := range warm {
		round(r)
	}
	start := dbPages(t, s)
	for r := warm; r < rounds; r++ {
		round(r)
	}
	// The page count creeps by a few as the free pages fragment; a log never pruned, or pages
	// never reused, would take hundreds more (each round commits some 900 records).
	if end := dbPages(t, s); end > start+start/4 {
		t.Fatalf("the database grew from %d to %d pages over %d rounds of the same churn", start, end, rounds-warm)
	}
	rep, err := s.VerifyAudit()
	if err != nil || !rep.OK() {
		t.Fatalf("audit: %+v %v", rep, err)
	}
	if total := uint64(rounds * writers * keys * (puts + 1)); rep.HeadSeq != total || rep.Records > uint64(opts.AuditRetention+auditPruneSlack+64) {
		t.Fatalf("audit after %d mutations: %d records kept (head %d, checkpoint %d), want at most retention %d + %d",
			total, rep.Records, rep.HeadSeq, rep.CheckpointSeq, opts.AuditRetention, auditPruneSlack)
	}
	if st := s.Stats(); st.LiveNamespaces != 0 || st.TotalBytes != 0 {
		t.Fatalf("after the churn: %+v", st)
	}
}

// Callers that give up mid-way (their context ends while their write waits in the queue, or while a
// watch waits for its namespace's due leases) leave nothing behind: the queue drains, a write whose
// caller gave up either committed or did not (never half), and every watch registered is one a
// caller was told of.
func TestCallersThatGiveUpLeaveNothingQueued(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	const callers = 64
	registered := 0
	for round := range 8 {
		// A lease due in ns makes every watch of it wait on a commit (a barrier) first.
		mustPut(t, s, admin, ttlPut(ns, fmt.Sprintf("lease/%d", round), MinTTLMs))
		clk.advance(MinTTLMs * time.Millisecond)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for c := range callers {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				if c%2 == 0 {
					go cancel() // gives up while the call runs
				} else {
					defer cancel()
				}
				if c%4 == 1 {
					id := fmt.Sprintf("r%d-c%d", round, c)
					sink, _ := chanSink(64)
					req := wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: "quiet/"} // no update reaches it
					if _, err := s.Watch(ctx, admin, req, sink); err == nil {
						mu.Lock()
						registered++
						mu.Unlock()
					}
					return
				}
				_, _ = s.Put(ctx, admin, putLease(ns, fmt.Sprintf("r%d/c%d", round, c)))
			})
		}
		wg.Wait()
	}
	if r := s.submit(ctxT(t), &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	s.qmu.Lock()
	queued := len(s.pending)
	s.qmu.Unlock()
	if queued != 0 {
		t.Fatalf("%d mutations still queued once every caller returned and a commit ran", queued)
	}
	if id, _, _ := registrySizes(s); id != registered {
		t.Fatalf("%d watches registered, %d callers told so", id, registered)
	}
	// Every put either committed whole or not at all: the namespace's revision counts the entries,
	// the expiries and nothing else.
	var entries int
	for _, n := range s.Stats().PerNamespace {
		if n.Namespace == ns {
			entries = n.Entries
		}
	}
	const leases = 8
	if rev, want := nsRevision(t, s, ns), uint64(entries)+2*leases; rev != want {
		t.Fatalf("namespace at revision %d with %d entries after %d leases came and went, want %d", rev, entries, leases, want)
	}
}

// A burst of leases that are then deleted leaves the deadline heap holding their stale deadlines,
// and its array the burst's capacity, until they would have come due (a day, for day-long leases).
// TrimMemory, which a server calls when it goes idle, gives both back.
func TestTrimMemoryGivesBackTheDeadlineHeap(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	const ns, burst = "service/tx", 2000
	for i := range burst {
		mustPut(t, s, admin, ttlPut(ns, fmt.Sprintf("k/%d", i), MaxTTLMs))
	}
	for i := range burst {
		if _, err := s.Delete(ctxT(t), admin, wire.DeleteRequest{Namespace: ns, Key: fmt.Sprintf("k/%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, s, admin, ttlPut(ns, "kept", MaxTTLMs))
	s.TrimMemory()
	s.mu.RLock()
	n, c, leased := len(s.deadlines), cap(s.deadlines), s.leased
	s.mu.RUnlock()
	if leased != 1 || n != 1 || c > 2*n+deadlineSlack {
		t.Fatalf("after TrimMemory: %d deadlines in a heap of capacity %d, for %d lease(s)", n, c, leased)
	}
	if e, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: "kept"}); err != nil || e.ExpiresAtMs == 0 {
		t.Fatalf("the lease kept: %+v, %v", e, err)
	}
}

// A deadline popped from the heap leaves no copy in the array under it: the slot would keep its
// namespace and key strings reachable for as long as the array lives.
func TestPoppedDeadlineLeavesNoCopy(t *testing.T) {
	var h deadlineHeap
	for i := range 8 {
		h.push(deadline{atMs: int64(i), ns: "service/tx", key: fmt.Sprintf("k/%d", i), revision: uint64(i + 1)})
	}
	for range 5 {
		h.pop()
	}
	for i, d := range h[len(h):cap(h)] {
		if d != (deadline{}) {
			t.Fatalf("slot %d past the heap's length still holds %+v", len(h)+i, d)
		}
	}
}
