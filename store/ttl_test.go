package store

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// testClock is a clock the test moves forward by hand, on top of real time.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func withClock(opts Options) (Options, *testClock) {
	c := &testClock{}
	opts.Clock = c.now
	return opts, c
}

func ttlPut(ns, key string, ttl int64) wire.PutRequest {
	r := putLease(ns, key)
	r.TTLMs = i64(ttl)
	return r
}

func TestTTLRules(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	_, err := s.Put(ctx, admin, ttlPut(ns, "k", 999))
	wantCode(t, err, wire.CodeTTLInvalid)
	_, err = s.Put(ctx, admin, ttlPut(ns, "k", 1))
	wantCode(t, err, wire.CodeTTLInvalid)
	_, err = s.Put(ctx, admin, ttlPut(ns, "k", -1))
	wantCode(t, err, wire.CodeInvalidArgument)
	if nsRevision(t, s, ns) != 0 {
		t.Fatalf("rejected TTLs advanced the revision")
	}
	e := mustPut(t, s, admin, ttlPut(ns, "k", 1000))
	if e.TTLMs != 1000 || e.ExpiresAtMs != e.UpdatedAtMs+1000 {
		t.Fatalf("1 s lease: %+v", e)
	}
	e = mustPut(t, s, admin, ttlPut(ns, "k", 90_000_000))
	if e.TTLMs != MaxTTLMs || e.ExpiresAtMs != e.UpdatedAtMs+MaxTTLMs {
		t.Fatalf("clamped lease: %+v", e)
	}
	e = mustPut(t, s, admin, ttlPut(ns, "k", 0)) // 0: no lease
	if e.TTLMs != 0 || e.ExpiresAtMs != 0 {
		t.Fatalf("ttl 0 keeps a lease: %+v", e)
	}
	mustPut(t, s, admin, ttlPut(ns, "k", 5000))
	e = mustPut(t, s, admin, putLease(ns, "k")) // absent: removes the lease
	if e.TTLMs != 0 || e.ExpiresAtMs != 0 {
		t.Fatalf("a put without ttl_ms keeps the lease: %+v", e)
	}
	b, _ := json.Marshal(e)
	if strings.Contains(string(b), "ttl_ms") || strings.Contains(string(b), "expires_at_ms") {
		t.Fatalf("an entry without lease encodes lease fields: %s", b)
	}
}

// TestExpiryInclusiveAndBeforeMutation: an entry whose deadline equals now reads NOT_FOUND, and due
// entries of a namespace are expired (with their own revisions) before a mutation in it.
func TestExpiryInclusiveAndBeforeMutation(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	e := mustPut(t, s, admin, ttlPut(ns, "lease", 60_000)) // rev 1
	recv(t, ch)
	// Move the clock to exactly the deadline.
	clk.advance(time.Duration(e.ExpiresAtMs-s.nowMs()) * time.Millisecond)
	for s.nowMs() < e.ExpiresAtMs { // real time may lag the arithmetic by a millisecond
		clk.advance(time.Millisecond)
	}
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: "lease"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("at its deadline the entry must read NOT_FOUND: %v", err)
	}
	if r, _ := s.List(ctx, admin, wire.ListRequest{Namespace: ns}); len(r.Entries) != 0 {
		t.Fatalf("list shows an expired entry")
	}
	// The next put in the namespace commits the expiry first: EXPIRE at rev 2, the put at rev 3.
	p := mustPut(t, s, admin, putLease(ns, "other"))
	if p.Revision != 3 {
		t.Fatalf("put revision %d, want 3 (the expiry takes 2)", p.Revision)
	}
	m1, m2 := recv(t, ch), recv(t, ch)
	if m1.Event.Kind != wire.UpdateExpire || m1.Event.Revision != 2 || m1.Event.Key != "lease" || m1.Sequence != 2 {
		t.Fatalf("first update %+v", m1.Event)
	}
	if m2.Event.Kind != wire.UpdatePut || m2.Event.Revision != 3 {
		t.Fatalf("second update %+v", m2.Event)
	}
}

// TestWatchSnapshotExpiresDueFirst: a watch snapshot in a namespace with a due lease commits the expiry
// before capturing, so the snapshot revision includes it.
func TestWatchSnapshotExpiresDueFirst(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	mustPut(t, s, admin, ttlPut(ns, "lease", 60_000))
	mustPut(t, s, admin, putLease(ns, "keep"))
	clk.advance(61 * time.Second)
	ws, _ := watchT(t, s, admin, "w", ns, "")
	if ws.SnapshotRevision != 3 || len(ws.Entries) != 1 || ws.Entries[0].Key != "keep" {
		t.Fatalf("snapshot %+v, want revision 3 with keep only", ws)
	}
}

// TestLeaseExpiryReachesEveryWatcher: one ordered EXPIRE per matching watch, by the expiry timer
// alone (seed acceptance scenario 2).
func TestLeaseExpiryReachesEveryWatcher(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	const ns = "service/tx"
	var chans []chan Message
	for _, id := range []string{"a", "b", "c"} {
		_, ch := watchT(t, s, admin, id, ns, "leases/")
		chans = append(chans, ch)
	}
	_, other := watchT(t, s, admin, "other", ns, "intents/")
	e := mustPut(t, s, admin, ttlPut(ns, "leases/front-door", 1000))
	for _, ch := range chans {
		if m := recv(t, ch); m.Event.Kind != wire.UpdatePut {
			t.Fatalf("first update %+v", m.Event)
		}
	}
	for _, ch := range chans {
		m := recv(t, ch)
		if m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/front-door" || m.Event.Revision != e.Revision+1 || m.Sequence != 2 {
			t.Fatalf("expire update %+v seq %d", m.Event, m.Sequence)
		}
		if got := time.Now().UnixMilli(); got < e.ExpiresAtMs {
			t.Fatalf("EXPIRE delivered %d ms before the deadline", e.ExpiresAtMs-got)
		}
		noMessage(t, ch)
	}
	noMessage(t, other)
	if r := nsRevision(t, s, ns); r != e.Revision+1 {
		t.Fatalf("revision %d after one expiry, want %d", r, e.Revision+1)
	}
}

// TestRestartPurge: overdue leases are deleted before serving, their bytes leave the counter and the
// namespace revision advances by one per expired entry (SPEC section 6).
func TestRestartPurge(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, path := openT(t, opts)
	const ns = "service/tx"
	mustPut(t, s, admin, ttlPut(ns, "a", 5000))
	mustPut(t, s, admin, ttlPut(ns, "b", 6000))
	mustPut(t, s, admin, ttlPut(ns, "c", 7000))
	mustPut(t, s, admin, ttlPut(ns, "later", 3_600_000))
	keep := mustPut(t, s, admin, putLease(ns, "keep"))
	mustPut(t, s, admin, ttlPut("service/other", "x", 5000))
	before := s.Stats()
	s.Close()

	clk.advance(10 * time.Second)
	s2 := openAt(t, path, opts)
	if r := nsRevision(t, s2, ns); r != keep.Revision+3 {
		t.Fatalf("revision after purge %d, want %d", r, keep.Revision+3)
	}
	if r := nsRevision(t, s2, "service/other"); r != 2 {
		t.Fatalf("other namespace revision %d, want 2", r)
	}
	r, _ := s2.List(ctxT(t), admin, wire.ListRequest{Namespace: ns})
	if len(r.Entries) != 2 || r.Entries[0].Key != "keep" || r.Entries[1].Key != "later" {
		t.Fatalf("entries after purge %+v", r.Entries)
	}
	after := s2.Stats()
	docLen := int64(len(keep.Document))
	if after.TotalBytes != before.TotalBytes-4*docLen || after.LiveNamespaces != 1 {
		t.Fatalf("counters after purge %+v (before %+v)", after, before)
	}
	// The purge is durable: a second open changes nothing more, and a new write continues from it.
	s2.Close()
	s3 := openAt(t, path, opts)
	if r := nsRevision(t, s3, ns); r != keep.Revision+3 {
		t.Fatalf("revision after reopen %d", r)
	}
	if e := mustPut(t, s3, admin, putLease(ns, "new")); e.Revision != keep.Revision+4 {
		t.Fatalf("write after purge at revision %d", e.Revision)
	}
	rep, err := s3.VerifyAudit()
	if err != nil || !rep.OK() || rep.Records != 6+4+1 {
		t.Fatalf("audit after purge %+v %v", rep, err)
	}
}

// TestTouchSystem: a keepalive pushes the deadline with no revision and no update.
func TestTouchSystem(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	doc := json.RawMessage(`{"worker_id":"w1","service":"transcoder-a","principal":"alice","status":"ready","interval_ms":1000,"leases":[],"first_seen_ms":1}`)
	_, ch := watchT(t, s, admin, "w", "system", "workers/")
	e, err := s.PutSystem(ctx, "alice", wire.PutRequest{Namespace: "system", Key: "workers/alice/w1", Schema: "keeppeek.worker-status.v1", Document: doc, TTLMs: i64(3000)})
	if err != nil || e.Owner != "alice" {
		t.Fatalf("PutSystem: %+v %v", e, err)
	}
	recv(t, ch)
	clk.advance(time.Second)
	touched, err := s.TouchSystem(ctx, "workers/alice/w1")
	if err != nil || touched.Revision != e.Revision || touched.ExpiresAtMs <= e.ExpiresAtMs {
		t.Fatalf("touch: %+v %v (was %+v)", touched, err, e)
	}
	got, _ := s.Get(ctx, admin, wire.GetRequest{Namespace: "system", Key: "workers/alice/w1"})
	if got.ExpiresAtMs != touched.ExpiresAtMs || nsRevision(t, s, "system") != e.Revision {
		t.Fatalf("get after touch %+v", got)
	}
	noMessage(t, ch)
	if _, err := s.TouchSystem(ctx, "workers/alice/none"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("touch of a missing key: %v", err)
	}
	if _, err := s.PutSystem(ctx, "alice", wire.PutRequest{Namespace: "service/x", Key: "k", Schema: "keeppeek.lease.v1", Document: leaseDoc("w")}); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("PutSystem outside system: %v", err)
	}
}

// A watch waits for the due leases of its own namespace only (SPEC section 6): a lease due in another
// namespace is neither expired for it nor waited on (a watch does not fail with a commit it does not
// need, as on a full disk); a watch of the lease's namespace expires it first.
func TestWatchWaitsOnlyForItsNamespacesDueLeases(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	e := mustPut(t, s, admin, ttlPut("service/b", "leases/a", 60_000)) // the committer's own timer is a minute away
	mustPut(t, s, admin, putLease("service/a", "k"))
	clk.advance(61 * time.Second)
	ws, _ := watchT(t, s, admin, "wa", "service/a", "")
	if len(ws.Entries) != 1 || ws.SnapshotRevision != 1 {
		t.Fatalf("watch of service/a: %+v", ws)
	}
	if r := nsRevision(t, s, "service/b"); r != e.Revision {
		t.Fatalf("a watch of service/a expired service/b's lease (revision %d, was %d)", r, e.Revision)
	}
	wb, _ := watchT(t, s, admin, "wb", "service/b", "")
	if len(wb.Entries) != 0 || wb.SnapshotRevision != e.Revision+1 {
		t.Fatalf("watch of service/b: %d entries at revision %d, want its lease expired first (0 at %d)", len(wb.Entries), wb.SnapshotRevision, e.Revision+1)
	}
}

// TestRenewedLeasesKeepTheDeadlineHeapBounded: every put of a leased entry pushes a deadline, and the
// one it replaces goes stale. A lease renewed again and again with a long TTL (any principal may put
// ttl_ms 86,400,000 in its own namespace in a loop) must not leave one deadline per renewal behind
// for a day: the heap stays in proportion to the leases, and the lease still expires on time.
func TestRenewedLeasesKeepTheDeadlineHeapBounded(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "leases/")
	const renewals = 3000
	for i := range renewals {
		mustPut(t, s, admin, ttlPut(ns, "leases/a", MaxTTLMs))
		if i%16 == 0 {
			if err := s.Ack(ctxT(t), admin, wire.AckRequest{WatchID: "w", AppliedSequence: i64(int64(i + 1))}); err != nil {
				t.Fatal(err)
			}
		}
		for len(ch) > 0 {
			<-ch
		}
	}
	last := mustPut(t, s, admin, ttlPut(ns, "leases/a", 60_000))
	for len(ch) > 0 {
		<-ch
	}
	s.mu.RLock()
	n := len(s.deadlines)
	s.mu.RUnlock()
	if n > 2*deadlineSlack+2 {
		t.Fatalf("one leased key renewed %d times leaves %d deadlines in the heap", renewals, n)
	}
	// The lease that stands still expires: its own deadline was kept.
	clk.advance(61 * time.Second)
	s.poke()
	if r := s.submit(ctxT(t), &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Revision != last.Revision+1 {
		t.Fatalf("after the deadline: %+v", m)
	}
}

// A stored lease whose deadline lies centuries ahead (a clock once far wrong, a hand edit) is never
// due, and the committer waits for it as for any other: its wait used to overflow a time.Duration
// and wrap below zero, and the committer woke at once, again and again, spinning a core for as long
// as the store ran. It now reads the clock again every expiryPoll, and no sooner.
func TestFarLeaseDeadlineNeverSpinsTheCommitter(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	mustPut(t, s, admin, ttlPut("service/tx", "far", 5000))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const ahead = 9_300_000_000_000 // ms, about 295 years: past what a time.Duration holds
	boltEditFile(t, path, editStoredEntry("service/tx", "far", func(e map[string]any) {
		e["expires_at_ms"] = time.Now().UnixMilli() + ahead
	}))
	s2 := openAt(t, path, DefaultOptions())
	if w := s2.untilMs(s2.nowMs() + ahead); w <= 0 {
		t.Fatalf("the wait for a deadline %d ms ahead is %v", int64(ahead), w)
	}
	if w := s2.untilMs(s2.nowMs() - ahead); w >= 0 {
		t.Fatalf("the wait for a deadline %d ms past is %v", int64(ahead), w)
	}
	if w := s2.arm(); w != expiryPoll {
		t.Fatalf("the committer waits %v for a lease due in %d ms, want the clock's next look %v", w, int64(ahead), expiryPoll)
	}
	if _, err := s2.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "far"}); err != nil {
		t.Fatalf("the far lease: %v", err)
	}
}
