package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

func watchT(t testing.TB, s *Store, p policy.Principal, id, ns, prefix string) (*wire.WatchState, chan Message) {
	t.Helper()
	sink, ch := chanSink(256)
	ws, err := s.Watch(ctxT(t), p, wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: prefix}, sink)
	if err != nil {
		t.Fatalf("Watch %s: %v", id, err)
	}
	return ws, ch
}

func wantClosed(t testing.TB, ch chan Message, reason wire.CloseReason) {
	t.Helper()
	for {
		m := recv(t, ch)
		if m.Closed == nil {
			continue
		}
		if m.Closed.Reason != reason || m.Closed.Kind != wire.UpdateClosed {
			t.Fatalf("closed with %+v, want %s", m.Closed, reason)
		}
		var c wire.WatchClosed
		if err := wire.Decode(m.JSON(), &c); err != nil || c.Reason != reason {
			t.Fatalf("close JSON %s: %v", m.JSON(), err)
		}
		return
	}
}

func noMessage(t testing.TB, ch chan Message) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %+v", m)
	default:
	}
}

func TestWatchSnapshotThenOrderedUpdates(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	mustPut(t, s, admin, putLease(ns, "intents/a"))
	mustPut(t, s, admin, putLease(ns, "other/x"))
	ws, ch := watchT(t, s, admin, "w1", ns, "intents/")
	if ws.SnapshotRevision != 2 || len(ws.Entries) != 1 || ws.Entries[0].Key != "intents/a" {
		t.Fatalf("snapshot %+v", ws)
	}
	mustPut(t, s, admin, putLease(ns, "other/y")) // revision 3: outside the prefix
	mustPut(t, s, admin, putLease(ns, "intents/b"))
	if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: "intents/a"}); err != nil {
		t.Fatal(err)
	}
	m1, m2 := recv(t, ch), recv(t, ch)
	if m1.Sequence != 1 || m1.Event.Revision != 4 || m1.Event.Kind != wire.UpdatePut || m1.Event.Entry.Key != "intents/b" {
		t.Fatalf("first update %+v", m1)
	}
	// A revision skip (3 was outside the prefix) without a sequence skip.
	if m2.Sequence != 2 || m2.Event.Revision != 5 || m2.Event.Kind != wire.UpdateDelete || m2.Event.Entry != nil {
		t.Fatalf("second update %+v", m2)
	}
	var u wire.WatchMessage
	if err := wire.Decode(m2.JSON(), &u); err != nil || u.Kind != wire.UpdateDelete || u.Key != "intents/a" || u.WatchSequence != 2 || u.WatchID != "w1" {
		t.Fatalf("delete JSON %s: %v", m2.JSON(), err)
	}
	if strings.Contains(string(m2.JSON()), `"entry"`) {
		t.Fatalf("a DELETE carries no entry: %s", m2.JSON())
	}
	noMessage(t, ch)
}

func TestWatchAckRules(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	for range 3 {
		mustPut(t, s, admin, putLease(ns, "k"))
		recv(t, ch)
	}
	ack := func(seq int64) error {
		return s.Ack(ctx, admin, wire.AckRequest{WatchID: "w", AppliedSequence: i64(seq)})
	}
	wantCode(t, ack(4), wire.CodeInvalidArgument) // above the highest sent
	if err := ack(2); err != nil {
		t.Fatal(err)
	}
	wantCode(t, ack(1), wire.CodeInvalidArgument) // below an earlier ack
	if err := ack(2); err != nil {                // the same ack again is fine
		t.Fatal(err)
	}
	if err := ack(3); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.Ack(ctx, admin, wire.AckRequest{WatchID: "nope", AppliedSequence: i64(0)}), wire.CodeNotFound)
	wantCode(t, s.Ack(ctx, bob, wire.AckRequest{WatchID: "w", AppliedSequence: i64(3)}), wire.CodeNotFound) // watch ids are per principal
}

func TestWatchOverflowAndSlowWatcherDoesNotBlock(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxPendingUpdates = 4
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	_, slow := watchT(t, s, admin, "slow", ns, "")
	_, fast := watchT(t, s, admin, "fast", ns, "")
	for i := 1; i <= 20; i++ {
		mustPut(t, s, admin, putLease(ns, "k"))
		m := recv(t, fast)
		if m.Sequence != uint64(i) {
			t.Fatalf("fast watcher got seq %d, want %d", m.Sequence, i)
		}
		if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "fast", AppliedSequence: i64(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 4; i++ {
		if m := recv(t, slow); m.Sequence != uint64(i) {
			t.Fatalf("slow watcher seq %d, want %d", m.Sequence, i)
		}
	}
	wantClosed(t, slow, wire.CloseOverflow)
	noMessage(t, slow)
	// A closed watch is gone: NOT_FOUND, and its id is free again.
	wantCode(t, s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "slow"}), wire.CodeNotFound)
	wantCode(t, s.Ack(ctx, admin, wire.AckRequest{WatchID: "slow", AppliedSequence: i64(1)}), wire.CodeNotFound)
	watchT(t, s, admin, "slow", ns, "")
}

func TestWatchAckTimeout(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.AckDeadlineMs = 200
	s, _ := openT(t, opts)
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	_, idle := watchT(t, s, admin, "idle", "service/other", "")
	mustPut(t, s, admin, putLease(ns, "k"))
	recv(t, ch)
	wantClosed(t, ch, wire.CloseAckTimeout)
	noMessage(t, idle) // a watch with nothing outstanding is never timed out
	if s.Stats().Watches != 1 {
		t.Fatalf("watches %d, want 1", s.Stats().Watches)
	}
}

func TestWatchExistsAndCountBounds(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxWatches = 3
	opts.Bounds.MaxWatchesPerPrincipal = 2
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	sink, _ := chanSink(8)
	w := func(p policy.Principal, id, ns string) error {
		_, err := s.Watch(ctx, p, wire.WatchRequest{WatchID: id, Namespace: ns}, sink)
		return err
	}
	if err := w(admin, "a", "service/x"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w(admin, "a", "service/y"), wire.CodeWatchExists)
	if err := w(alice, "a", "user/alice"); err != nil { // same id, other principal
		t.Fatal(err)
	}
	if err := w(admin, "b", "service/x"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, w(admin, "c", "service/x"), wire.CodeResourceExhausted)  // per principal
	wantCode(t, w(alice, "b", "user/alice"), wire.CodeResourceExhausted) // in all
	wantCode(t, w(admin, "a", "service/x"), wire.CodeWatchExists)        // exists is checked first
	if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := w(alice, "b", "user/alice"); err != nil {
		t.Fatalf("slot not freed by unwatch: %v", err)
	}
}

func TestWatchTooBroad(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxSnapshotEntries = 3
	opts.Bounds.MaxSnapshotBytes = 2000
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	sink, _ := chanSink(8)
	for i := range 4 {
		mustPut(t, s, admin, putLease("service/x", fmt.Sprintf("a/%d", i)))
	}
	_, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: "service/x"}, sink)
	wantCode(t, err, wire.CodeWatchTooBroad)
	if _, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: "service/x", KeyPrefix: "a/1"}, sink); err != nil {
		t.Fatalf("narrowed watch: %v", err)
	}
	big := json.RawMessage(`{"holder":"w","claimed_at_ms":1,"purpose":"` + strings.Repeat("p ", 400) + `"}`)
	for i := range 3 {
		mustPut(t, s, admin, wire.PutRequest{Namespace: "service/y", Key: fmt.Sprintf("b/%d", i), Schema: "keeppeek.lease.v1", Document: big})
	}
	_, err = s.Watch(ctx, admin, wire.WatchRequest{WatchID: "w2", Namespace: "service/y"}, sink)
	wantCode(t, err, wire.CodeWatchTooBroad)
	if s.Stats().Watches != 1 {
		t.Fatalf("a rejected watch was registered")
	}
}

func TestWatchUnauthorizedOnReload(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ops := policy.Principal{ID: "ops", Admin: true}
	_, ch := watchT(t, s, ops, "w", "service/tx", "")
	_, mine := watchT(t, s, alice, "w", "user/alice", "")
	_, kept := watchT(t, s, admin, "w", "service/tx", "")
	// ops is demoted, alice is removed, admin is unchanged.
	s.ReloadPrincipals(func(id string) (policy.Principal, bool) {
		switch id {
		case "ops":
			return policy.Principal{ID: "ops"}, true
		case "coordinator":
			return admin, true
		}
		return policy.Principal{}, false
	})
	wantClosed(t, ch, wire.CloseUnauthorized)
	wantClosed(t, mine, wire.CloseUnauthorized)
	mustPut(t, s, admin, putLease("service/tx", "k"))
	if m := recv(t, kept); m.Sequence != 1 {
		t.Fatalf("kept watch: %+v", m)
	}
	noMessage(t, ch)
}

func TestWatchShutdownOnClose(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	_, ch := watchT(t, s, admin, "w", "service/tx", "")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, ch, wire.CloseShutdown)
	_, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "k"})
	wantCode(t, err, wire.CodeUnavailable)
	if strings.Contains(strings.Join(s.Info().Features, ","), wire.FeatureStateStore) {
		t.Fatalf("a closed store advertises the feature")
	}
}

// TestPutRacingWatch: a watch started during a write gets the entry in its snapshot or as one later
// update, never neither and never both (seed acceptance scenario 3).
func TestPutRacingWatch(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/race"
	for round := range 300 {
		key := fmt.Sprintf("k%d", round)
		id := fmt.Sprintf("w%d", round)
		sink, ch := chanSink(8)
		var wg sync.WaitGroup
		var ws *wire.WatchState
		var werr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			ws, werr = s.Watch(ctx, admin, wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: key}, sink)
		}()
		var put wire.Entry
		go func() {
			defer wg.Done()
			put = mustPut(t, s, admin, putLease(ns, key))
		}()
		wg.Wait()
		if werr != nil {
			t.Fatal(werr)
		}
		inSnap := 0
		for _, e := range ws.Entries {
			if e.Key == key {
				inSnap++
			}
		}
		// Flush: a later put to the same prefix proves every earlier update has been delivered.
		mustPut(t, s, admin, putLease(ns, key+"/z"))
		updates := 0
		for {
			m := recv(t, ch)
			if m.Event.Key == key+"/z" {
				break
			}
			if m.Event.Key == key && m.Event.Revision == put.Revision {
				updates++
			}
		}
		if inSnap+updates != 1 {
			t.Fatalf("round %d: entry in snapshot %d times and in updates %d times (snapshot rev %d, put rev %d)",
				round, inSnap, updates, ws.SnapshotRevision, put.Revision)
		}
		if inSnap == 1 && ws.SnapshotRevision < put.Revision || inSnap == 0 && ws.SnapshotRevision >= put.Revision {
			t.Fatalf("round %d: snapshot revision %d disagrees with put revision %d", round, ws.SnapshotRevision, put.Revision)
		}
		if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: id}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchMessageJSONMatchesWire(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	_, ch := watchT(t, s, admin, "w-1", "service/tx", "")
	e := mustPut(t, s, admin, putLease("service/tx", "a.b_c-d"))
	m := recv(t, ch)
	var got wire.WatchUpdate
	if err := wire.Decode(m.JSON(), &got); err != nil {
		t.Fatal(err)
	}
	want := m.Update()
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) || got.Entry.Revision != e.Revision {
		t.Fatalf("encoded %s, want %s", gotJSON, wantJSON)
	}
}

func TestUnwatchStopsDelivery(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	_, ch := watchT(t, s, admin, "w", "service/tx", "")
	if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "w"}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, admin, putLease("service/tx", "k"))
	// A second watch that sees the put proves the fan-out for it has happened.
	_, ch2 := watchT(t, s, admin, "w2", "service/tx", "")
	mustPut(t, s, admin, putLease("service/tx", "k"))
	recv(t, ch2)
	noMessage(t, ch)
	if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "w"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("second unwatch: %v", err)
	}
}

func TestSnapshotSizeIsTheEncodedReply(t *testing.T) {
	for n := range 4 {
		ws := &wire.WatchState{WatchID: "w", Namespace: "service/x", KeyPrefix: "a/", SnapshotRevision: 7, Entries: []wire.Entry{}}
		for i := range n {
			ws.Entries = append(ws.Entries, wire.Entry{Namespace: "service/x", Key: fmt.Sprintf("a/%d", i), Schema: "keeppeek.lease.v1",
				Owner: "coordinator", Revision: uint64(i + 1), TTLMs: int64(i * 1000), ExpiresAtMs: int64(i * 5000), Document: json.RawMessage(`{"holder":"w","claimed_at_ms":1}`)})
		}
		for _, id := range []int64{0, 7, 123456, wire.MaxSafeInteger} {
			b, _ := json.Marshal(wire.Result{RequestID: id, OK: true, Watch: ws})
			if got := snapshotSize(id, ws); got != int64(len(b)) {
				t.Fatalf("%d entries, request %d: snapshotSize %d, encoded reply %d bytes", n, id, got, len(b))
			}
		}
	}
}

// The snapshot bytes bound applies to the reply as sent, with the request's own request_id: a reply
// of exactly max_snapshot_bytes is accepted, one byte more is WATCH_TOO_BROAD.
func TestSnapshotBytesBoundIsExact(t *testing.T) {
	fill := func(t *testing.T, s *Store) {
		for i := range 3 {
			mustPut(t, s, admin, putLease("service/x", fmt.Sprintf("a/%d", i)))
		}
	}
	probe, _ := openT(t, DefaultOptions())
	fill(t, probe)
	sink, _ := chanSink(8)
	ws, err := probe.Watch(ctxT(t), admin, wire.WatchRequest{RequestID: 1, WatchID: "w", Namespace: "service/x"}, sink)
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := json.Marshal(wire.Result{RequestID: 1, OK: true, Watch: ws})
	for _, tc := range []struct {
		bound int64
		code  wire.Code
	}{{int64(len(reply)), ""}, {int64(len(reply)) - 1, wire.CodeWatchTooBroad}} {
		opts := DefaultOptions()
		opts.Bounds.MaxSnapshotBytes = tc.bound
		s, _ := openT(t, opts)
		fill(t, s)
		sink, _ := chanSink(8)
		ws, err := s.Watch(ctxT(t), admin, wire.WatchRequest{RequestID: 1, WatchID: "w", Namespace: "service/x"}, sink)
		if tc.code == "" {
			if err != nil || len(ws.Entries) != 3 {
				t.Fatalf("bound %d (the reply's size): %v", tc.bound, err)
			}
			continue
		}
		wantCode(t, err, tc.code)
		if s.Stats().Watches != 0 {
			t.Fatalf("bound %d: a rejected watch was registered", tc.bound)
		}
	}
}

// DropWatch removes the registration it names, and only that one: a watch re-registered under the same
// id after the ref was taken is left alone.
func TestDropWatchNamesOneRegistration(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	_, ch := watchT(t, s, admin, "w", "service/tx", "")
	refs := s.LiveWatches()
	if len(refs) != 1 || refs[0].Principal != admin.ID || refs[0].WatchID != "w" {
		t.Fatalf("LiveWatches = %+v", refs)
	}
	old := refs[0]
	if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "w"}); err != nil {
		t.Fatal(err)
	}
	_, ch2 := watchT(t, s, admin, "w", "service/tx", "")
	if s.DropWatch(old) {
		t.Fatal("a stale ref dropped the new registration")
	}
	mustPut(t, s, admin, putLease("service/tx", "k"))
	if m := recv(t, ch2); m.Event == nil || m.Sequence != 1 {
		t.Fatalf("new registration got %+v", m)
	}
	noMessage(t, ch)

	cur := s.LiveWatches()
	if len(cur) != 1 || cur[0] == old {
		t.Fatalf("LiveWatches after re-registration = %+v (old %+v)", cur, old)
	}
	if !s.DropWatch(cur[0]) {
		t.Fatal("DropWatch of the live registration reported false")
	}
	if s.DropWatch(cur[0]) {
		t.Fatal("a second DropWatch reported true")
	}
	if n := len(s.LiveWatches()); n != 0 {
		t.Fatalf("%d watches live after DropWatch", n)
	}
	// The slot is free again, and nothing more reaches the dropped watch, not even a close.
	mustPut(t, s, admin, putLease("service/tx", "k"))
	_, ch3 := watchT(t, s, admin, "w", "service/tx", "")
	mustPut(t, s, admin, putLease("service/tx", "k"))
	recv(t, ch3)
	select {
	case m := <-ch2:
		t.Fatalf("dropped watch got %+v", m)
	default:
	}
}

// A commit's updates go out one principal's watches after another, in (principal, watch id) order,
// whatever the order the watches were opened in, so a transport sends each connection's messages
// together. A watch closed with OVERFLOW on the way does not cost a later watch its update.
func TestFanoutOrderGroupsPrincipals(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxPendingUpdates = 2
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	p := func(id string) policy.Principal { return policy.Principal{ID: id, Admin: true} }
	var mu sync.Mutex
	var got []string
	open := []struct{ principal, id string }{
		{"p-b", "w2"}, {"p-a", "w9"}, {"p-c", "w1"}, {"p-a", "w10"}, {"p-b", "w1"}, {"p-a", "a-slow"},
	}
	for _, o := range open {
		sink := func(m Message) {
			mu.Lock()
			defer mu.Unlock()
			if m.Closed != nil {
				got = append(got, o.principal+"/"+o.id+":"+string(m.Closed.Reason))
				return
			}
			got = append(got, fmt.Sprintf("%s/%s:%d", o.principal, o.id, m.Sequence))
		}
		if _, err := s.Watch(ctx, p(o.principal), wire.WatchRequest{WatchID: o.id, Namespace: ns}, sink); err != nil {
			t.Fatal(err)
		}
	}
	ackAll := func(seq int64) {
		for _, o := range open {
			if o.id == "a-slow" {
				continue // never acknowledges: it overflows on the third update
			}
			if err := s.Ack(ctx, p(o.principal), wire.AckRequest{WatchID: o.id, AppliedSequence: i64(seq)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for seq := int64(1); seq <= 3; seq++ {
		mu.Lock()
		got = nil
		mu.Unlock()
		mustPut(t, s, admin, putLease(ns, "k"))
		mu.Lock()
		round := strings.Join(got, " ")
		mu.Unlock()
		want := fmt.Sprintf("p-a/a-slow:%d p-a/w10:%d p-a/w9:%d p-b/w1:%d p-b/w2:%d p-c/w1:%d", seq, seq, seq, seq, seq, seq)
		if seq == 3 {
			want = "p-a/w10:3 p-a/w9:3 p-b/w1:3 p-b/w2:3 p-c/w1:3 p-a/a-slow:OVERFLOW"
		}
		if round != want {
			t.Fatalf("update %d went out as\n  %s\nwant\n  %s", seq, round, want)
		}
		ackAll(seq)
	}
	// The overflowed watch is gone from the order; the others keep it.
	if err := s.Unwatch(ctx, p("p-b"), wire.UnwatchRequest{WatchID: "w1"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got = nil
	mu.Unlock()
	mustPut(t, s, admin, putLease(ns, "k"))
	mu.Lock()
	defer mu.Unlock()
	if round := strings.Join(got, " "); round != "p-a/w10:4 p-a/w9:4 p-b/w2:4 p-c/w1:4" {
		t.Fatalf("after an unwatch the update went out as %s", round)
	}
}

// A watch snapshot is a read served from memory: a disk that refuses commits does not stop it, even in
// a namespace whose due lease it cannot expire first. The snapshot leaves the lease out, and its EXPIRE
// reaches the watch once the disk takes commits again.
func TestWatchSnapshotWhileTheDiskRefusesCommits(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	const ns = "service/tx"
	lease := mustPut(t, s, admin, ttlPut(ns, "lease", 60_000))
	keep := mustPut(t, s, admin, putLease(ns, "keep"))
	rb := refuseCommits(s)
	clk.advance(61 * time.Second) // the lease is due; its expiry cannot commit
	if _, err := s.Put(ctxT(t), admin, putLease(ns, "refused")); !errors.Is(err, wire.ErrStorage) {
		t.Fatalf("a put on the refusing disk: %v, want STORAGE", err)
	}
	ws, ch := watchT(t, s, admin, "w", ns, "")
	if ws.SnapshotRevision != keep.Revision || len(ws.Entries) != 1 || ws.Entries[0].Key != "keep" {
		t.Fatalf("snapshot %+v, want revision %d with keep only", ws, keep.Revision)
	}
	rb.setFail(false)
	m := recv(t, ch)
	if m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Key != "lease" || m.Sequence != 1 || m.Event.Revision != lease.Revision+2 {
		t.Fatalf("first update %+v, want the lease's EXPIRE at revision %d", m, lease.Revision+2)
	}
}

// CloseWatchRef closes the registration Register made, and only that one: once the client has
// unwatched it and watched the id again, the new registration is left alone (a transport that could
// not deliver the first one's snapshot closes it SNAPSHOT_FAILED).
func TestCloseWatchRefNamesOneRegistration(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	sink, ch := chanSink(8)
	_, old, err := s.Register(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if refs := s.LiveWatches(); len(refs) != 1 || refs[0] != old {
		t.Fatalf("LiveWatches = %+v, Register returned %+v", refs, old)
	}
	if err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "w"}); err != nil {
		t.Fatal(err)
	}
	sink2, ch2 := chanSink(8)
	_, cur, err := s.Register(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink2)
	if err != nil {
		t.Fatal(err)
	}
	if s.CloseWatchRef(old, wire.CloseSnapshotFailed, "test") {
		t.Fatal("the first registration's ref closed the second")
	}
	mustPut(t, s, admin, putLease("service/tx", "k"))
	if m := recv(t, ch2); m.Event == nil || m.Sequence != 1 {
		t.Fatalf("the second registration got %+v", m)
	}
	noMessage(t, ch)
	if !s.CloseWatchRef(cur, wire.CloseSnapshotFailed, "test") {
		t.Fatal("CloseWatchRef of the live registration reported false")
	}
	if m := recv(t, ch2); m.Closed == nil || m.Closed.Reason != wire.CloseSnapshotFailed {
		t.Fatalf("the second registration got %+v, want its SNAPSHOT_FAILED close", m)
	}
	if s.CloseWatchRef(cur, wire.CloseSnapshotFailed, "test") || len(s.LiveWatches()) != 0 {
		t.Fatal("a closed registration was closed again, or is still live")
	}
}
