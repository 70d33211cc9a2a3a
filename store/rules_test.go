package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// These tests pin rules of SPEC.md that the engine enforces, each so that breaking the rule fails it.

// TestWatchSnapshotEntryBoundAtLimit: a snapshot of exactly max_snapshot_entries live entries is
// accepted whole; one more entry under the prefix is WATCH_TOO_BROAD and registers nothing (SPEC 7.2).
func TestWatchSnapshotEntryBoundAtLimit(t *testing.T) {
	const n = 3
	opts := DefaultOptions()
	opts.Bounds.MaxSnapshotEntries = n
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/x"
	for i := range n {
		mustPut(t, s, admin, putLease(ns, fmt.Sprintf("a/%d", i)))
	}
	mustPut(t, s, admin, putLease(ns, "b/outside")) // outside the prefix: never counted
	ws, _ := watchT(t, s, admin, "at-limit", ns, "a/")
	if len(ws.Entries) != n || ws.SnapshotRevision != n+1 {
		t.Fatalf("watch of exactly %d entries: %d entries at revision %d, want %d at %d", n, len(ws.Entries), ws.SnapshotRevision, n, n+1)
	}
	if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "at-limit"}); err != nil {
		t.Fatal(err)
	}

	mustPut(t, s, admin, putLease(ns, fmt.Sprintf("a/%d", n))) // now n+1 match
	sink, ch := chanSink(8)
	_, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: "over", Namespace: ns, KeyPrefix: "a/"}, sink)
	wantCode(t, err, wire.CodeWatchTooBroad)
	if w := s.Stats().Watches; w != 0 {
		t.Fatalf("a WATCH_TOO_BROAD watch left %d watches registered", w)
	}
	if refs := s.LiveWatches(); len(refs) != 0 {
		t.Fatalf("a WATCH_TOO_BROAD watch is live: %+v", refs)
	}
	// Nothing reaches the rejected watch's sink, and its id is free.
	mustPut(t, s, admin, putLease(ns, "a/0"))
	noMessage(t, ch)
	wantCode(t, s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "over"}), wire.CodeNotFound)
}

// TestWatchCheckOrderBeforeTooBroad: WATCH_EXISTS, then RESOURCE_EXHAUSTED, then WATCH_TOO_BROAD
// (SPEC 5, step 4). A watch that is both over the count bound and too broad answers
// RESOURCE_EXHAUSTED; one that both exists and is too broad answers WATCH_EXISTS.
func TestWatchCheckOrderBeforeTooBroad(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxSnapshotEntries = 1
	opts.Bounds.MaxWatches = 2
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/x"
	mustPut(t, s, admin, putLease(ns, "a/1"))
	mustPut(t, s, admin, putLease(ns, "a/2"))
	sink, _ := chanSink(8)
	w := func(id, prefix string) error {
		_, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: prefix}, sink)
		return err
	}
	// Too broad alone.
	wantCode(t, w("probe", ""), wire.CodeWatchTooBroad)
	if err := w("a", "a/1"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w("a", ""), wire.CodeWatchExists) // exists and too broad
	if err := w("b", "a/2"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w("c", ""), wire.CodeResourceExhausted) // over max_watches and too broad
	if got := s.Stats().Watches; got != 2 {
		t.Fatalf("%d watches live, want 2", got)
	}
}

// TestAckMovesAckDeadline: the ack deadline counts from the oldest update still unacknowledged, not
// from the first update ever sent (SPEC 7.5, 7.6). The send times are pinned, so no wall-clock pace
// matters: acker's first update (acknowledged) and marker's only update (not) are two deadlines old,
// acker's second update (not acknowledged) was just sent. A pass of the deadline check closes marker
// with ACK_TIMEOUT and leaves acker, which keeps working.
func TestAckMovesAckDeadline(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	_, acker := watchT(t, s, admin, "acker", ns, "a/")
	_, marker := watchT(t, s, admin, "marker", ns, "m/")
	mustPut(t, s, admin, putLease(ns, "a/k"))
	mustPut(t, s, admin, putLease(ns, "m/k"))
	mustPut(t, s, admin, putLease(ns, "a/k"))
	recv(t, acker)
	recv(t, acker)
	recv(t, marker)
	if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "acker", AppliedSequence: i64(1)}); err != nil {
		t.Fatal(err)
	}
	r := &s.watches
	limit := s.opts.Bounds.AckDeadlineMs * int64(time.Millisecond)
	now := monoNow()
	r.mu.Lock()
	a := r.byID[watchKey{principal: admin.ID, id: "acker"}]
	m := r.byID[watchKey{principal: admin.ID, id: "marker"}]
	a.sentAt[1%len(a.sentAt)] = now - 2*limit
	a.sentAt[2%len(a.sentAt)] = now
	m.sentAt[1%len(m.sentAt)] = now - 2*limit + 1
	r.mu.Unlock()
	r.expireAcks(now + 1)
	wantClosed(t, marker, wire.CloseAckTimeout)
	noMessage(t, acker)
	if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "acker", AppliedSequence: i64(2)}); err != nil {
		t.Fatalf("acker is gone though its only unacknowledged update was fresh: %v", err)
	}
}

// TestQuotaReplaceCountsOldDocumentOnce: replacing an entry is checked against
// max_total_value_bytes with the old document's bytes taken out (SPEC 8); a replacement that would
// pass the total is QUOTA_EXCEEDED and changes nothing.
func TestQuotaReplaceCountsOldDocumentOnce(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxTotalValueBytes = 200
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	doc := func(n int) json.RawMessage { // a lease document of exactly n compact bytes
		base := `{"holder":"w","claimed_at_ms":1,"purpose":""}`
		return json.RawMessage(`{"holder":"w","claimed_at_ms":1,"purpose":"` + strings.Repeat("p", n-len(base)) + `"}`)
	}
	put := func(key string, n int) (wire.Entry, error) {
		return s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1", Document: doc(n)})
	}
	for _, kv := range []struct {
		key string
		n   int
	}{{"a", 100}, {"b", 90}} {
		if _, err := put(kv.key, kv.n); err != nil {
			t.Fatal(err)
		}
	}
	if tb := s.Stats().TotalBytes; tb != 190 {
		t.Fatalf("total bytes %d, want 190", tb)
	}
	_, ch := watchT(t, s, admin, "w", ns, "")
	// 190 of 200 held: a same-size replacement fits only if the old 100 bytes are not counted twice.
	if _, err := put("a", 100); err != nil {
		t.Fatalf("same-size replacement in a nearly full store: %v", err)
	}
	if _, err := put("a", 80); err != nil {
		t.Fatalf("smaller replacement: %v", err)
	}
	if _, err := put("a", 110); err != nil { // 90 + 110 = 200: exactly the bound
		t.Fatalf("replacement that reaches the bound exactly: %v", err)
	}
	for range 3 {
		recv(t, ch)
	}
	before := s.Stats().TotalBytes
	rev := nsRevision(t, s, ns)
	if before != 200 {
		t.Fatalf("total bytes %d, want 200", before)
	}
	_, err := put("a", 111) // 90 + 111 = 201
	wantCode(t, err, wire.CodeQuotaExceeded)
	if after := nsRevision(t, s, ns); after != rev {
		t.Fatalf("a rejected replacement moved the revision %d -> %d", rev, after)
	}
	if tb := s.Stats().TotalBytes; tb != before {
		t.Fatalf("a rejected replacement changed total bytes %d -> %d", before, tb)
	}
	got, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: "a"})
	if err != nil || string(got.Document) != string(doc(110)) {
		t.Fatalf("after a rejected replacement the entry is %s (%v), want the 110-byte document", got.Document, err)
	}
	noMessage(t, ch)
}

// TestExpireByTestClock: with Options.Clock under test control, a 1 s lease is expired by the
// committer once the clock passes its deadline, without waiting for real time: NOT_FOUND on get, one
// EXPIRE to the watch, the namespace revision +1 (SPEC 6).
func TestExpireByTestClock(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "leases/")
	e := mustPut(t, s, admin, ttlPut(ns, "leases/a", 1000))
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut {
		t.Fatalf("first update %+v", m)
	}
	// Nothing is due yet: a committer run expires nothing.
	if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	noMessage(t, ch)
	if r := nsRevision(t, s, ns); r != e.Revision {
		t.Fatalf("revision %d before the deadline, want %d", r, e.Revision)
	}
	// Past the deadline by the store's clock, long before it by real time. Wake the committer and wait
	// for a committer run (a barrier, as Watch uses) to have finished.
	clk.advance(2 * time.Second)
	s.poke()
	if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	// The expiry is committed and fanned out before the run answers: no waiting from here on.
	select {
	case m := <-ch:
		if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" || m.Event.Revision != e.Revision+1 || m.Sequence != 2 {
			t.Fatalf("update after the deadline %+v", m)
		}
	default:
		t.Fatalf("no EXPIRE after the clock passed the deadline and the committer ran")
	}
	noMessage(t, ch)
	if r := nsRevision(t, s, ns); r != e.Revision+1 {
		t.Fatalf("revision %d after the expiry, want %d", r, e.Revision+1)
	}
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: "leases/a"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("get after expiry: %v, want NOT_FOUND", err)
	}
	if st := s.Stats(); st.TotalBytes != 0 || st.LiveNamespaces != 0 {
		t.Fatalf("counters after expiry %+v", st)
	}
}

// TestExpiryAfterClockJump: lease deadlines are times of the store's clock, while the committer's
// timer waits in Go's monotonic time. A store clock that jumps past a deadline (the default clock
// across a suspend of the machine, which it counts and the timer does not; an injected clock) must not
// leave the entry live until the timer armed before the jump ends: the committer looks at the clock
// again at least every expiryPoll, so the EXPIRE comes with nothing else waking it.
func TestExpiryAfterClockJump(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "leases/")
	e := mustPut(t, s, admin, ttlPut(ns, "leases/a", time.Hour.Milliseconds()))
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut {
		t.Fatalf("first update %+v", m)
	}
	// The committer has armed its timer for the deadline, an hour of elapsed time away.
	deadline := time.Now().Add(testTimeout)
	for {
		s.mu.RLock()
		armed := s.armedAtMs
		s.mu.RUnlock()
		if armed == e.ExpiresAtMs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the committer armed for %d, want the lease deadline %d", armed, e.ExpiresAtMs)
		}
		runtime.Gosched()
	}
	clk.advance(2 * time.Hour) // no poke, no write: only the committer's own timer can notice
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "leases/a" || m.Event.Revision != e.Revision+1 {
		t.Fatalf("update after the clock jumped past the deadline %+v", m)
	}
}

// TestAckDeadlineAfterFullAck: a watch that acknowledged every update owes nothing and outlives any
// deadline; an update sent after that is owed again, and its deadline closes the watch with
// ACK_TIMEOUT (the deadline check visits only the watches that owe an ack).
func TestAckDeadlineAfterFullAck(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	mustPut(t, s, admin, putLease(ns, "k"))
	recv(t, ch)
	if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "w", AppliedSequence: i64(1)}); err != nil {
		t.Fatal(err)
	}
	r := &s.watches
	limit := s.opts.Bounds.AckDeadlineMs * int64(time.Millisecond)
	r.expireAcks(monoNow() + 2*limit)
	noMessage(t, ch)
	mustPut(t, s, admin, putLease(ns, "k"))
	recv(t, ch)
	r.expireAcks(monoNow() + 2*limit)
	wantClosed(t, ch, wire.CloseAckTimeout)
	if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "w", AppliedSequence: i64(2)}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack after ACK_TIMEOUT: %v, want NOT_FOUND", err)
	}
}
