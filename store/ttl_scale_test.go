package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// stepClock is a store clock that is frozen at a given instant until released, then runs with real
// time shifted by an offset: every entry put while it is frozen gets the same deadline, and once it
// runs the committer's timer (real elapsed time) meets the deadlines as it would in production.
type stepClock struct {
	frozen atomic.Int64 // unix ns; 0: running
	offset atomic.Int64 // ns added to time.Now while running
}

func (c *stepClock) now() time.Time {
	if f := c.frozen.Load(); f != 0 {
		return time.Unix(0, f)
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

func (c *stepClock) freeze(at time.Time) { c.frozen.Store(at.UnixNano()) }

// runFrom releases the clock so that it reads at now and runs on from there, and returns the real
// instant at which it reads atMs.
func (c *stepClock) runFrom(at time.Time, atMs int64) time.Time {
	real := time.Now()
	c.offset.Store(int64(at.Sub(real)))
	c.frozen.Store(0)
	return real.Add(time.UnixMilli(atMs).Sub(at))
}

// putAll puts reqs with workers concurrent writers (their commits are shared) and returns the stored
// entries in the order of reqs.
func putAll(t *testing.T, s *Store, p policy.Principal, reqs []wire.PutRequest, workers int) []wire.Entry {
	t.Helper()
	out := make([]wire.Entry, len(reqs))
	errs := make(chan error, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				e, err := s.Put(ctx, p, reqs[i])
				if err != nil {
					errs <- fmt.Errorf("put %s:%s: %w", reqs[i].Namespace, reqs[i].Key, err)
					return
				}
				out[i] = e
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

// stamped is a watch message and the store clock's reading when the sink got it.
type stamped struct {
	Message
	clockMs int64
	at      time.Time
}

func stampedSink(s *Store, n int) (Sink, chan stamped) {
	ch := make(chan stamped, n)
	return func(m Message) { ch <- stamped{Message: m, clockMs: s.nowMs(), at: time.Now()} }, ch
}

// TestMassExpiryOneDeadline: 4,000 leases across 200 namespaces share one deadline (all put while
// the clock stands still). Every one expires, as exactly one EXPIRE to each of the two watches of its
// namespace, in revision order, with sequences from 1, never before the deadline; the entries
// without a lease stay, the counters drop the leases' bytes, and the audit chain holds one record per
// expiry. How late the first and last EXPIRE come after the deadline is logged, not asserted.
func TestMassExpiryOneDeadline(t *testing.T) {
	const namespaces, perNS = 200, 20
	opts := DefaultOptions()
	clk := &stepClock{}
	opts.Clock = clk.now
	t0 := time.Now()
	clk.freeze(t0)
	s, _ := openT(t, opts)
	const ttl = 5000
	deadline := t0.UnixMilli() + ttl
	var reqs []wire.PutRequest
	nsName := func(i int) string { return fmt.Sprintf("service/n%03d", i) }
	for i := range namespaces {
		for k := range perNS {
			reqs = append(reqs, ttlPut(nsName(i), fmt.Sprintf("leases/k%02d", k), ttl))
		}
	}
	for i := range namespaces {
		reqs = append(reqs, putLease(nsName(i), "keep")) // no lease: put last, revision perNS+1
	}
	for _, e := range putAll(t, s, admin, reqs, 32) {
		if e.TTLMs != 0 && e.ExpiresAtMs != deadline {
			t.Fatalf("%s:%s expires at %d, want the shared deadline %d", e.Namespace, e.Key, e.ExpiresAtMs, deadline)
		}
	}
	before := s.Stats()
	audit0, err := s.VerifyAudit()
	if err != nil || !audit0.OK() {
		t.Fatalf("audit before: %v %v", audit0, err)
	}
	admin2 := policy.Principal{ID: "coordinator-b", Admin: true}
	type watched struct {
		ns, id string
		ch     chan stamped
	}
	var ws []watched
	for i := range namespaces {
		for _, w := range []struct {
			p      policy.Principal
			prefix string
		}{{admin, ""}, {admin2, "leases/"}} {
			sink, ch := stampedSink(s, perNS+8)
			st, err := s.Watch(ctxT(t), w.p, wire.WatchRequest{WatchID: fmt.Sprintf("w%03d", i), Namespace: nsName(i), KeyPrefix: w.prefix}, sink)
			if err != nil {
				t.Fatalf("Watch %s: %v", nsName(i), err)
			}
			want := perNS + 1
			if w.prefix != "" {
				want = perNS
			}
			if st.SnapshotRevision != perNS+1 || len(st.Entries) != want {
				t.Fatalf("snapshot of %s (%q): revision %d, %d entries", nsName(i), w.prefix, st.SnapshotRevision, len(st.Entries))
			}
			ws = append(ws, watched{ns: nsName(i), id: w.p.ID, ch: ch})
		}
	}
	// The clock runs again, 300 ms before the deadline; the committer looks at it again now.
	realDeadline := clk.runFrom(time.UnixMilli(deadline).Add(-300*time.Millisecond), deadline)
	s.poke()
	var first, last time.Time
	timeout := time.After(testTimeout)
	for _, w := range ws {
		seen := map[string]bool{}
		for q := uint64(1); q <= perNS; q++ {
			var m stamped
			select {
			case m = <-w.ch:
			case <-timeout:
				t.Fatalf("%s (%s): %d of %d EXPIREs within %v", w.ns, w.id, q-1, perNS, testTimeout)
			}
			if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Sequence != q || m.Event.Revision != perNS+1+q {
				t.Fatalf("%s (%s): update %d is %+v (event %+v), want EXPIRE at revision %d", w.ns, w.id, q, m.Message, m.Event, perNS+1+q)
			}
			if seen[m.Event.Key] || m.Event.Key == "keep" {
				t.Fatalf("%s (%s): EXPIRE of %s (again or without a lease)", w.ns, w.id, m.Event.Key)
			}
			seen[m.Event.Key] = true
			if m.clockMs < deadline {
				t.Fatalf("%s (%s): EXPIRE of %s at clock %d, before the deadline %d", w.ns, w.id, m.Event.Key, m.clockMs, deadline)
			}
			if first.IsZero() || m.at.Before(first) {
				first = m.at
			}
			if m.at.After(last) {
				last = m.at
			}
		}
	}
	// Nothing more: a barrier commits what could still be due, and no watch gets another update.
	if r := s.submit(ctxT(t), &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	for _, w := range ws {
		select {
		case m := <-w.ch:
			t.Fatalf("%s (%s): a further update %+v", w.ns, w.id, m.Message)
		default:
		}
	}
	t.Logf("%d leases, %d watches: first EXPIRE %v after the deadline, last %v", namespaces*perNS, len(ws),
		first.Sub(realDeadline).Round(time.Millisecond), last.Sub(realDeadline).Round(time.Millisecond))
	after := s.Stats()
	leaseBytes := before.TotalBytes - after.TotalBytes
	if after.LiveNamespaces != namespaces || leaseBytes != int64(namespaces*perNS*len(leaseDoc("w1"))) {
		t.Fatalf("counters after the expiry %+v (before %+v)", after, before)
	}
	for _, n := range after.PerNamespace {
		if n.Revision != 2*perNS+1 || n.Entries != 1 {
			t.Fatalf("after the expiry: %+v", n)
		}
	}
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: nsName(7), Key: "leases/k03"}); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("an expired lease: %v", err)
	}
	audit1, err := s.VerifyAudit()
	if err != nil || !audit1.OK() || audit1.HeadSeq != audit0.HeadSeq+namespaces*perNS {
		t.Fatalf("audit after the expiry %v %v (before %v)", audit1, err, audit0)
	}
}

// TestRenewalRacesItsOwnExpiry: a lease renewed right around its deadline, by a blind put with a new
// TTL and by a put that names the lease's revision, while the committer's timer expires it. Each has
// exactly one outcome, and writer, watcher and a later Get agree on it: either the renewal committed
// first (at a time before the deadline, same created_at_ms, no EXPIRE) or the expiry did (an EXPIRE
// first; the blind put then creates the key anew at or after the deadline, the conditional one fails
// CONFLICT with current_revision 0 and the key stays gone).
func TestRenewalRacesItsOwnExpiry(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	const ns = "service/race"
	const leases = 48
	// A watch per group of 8 leases: at most 3 updates each (PUT, then EXPIRE and PUT or a PUT),
	// within max_pending_updates without an ack.
	const group = 8
	keyOf := func(i int) string { return fmt.Sprintf("leases/g%d/l%02d", i/group, i) }
	var chans []chan stamped
	for g := range leases / group {
		sink, ch := stampedSink(s, 3*group)
		if _, err := s.Watch(ctxT(t), admin, wire.WatchRequest{WatchID: fmt.Sprintf("w%d", g), Namespace: ns, KeyPrefix: fmt.Sprintf("leases/g%d/", g)}, sink); err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	type result struct {
		orig, renewed wire.Entry
		err           error
	}
	results := make([]result, leases)
	var wg sync.WaitGroup
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t)
			key := keyOf(i)
			orig, err := s.Put(ctx, admin, ttlPut(ns, key, MinTTLMs))
			if err != nil {
				results[i].err = err
				return
			}
			results[i].orig = orig
			// Aim the renewal at the deadline, give or take a few milliseconds.
			time.Sleep(time.Until(time.UnixMilli(orig.ExpiresAtMs).Add(time.Duration(i%7-3) * time.Millisecond)))
			req := ttlPut(ns, key, 60_000)
			if i%2 == 1 {
				req.ExpectedRevision = i64(int64(orig.Revision))
			}
			results[i].renewed, results[i].err = s.Put(ctx, admin, req)
		}()
	}
	wg.Wait()
	if r := s.submit(ctxT(t), &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	events := map[string][]*Event{}
	for g, ch := range chans {
		var lastRev uint64
		for q := 1; len(ch) > 0; q++ {
			m := <-ch
			if m.Event == nil || m.Sequence != uint64(q) || m.Event.Revision <= lastRev {
				t.Fatalf("watch %d, update %d: %+v (closed, or sequence or revision out of order)", g, q, m.Message)
			}
			lastRev = m.Event.Revision
			events[m.Event.Key] = append(events[m.Event.Key], m.Event)
		}
	}
	var renewedFirst, expiredFirst int
	for i, r := range results {
		key := keyOf(i)
		evs := events[key]
		if len(evs) == 0 || evs[0].Kind != wire.UpdatePut || evs[0].Revision != r.orig.Revision {
			t.Fatalf("%s: first update %+v, want the PUT at %d", key, evs, r.orig.Revision)
		}
		evs = evs[1:]
		got, gerr := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: key})
		expired := len(evs) > 0 && evs[0].Kind == wire.UpdateExpire
		conditional := i%2 == 1
		switch {
		case r.err == nil && !expired:
			renewedFirst++
			if len(evs) != 1 || evs[0].Kind != wire.UpdatePut || evs[0].Revision != r.renewed.Revision ||
				r.renewed.CreatedAtMs != r.orig.CreatedAtMs ||
				r.renewed.UpdatedAtMs >= r.orig.ExpiresAtMs {
				t.Fatalf("%s renewed (%+v, was %+v) but the watch saw %+v", key, r.renewed, r.orig, evs)
			}
		case r.err == nil && expired && !conditional:
			expiredFirst++
			if len(evs) != 2 || evs[1].Kind != wire.UpdatePut || evs[1].Revision != r.renewed.Revision ||
				r.renewed.CreatedAtMs != r.renewed.UpdatedAtMs || r.renewed.UpdatedAtMs < r.orig.ExpiresAtMs {
				t.Fatalf("%s expired, then put (%+v, was %+v) but the watch saw %+v", key, r.renewed, r.orig, evs)
			}
		case r.err != nil && expired && conditional:
			expiredFirst++
			if wire.CodeOf(r.err) != wire.CodeConflict || len(evs) != 1 {
				t.Fatalf("%s expired, the conditional renewal answered %v, the watch saw %+v", key, r.err, evs)
			}
			var we *wire.Error
			if !errors.As(r.err, &we) || we.CurrentRevision == nil || *we.CurrentRevision != 0 {
				t.Fatalf("%s: CONFLICT without current_revision 0: %+v", key, r.err)
			}
			if wire.CodeOf(gerr) != wire.CodeNotFound {
				t.Fatalf("%s: after a failed renewal of an expired lease, Get answers %+v %v", key, got, gerr)
			}
			continue
		default:
			t.Fatalf("%s: renewal answered %+v %v, the watch saw %+v", key, r.renewed, r.err, evs)
		}
		if gerr != nil || got.Revision != r.renewed.Revision || got.ExpiresAtMs != r.renewed.ExpiresAtMs {
			t.Fatalf("%s: Get %+v %v, the renewal answered %+v", key, got, gerr, r.renewed)
		}
	}
	t.Logf("%d renewals won over their expiry, %d lost", renewedFirst, expiredFirst)
}

// TestExpiryUnderSaturatedCommitter: while writers keep the committer busy (every commit led by a
// writer, in the namespaces whose leases come due), every lease still expires, and the revision order
// is the order in which things became true: a put committed at or after a lease's deadline comes
// after its EXPIRE, one committed before the deadline comes before it. Every revision of every
// namespace is one lease put, one writer's put or one expiry.
func TestExpiryUnderSaturatedCommitter(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	const namespaces, perNS, writers = 16, 10, 8
	nsName := func(i int) string { return fmt.Sprintf("service/s%02d", i) }
	chans := make([]chan stamped, namespaces)
	for i := range namespaces {
		sink, ch := stampedSink(s, perNS+4)
		if _, err := s.Watch(ctxT(t), admin, wire.WatchRequest{WatchID: fmt.Sprintf("w%02d", i), Namespace: nsName(i), KeyPrefix: "leases/"}, sink); err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	var reqs []wire.PutRequest
	for i := range namespaces {
		for k := range perNS {
			reqs = append(reqs, ttlPut(nsName(i), fmt.Sprintf("leases/l%02d", k), MinTTLMs))
		}
	}
	leases := putAll(t, s, admin, reqs, 16)
	for _, ch := range chans {
		for range perNS {
			if m := recvStamped(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut {
				t.Fatalf("the lease's PUT: %+v", m.Message)
			}
		}
	}
	// Writers run until every lease has expired.
	quit := make(chan struct{})
	var wg sync.WaitGroup
	written := make([][]wire.Entry, writers)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxT(t)
			for n := 0; ; n++ {
				select {
				case <-quit:
					return
				default:
				}
				e, err := s.Put(ctx, admin, putLease(nsName((g+n)%namespaces), fmt.Sprintf("w/g%d", g)))
				if err != nil {
					t.Errorf("writer %d: %v", g, err)
					return
				}
				written[g] = append(written[g], e)
			}
		}()
	}
	expiries := map[string]map[string]uint64{} // namespace -> key -> EXPIRE revision
	var latest time.Duration
	timeout := time.After(testTimeout)
	for i, ch := range chans {
		expiries[nsName(i)] = map[string]uint64{}
		for range perNS {
			var m stamped
			select {
			case m = <-ch:
			case <-timeout:
				close(quit)
				wg.Wait()
				t.Fatalf("%s: %d of %d leases expired within %v while writers ran", nsName(i), len(expiries[nsName(i)]), perNS, testTimeout)
			}
			if m.Event == nil || m.Event.Kind != wire.UpdateExpire {
				close(quit)
				wg.Wait()
				t.Fatalf("%s: %+v, want an EXPIRE", nsName(i), m.Message)
			}
			expiries[nsName(i)][m.Event.Key] = m.Event.Revision
			var dl int64
			for _, l := range leases {
				if l.Namespace == nsName(i) && l.Key == m.Event.Key {
					dl = l.ExpiresAtMs
				}
			}
			if m.clockMs < dl {
				t.Errorf("%s: EXPIRE of %s at %d, before its deadline %d", nsName(i), m.Event.Key, m.clockMs, dl)
			}
			latest = max(latest, m.at.Sub(time.UnixMilli(dl)))
		}
	}
	close(quit)
	wg.Wait()
	var writes int
	for _, ws := range written {
		writes += len(ws)
		for _, w := range ws {
			for _, l := range leases {
				if l.Namespace != w.Namespace {
					continue
				}
				x := expiries[w.Namespace][l.Key]
				if w.UpdatedAtMs >= l.ExpiresAtMs && x > w.Revision {
					t.Errorf("%s: put of %s at revision %d (time %d) committed over %s, due at %d and expired only at revision %d",
						w.Namespace, w.Key, w.Revision, w.UpdatedAtMs, l.Key, l.ExpiresAtMs, x)
				}
				if w.UpdatedAtMs < l.ExpiresAtMs && x < w.Revision {
					t.Errorf("%s: %s, due at %d, expired at revision %d, before a put at revision %d made at %d",
						w.Namespace, l.Key, l.ExpiresAtMs, x, w.Revision, w.UpdatedAtMs)
				}
			}
		}
	}
	// Every revision is accounted for exactly once.
	revs := map[string]map[uint64]string{}
	note := func(ns string, rev uint64, what string) {
		if revs[ns] == nil {
			revs[ns] = map[uint64]string{}
		}
		if prev, dup := revs[ns][rev]; dup {
			t.Errorf("%s: revision %d is both %s and %s", ns, rev, prev, what)
		}
		revs[ns][rev] = what
	}
	for _, l := range leases {
		note(l.Namespace, l.Revision, "put "+l.Key)
	}
	for _, ws := range written {
		for _, w := range ws {
			note(w.Namespace, w.Revision, "put "+w.Key)
		}
	}
	for ns, m := range expiries {
		for k, r := range m {
			note(ns, r, "expire "+k)
		}
	}
	for i := range namespaces {
		if r := nsRevision(t, s, nsName(i)); r != uint64(len(revs[nsName(i)])) {
			t.Errorf("%s: revision %d, %d changes seen", nsName(i), r, len(revs[nsName(i)]))
		}
	}
	t.Logf("%d writes during the expiry of %d leases; the latest EXPIRE came %v after its deadline", writes, namespaces*perNS, latest.Round(time.Millisecond))
	if writes == 0 {
		t.Fatal("no write ran while the leases expired")
	}
}

// recvStamped returns the next message on ch, failing the test after testTimeout.
func recvStamped(t *testing.T, ch chan stamped) stamped {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(testTimeout):
		t.Fatalf("no watch message within %v", testTimeout)
		return stamped{}
	}
}

// TestDueEntryHiddenBeforeItsExpiryCommits: once its deadline has passed, a lease is never shown,
// even while the committer is held up and has not expired it yet: Get answers NOT_FOUND, List leaves
// it out of every page (and keeps the revision it has), a watch snapshot waits for the expiry rather
// than show it, and a write that names it as a guard or an expected revision sees it gone.
func TestDueEntryHiddenBeforeItsExpiryCommits(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	var reqs []wire.PutRequest
	for k := range 300 {
		reqs = append(reqs, ttlPut(ns, fmt.Sprintf("leases/l%03d", k), 60_000))
	}
	leases := putAll(t, s, admin, reqs, 16)
	keep := mustPut(t, s, admin, putLease(ns, "leases/keep"))
	var latest int64
	for _, l := range leases {
		latest = max(latest, l.ExpiresAtMs)
	}
	// Hold every commit: the committer and any writer wait.
	s.commitMu.Lock()
	locked := true
	defer func() {
		if locked {
			s.commitMu.Unlock()
		}
	}()
	clk.advance(time.Duration(latest-s.nowMs()) * time.Millisecond)
	for s.nowMs() < latest {
		clk.advance(time.Millisecond)
	}
	ctx := ctxT(t)
	for _, l := range leases {
		if e, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: l.Key}); wire.CodeOf(err) != wire.CodeNotFound {
			t.Fatalf("Get of %s past its deadline: %+v %v", l.Key, e, err)
		}
	}
	var listed []string
	after := ""
	for {
		r, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, KeyPrefix: "leases/", AfterKey: after, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		if r.Revision != keep.Revision {
			t.Fatalf("List revision %d while no expiry committed, want %d", r.Revision, keep.Revision)
		}
		for _, e := range r.Entries {
			listed = append(listed, e.Key)
		}
		if r.NextAfterKey == "" {
			break
		}
		after = r.NextAfterKey
	}
	if len(listed) != 1 || listed[0] != "leases/keep" {
		t.Fatalf("List past the deadlines shows %v", listed)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	ws, err := s.Watch(short, admin, wire.WatchRequest{WatchID: "early", Namespace: ns, KeyPrefix: "leases/"}, func(Message) {})
	cancel()
	if err == nil {
		t.Fatalf("a watch took its snapshot before the due expiries committed: %d entries at revision %d", len(ws.Entries), ws.SnapshotRevision)
	}
	// A guarded write and a conditional one, queued behind the held commit.
	guarded := make(chan error, 1)
	go func() {
		req := putLease(ns, "intents/x")
		req.Guard = &wire.Guard{Key: leases[0].Key, Revision: int64(leases[0].Revision)}
		_, err := s.Put(ctx, admin, req)
		guarded <- err
	}()
	conditional := make(chan error, 1)
	go func() {
		req := ttlPut(ns, leases[1].Key, 60_000)
		req.ExpectedRevision = i64(int64(leases[1].Revision))
		_, err := s.Put(ctx, admin, req)
		conditional <- err
	}()
	s.commitMu.Unlock()
	locked = false
	for name, ch := range map[string]chan error{"guarded": guarded, "conditional": conditional} {
		select {
		case err := <-ch:
			want := wire.CodeGuardFailed
			if name == "conditional" {
				want = wire.CodeConflict
			}
			if wire.CodeOf(err) != want {
				t.Fatalf("the %s write over an expired lease: %v, want %s", name, err, want)
			}
			var we *wire.Error
			if !errors.As(err, &we) || we.CurrentRevision == nil || *we.CurrentRevision != 0 {
				t.Fatalf("the %s write: %v, want current_revision 0", name, err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("the %s write never answered", name)
		}
	}
	ws, _ = watchT(t, s, admin, "late", ns, "leases/")
	if want := keep.Revision + uint64(len(leases)); ws.SnapshotRevision != want || len(ws.Entries) != 1 {
		t.Fatalf("snapshot after the expiries: %d entries at revision %d, want 1 at %d", len(ws.Entries), ws.SnapshotRevision, want)
	}
}

// TestClampedLeaseAndRestartPurgeAtScale: a TTL above 24 h is stored clamped, and the clamped
// deadline holds across restarts: a millisecond before it the lease is still served, at it the
// restart purge removes it. 4,000 leases across 100 namespaces, half of them overdue at a restart,
// are purged before the store serves (SPEC section 6: each deleted, its bytes off the counters, one
// revision each, one audit record each), the other half served and then expired by the committer with
// one EXPIRE each.
func TestClampedLeaseAndRestartPurgeAtScale(t *testing.T) {
	const namespaces, perNS = 100, 40
	opts := DefaultOptions()
	clk := &stepClock{}
	opts.Clock = clk.now
	t0 := time.Now()
	clk.freeze(t0)
	s, path := openT(t, opts)
	nsName := func(i int) string { return fmt.Sprintf("service/g%03d", i) }
	var reqs []wire.PutRequest
	for i := range namespaces {
		for k := range perNS {
			ttl := int64(10_000) // overdue at the restart
			if k%2 == 1 {
				ttl = 3_600_000 // served after it
			}
			reqs = append(reqs, ttlPut(nsName(i), fmt.Sprintf("leases/l%02d", k), ttl))
		}
	}
	putAll(t, s, admin, reqs, 32)
	clamped := mustPut(t, s, admin, ttlPut("service/day", "lease", MaxTTLMs+1))
	if clamped.TTLMs != MaxTTLMs || clamped.ExpiresAtMs != t0.UnixMilli()+MaxTTLMs {
		t.Fatalf("a TTL over 24 h stored as %d, deadline %d", clamped.TTLMs, clamped.ExpiresAtMs)
	}
	before := s.Stats()
	audit0, err := s.VerifyAudit()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	clk.freeze(t0.Add(20 * time.Second))
	s2 := openAt(t, path, opts)
	after := s2.Stats()
	docLen := int64(len(leaseDoc("w1")))
	if after.TotalBytes != before.TotalBytes-namespaces*perNS/2*docLen || after.LiveNamespaces != before.LiveNamespaces {
		t.Fatalf("counters after the purge %+v, before %+v", after, before)
	}
	for _, n := range after.PerNamespace {
		if n.Namespace == "service/day" {
			if n.Revision != 1 || n.Entries != 1 {
				t.Fatalf("the 24 h lease's namespace after the purge: %+v", n)
			}
			continue
		}
		if n.Revision != perNS+perNS/2 || n.Entries != perNS/2 {
			t.Fatalf("after the purge: %+v, want revision %d with %d entries", n, perNS+perNS/2, perNS/2)
		}
	}
	audit1, err := s2.VerifyAudit()
	if err != nil || !audit1.OK() || audit1.HeadSeq != audit0.HeadSeq+namespaces*perNS/2 {
		t.Fatalf("audit after the purge %v %v (before %v)", audit1, err, audit0)
	}
	ctx := ctxT(t)
	r, err := s2.List(ctx, admin, wire.ListRequest{Namespace: nsName(42), Limit: wire.MaxListLimit})
	if err != nil || len(r.Entries) != perNS/2 {
		t.Fatalf("List after the purge: %d entries, %v", len(r.Entries), err)
	}
	for _, e := range r.Entries {
		if e.TTLMs != 3_600_000 {
			t.Fatalf("an overdue lease survived the purge: %+v", e)
		}
	}
	// The rest come due while the store runs: one EXPIRE each, in revision order.
	sink, ch := stampedSink(s2, perNS)
	ws, err := s2.Watch(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: nsName(42)}, sink)
	if err != nil || ws.SnapshotRevision != perNS+perNS/2 {
		t.Fatalf("watch after the purge: %+v %v", ws, err)
	}
	clk.freeze(t0.Add(time.Hour))
	s2.poke()
	for q := uint64(1); q <= perNS/2; q++ {
		var m stamped
		select {
		case m = <-ch:
		case <-time.After(testTimeout):
			t.Fatalf("%d of %d EXPIREs", q-1, perNS/2)
		}
		if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Sequence != q || m.Event.Revision != perNS+perNS/2+q {
			t.Fatalf("update %d: %+v", q, m.Message)
		}
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// The clamped lease: served a millisecond before its deadline, purged at it.
	clk.freeze(time.UnixMilli(clamped.ExpiresAtMs - 1))
	s3 := openAt(t, path, opts)
	if e, err := s3.Get(ctx, admin, wire.GetRequest{Namespace: "service/day", Key: "lease"}); err != nil || e.ExpiresAtMs != clamped.ExpiresAtMs {
		t.Fatalf("the clamped lease a millisecond before its deadline: %+v %v", e, err)
	}
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	clk.freeze(time.UnixMilli(clamped.ExpiresAtMs))
	s4 := openAt(t, path, opts)
	if _, err := s4.Get(ctx, admin, wire.GetRequest{Namespace: "service/day", Key: "lease"}); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("the clamped lease at its deadline: %v", err)
	}
	if r := nsRevision(t, s4, "service/day"); r != 2 {
		t.Fatalf("service/day at revision %d after the clamped lease's purge, want 2", r)
	}
	if st := s4.Stats(); st.TotalBytes != 0 || st.LiveNamespaces != 0 {
		t.Fatalf("counters once every lease is gone: %+v", st)
	}
}

// TestExpiryDuringBackup: leases come due while a backup's read transaction is open (its writer
// stuck): they expire on time regardless, and the backup is still the state at its start. Restored
// and opened past the deadlines, the backup's leases are purged as any overdue lease at a start: one
// revision each, bytes off the counters.
func TestExpiryDuringBackup(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/bk"
	const n = 200
	var reqs []wire.PutRequest
	for k := range n {
		reqs = append(reqs, ttlPut(ns, fmt.Sprintf("leases/p%d/l%02d", k%10, k/10), 30_000))
	}
	leases := putAll(t, s, admin, reqs, 16)
	keep := mustPut(t, s, admin, putLease(ns, "keep"))
	// One watch per tenth of the leases: each snapshot stays within max_snapshot_entries, and each
	// watch's EXPIREs within max_pending_updates.
	var chans []chan stamped
	for p := range 10 {
		sink, ch := stampedSink(s, n/10+4)
		if _, err := s.Watch(ctxT(t), admin, wire.WatchRequest{WatchID: fmt.Sprintf("w%d", p), Namespace: ns, KeyPrefix: fmt.Sprintf("leases/p%d/", p)}, sink); err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	ctx := ctxT(t)
	pr, pw := io.Pipe()
	backedUp := make(chan error, 1)
	go func() {
		_, err := s.Backup(ctx, admin, pw)
		pw.CloseWithError(err)
		backedUp <- err
	}()
	t.Cleanup(func() {
		pr.CloseWithError(errors.New("test over"))
		<-backedUp
	})
	head := make([]byte, 4096)
	if _, err := io.ReadFull(pr, head); err != nil {
		t.Fatalf("the backup's first bytes: %v", err)
	}
	var latest int64
	for _, l := range leases {
		latest = max(latest, l.ExpiresAtMs)
	}
	clk.advance(time.Duration(latest-s.nowMs()+1) * time.Millisecond)
	s.poke()
	// Every lease expires while the backup's transaction stays open: one EXPIRE each, in order.
	timeout := time.After(testTimeout)
	var lastRev uint64
	seen := map[string]bool{}
	for p, ch := range chans {
		for q := uint64(1); q <= n/10; q++ {
			var m stamped
			select {
			case m = <-ch:
			case <-timeout:
				t.Fatalf("watch %d: %d of %d EXPIREs while a backup runs", p, q-1, n/10)
			}
			if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Sequence != q || m.Event.Revision <= keep.Revision || seen[m.Event.Key] {
				t.Fatalf("watch %d, update %d: %+v", p, q, m.Message)
			}
			if q > 1 && m.Event.Revision <= lastRev {
				t.Fatalf("watch %d: revision %d after %d", p, m.Event.Revision, lastRev)
			}
			seen[m.Event.Key], lastRev = true, m.Event.Revision
		}
	}
	if rev := nsRevision(t, s, ns); rev != keep.Revision+n {
		t.Fatalf("revision %d after the expiries, want %d", rev, keep.Revision+n)
	}
	buf := bytes.NewBuffer(head)
	if _, err := io.Copy(buf, pr); err != nil {
		t.Fatalf("reading the backup: %v", err)
	}
	if err := <-backedUp; err != nil {
		backedUp <- err
		t.Fatalf("Backup: %v", err)
	}
	backedUp <- nil
	path := filepath.Join(t.TempDir(), "restored.db")
	if _, err := Restore(path, buf, opts); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	r := openAt(t, path, opts)
	if rev := nsRevision(t, r, ns); rev != keep.Revision+n {
		t.Fatalf("restored past the deadlines: revision %d, want %d (the backup's %d plus one per purged lease)", rev, keep.Revision+n, keep.Revision)
	}
	if st := r.Stats(); st.TotalBytes != int64(len(keep.Document)) {
		t.Fatalf("restored counters %+v", st)
	}
	l, err := r.List(ctx, admin, wire.ListRequest{Namespace: ns})
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Key != "keep" {
		t.Fatalf("restored entries %+v %v", l.Entries, err)
	}
}

// TestDeadlineHeapStaysBoundedWhenDeadlinesMove: many leases whose deadlines move again and again
// (renewed with other TTLs, cleared by a put without a TTL, deleted, leased again) never leave the
// deadline heap, or the array under it, growing with the number of writes: it stays in proportion to
// the leases. At the end exactly the leases that stand expire, once each, and the heap empties.
func TestDeadlineHeapStaysBoundedWhenDeadlinesMove(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/churn"
	const keys, rounds = 400, 25
	key := func(k int) string { return fmt.Sprintf("leases/l%03d", k) }
	leased := map[string]bool{}
	bound := func(round int) {
		s.mu.RLock()
		h, c, l := len(s.deadlines), cap(s.deadlines), s.leased
		s.mu.RUnlock()
		if l > keys || h > 2*keys+deadlineSlack+1 || c > 4*keys+2*deadlineSlack+2 {
			t.Fatalf("round %d: %d deadlines (array of %d) for %d leases", round, h, c, l)
		}
	}
	ctx := ctxT(t)
	for round := range rounds {
		var reqs []wire.PutRequest
		for k := range keys {
			switch (k + round) % 5 {
			case 0:
				reqs = append(reqs, putLease(ns, key(k))) // clears the lease
				leased[key(k)] = false
			case 4:
				if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: key(k)}); err != nil && wire.CodeOf(err) != wire.CodeNotFound {
					t.Fatal(err)
				}
				delete(leased, key(k))
			default:
				reqs = append(reqs, ttlPut(ns, key(k), int64(MaxTTLMs-round*1000-k))) // a new deadline
				leased[key(k)] = true
			}
		}
		putAll(t, s, admin, reqs, 16)
		bound(round)
	}
	s.mu.RLock()
	if want := 0; s.leased != func() int {
		for _, l := range leased {
			if l {
				want++
			}
		}
		return want
	}() {
		s.mu.RUnlock()
		t.Fatalf("%d leases counted", s.leased)
	}
	s.mu.RUnlock()
	var standing []string
	for k, l := range leased {
		if l {
			standing = append(standing, k)
		}
	}
	sort.Strings(standing)
	r0 := nsRevision(t, s, ns)
	clk.advance(25 * time.Hour)
	if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	var kept []string
	after := ""
	for {
		l, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, AfterKey: after, Limit: wire.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Entries {
			if e.TTLMs != 0 || leased[e.Key] {
				t.Fatalf("%s is still there with a lease: %+v", e.Key, e)
			}
			kept = append(kept, e.Key)
		}
		if l.NextAfterKey == "" {
			break
		}
		after = l.NextAfterKey
	}
	if len(kept)+len(standing) != len(leased) {
		t.Fatalf("%d entries kept and %d leases stood, of %d keys", len(kept), len(standing), len(leased))
	}
	if r := nsRevision(t, s, ns); r != r0+uint64(len(standing)) {
		t.Fatalf("revision %d after %d expiries from %d", r, len(standing), r0)
	}
	s.mu.RLock()
	h, l := len(s.deadlines), s.leased
	s.mu.RUnlock()
	if h != 0 || l != 0 {
		t.Fatalf("after every lease expired: %d deadlines, %d leases", h, l)
	}
}
