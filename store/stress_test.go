package store

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// committed is one change as the audit log records it: the authority the stress tests check every
// answer and every watch update against.
type committed struct {
	op       string // put, delete, expire
	key      string
	revision uint64
	digest   string
}

// auditHistory returns every namespace's committed changes in commit order, and checks that each
// namespace's revisions run 1, 2, 3, ... in that order (SPEC section 4: every committed mutation
// advances the revision by exactly 1, in commit order).
func auditHistory(t *testing.T, s *Store) map[string][]committed {
	t.Helper()
	out := map[string][]committed{}
	_, _, err := s.be.scanAudit(func(_ auditCheckpoint, rec *auditRecord, raw []byte) error {
		if rec == nil {
			return fmt.Errorf("audit record does not decode: %s", raw)
		}
		h := out[rec.Namespace]
		if want := uint64(len(h)) + 1; rec.Revision != want {
			return fmt.Errorf("audit seq %d: %s revision %d, want %d (commit order is revision order)", rec.Seq, rec.Namespace, rec.Revision, want)
		}
		out[rec.Namespace] = append(h, committed{op: rec.Op, key: rec.Key, revision: rec.Revision, digest: rec.DocumentSHA256})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stateAt replays h up to revision rev: key -> the change that put it.
func stateAt(h []committed, rev uint64) map[string]committed {
	st := map[string]committed{}
	for _, c := range h[:rev] {
		if c.op == "put" {
			st[c.key] = c
		} else {
			delete(st, c.key)
		}
	}
	return st
}

// watchSession is what one watch registration received.
type watchSession struct {
	ns, prefix string
	snapshot   *wire.WatchState
	updates    []Message
	closed     *wire.WatchClosed
}

// answer is one write the store answered ok.
type answer struct {
	ns, key  string
	op       string
	revision uint64
	digest   string
}

// Writers, lease expiries, watches that ack, lag, overflow and unwatch all run at once over a store
// that commits at most three mutations per batch, so leaders, the committer goroutine and its take
// loop all commit. Every ok answer must be in the audit log at its revision, and every put and delete
// in the log must have had its ok answer (nothing committed twice, nothing answered and lost); every
// watch must see exactly the log's changes of its prefix after its snapshot, in order, with
// contiguous sequences, and its snapshot must be the log's state at snapshot_revision.
func TestStressCommitsAnswersAndWatches(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	opts.MaxBatch = 3
	opts.Bounds.MaxPendingUpdates = 8
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	namespaces := []string{"service/a", "service/b"}
	keys := []string{"k0", "k1", "k2", "k3", "l0", "l1"}
	const writers, opsPerWriter = 4, 150

	var (
		answersMu sync.Mutex
		answers   []answer
	)
	var writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range opsPerWriter {
				ns := namespaces[rng.IntN(len(namespaces))]
				key := keys[rng.IntN(len(keys))]
				doc := leaseDoc(fmt.Sprintf("w%d-%d", w, i))
				req := wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1", Document: doc}
				var del *wire.DeleteRequest
				switch rng.IntN(8) {
				case 0, 1: // blind put
				case 2: // a lease
					req.TTLMs = i64(1000 + rng.Int64N(2000))
				case 3: // compare-and-set on what a read saw
					if e, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: key}); err == nil {
						req.ExpectedRevision = i64(int64(e.Revision))
					} else {
						req.ExpectedRevision = i64(0)
					}
				case 4: // create only
					req.ExpectedRevision = i64(0)
				case 5: // fenced by another key's revision
					other := keys[(rng.IntN(len(keys)-1)+1+indexOf(keys, key))%len(keys)]
					if e, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: other}); err == nil {
						req.Guard = &wire.Guard{Key: other, Revision: int64(e.Revision)}
					}
				case 6:
					del = &wire.DeleteRequest{Namespace: ns, Key: key}
				case 7: // time passes: leases come due, the next batch expires them first
					clk.advance(time.Duration(300+rng.IntN(900)) * time.Millisecond)
					continue
				}
				if del != nil {
					rev, err := s.Delete(ctx, admin, *del)
					if err == nil {
						answersMu.Lock()
						answers = append(answers, answer{ns: ns, key: key, op: "delete", revision: rev})
						answersMu.Unlock()
					} else if c := wire.CodeOf(err); c != wire.CodeNotFound {
						t.Errorf("Delete %s:%s: %v", ns, key, err)
					}
					continue
				}
				e, err := s.Put(ctx, admin, req)
				if err == nil {
					answersMu.Lock()
					answers = append(answers, answer{ns: ns, key: key, op: "put", revision: e.Revision, digest: documentDigest(e.Document)})
					answersMu.Unlock()
				} else if c := wire.CodeOf(err); c != wire.CodeConflict && c != wire.CodeGuardFailed {
					t.Errorf("Put %s:%s: %v", ns, key, err)
				}
			}
		})
	}

	// Watchers: each opens watches one after another; it acks most updates, sometimes lags until the
	// watch overflows, sometimes unwatches. After the writers stop, each keeps one last watch that acks
	// everything, and reads it to the end of the log.
	var (
		sessionsMu sync.Mutex
		sessions   []*watchSession
	)
	var stopWatching atomic.Bool
	var watching sync.WaitGroup
	finals := make([]*watchSession, 3)
	finalChans := make([]chan Message, len(finals))
	for wi := range finals {
		watching.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(wi), 11))
			prefixes := []string{"", "k", "k1", "l"}
			for n := 0; ; n++ {
				final := stopWatching.Load()
				ns := namespaces[rng.IntN(len(namespaces))]
				sess := &watchSession{ns: ns, prefix: prefixes[rng.IntN(len(prefixes))]}
				id := fmt.Sprintf("w%d-%d", wi, n)
				var gone atomic.Bool // set once Unwatch returned: no message may follow
				ch := make(chan Message, opts.Bounds.MaxPendingUpdates+1)
				sink := func(m Message) {
					if gone.Load() {
						t.Errorf("watch %s: a message after Unwatch returned: %+v", id, m)
						return
					}
					ch <- m
				}
				ws, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: sess.prefix}, sink)
				if err != nil {
					t.Errorf("Watch %s: %v", id, err)
					return
				}
				sess.snapshot = ws
				sessionsMu.Lock()
				sessions = append(sessions, sess)
				sessionsMu.Unlock()
				if final {
					finals[wi], finalChans[wi] = sess, ch
					return
				}
				lag := rng.IntN(4) == 0
				ackRefused := false
				budget := 1 + rng.IntN(20)
			read:
				for budget > 0 {
					select {
					case m := <-ch:
						if m.Closed != nil {
							sess.closed = m.Closed
							break read
						}
						sess.updates = append(sess.updates, m)
						budget--
						if !lag {
							if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: id, AppliedSequence: i64(int64(m.Sequence))}); err != nil {
								// A watcher that acks can still fall more than max_pending_updates
								// behind while it is not scheduled (one CPU, a loaded machine): the
								// store closed the watch (OVERFLOW), and the close message waits in
								// the channel behind the updates. Read on to it.
								if wire.CodeOf(err) != wire.CodeNotFound {
									t.Errorf("Ack %s %d: %v", id, m.Sequence, err)
									return
								}
								lag, ackRefused = true, true
							}
						}
					case <-time.After(20 * time.Millisecond):
						if stopWatching.Load() {
							break read
						}
					}
				}
				if sess.closed == nil {
					err := s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: id})
					gone.Store(true)
					if err != nil {
						// Closed (OVERFLOW) after the last read: the close is in the channel.
						codeIs(t, err, wire.CodeNotFound)
					}
					for len(ch) > 0 {
						m := <-ch
						if m.Closed != nil {
							sess.closed = m.Closed
						} else {
							sess.updates = append(sess.updates, m)
						}
					}
					if err != nil && (sess.closed == nil || sess.closed.Reason != wire.CloseOverflow) {
						t.Errorf("watch %s: Unwatch NOT_FOUND without an OVERFLOW close (%+v)", id, sess.closed)
					}
				}
				if ackRefused && (sess.closed == nil || sess.closed.Reason != wire.CloseOverflow) {
					t.Errorf("watch %s: Ack NOT_FOUND without an OVERFLOW close (%+v)", id, sess.closed)
				}
			}
		})
	}
	writing.Wait()
	stopWatching.Store(true)
	watching.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Every due lease expires; then the final watches read to the end of the log.
	clk.advance(4 * time.Second)
	if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	hist := auditHistory(t, s)
	for i, sess := range finals {
		want := 0
		for _, c := range hist[sess.ns][sess.snapshot.SnapshotRevision:] {
			if strings.HasPrefix(c.key, sess.prefix) {
				want++
			}
		}
		for len(sess.updates) < want {
			m := recv(t, finalChans[i])
			if m.Closed != nil {
				t.Fatalf("final watch %s closed: %+v", sess.snapshot.WatchID, m.Closed)
			}
			sess.updates = append(sess.updates, m)
			if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: sess.snapshot.WatchID, AppliedSequence: i64(int64(m.Sequence))}); err != nil {
				t.Fatal(err)
			}
		}
		noMessage(t, finalChans[i])
	}

	// Answers against the log: each ok answer is the log's change at its revision, and each put or
	// delete in the log had exactly one ok answer.
	answered := map[string]bool{}
	for _, a := range answers {
		h := hist[a.ns]
		if a.revision < 1 || a.revision > uint64(len(h)) {
			t.Fatalf("answer %+v: revision outside the log (%d changes)", a, len(h))
		}
		c := h[a.revision-1]
		if c.op != a.op || c.key != a.key || c.digest != a.digest {
			t.Fatalf("answer %+v, but the log has %+v at that revision", a, c)
		}
		id := fmt.Sprintf("%s@%d", a.ns, a.revision)
		if answered[id] {
			t.Fatalf("two ok answers for %s", id)
		}
		answered[id] = true
	}
	expiries := 0
	for ns, h := range hist {
		for _, c := range h {
			if c.op == "expire" {
				expiries++
				continue
			}
			if !answered[fmt.Sprintf("%s@%d", ns, c.revision)] {
				t.Fatalf("%s revision %d (%+v) committed without an ok answer", ns, c.revision, c)
			}
		}
	}
	// Memory is the log replayed.
	for _, ns := range namespaces {
		l, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		want := stateAt(hist[ns], uint64(len(hist[ns])))
		if l.Revision != uint64(len(hist[ns])) || len(l.Entries) != len(want) {
			t.Fatalf("%s in memory: revision %d, %d entries; the log: %d changes, %d live", ns, l.Revision, len(l.Entries), len(hist[ns]), len(want))
		}
		for _, e := range l.Entries {
			if c := want[e.Key]; c.revision != e.Revision || c.digest != documentDigest(e.Document) {
				t.Fatalf("%s:%s in memory at revision %d, the log has %+v", ns, e.Key, e.Revision, c)
			}
		}
	}

	// Watches against the log.
	closes := map[wire.CloseReason]int{}
	for _, sess := range sessions {
		checkSession(t, sess, hist[sess.ns])
		if sess.closed != nil {
			closes[sess.closed.Reason]++
		}
	}
	t.Logf("%d answers, %d expiries, %d watches, closes %v", len(answers), expiries, len(sessions), closes)
	if expiries == 0 || closes[wire.CloseOverflow] == 0 {
		t.Fatalf("the run exercised too little: %d expiries, closes %v", expiries, closes)
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// checkSession checks one watch registration against its namespace's log h: the snapshot is the
// state at snapshot_revision (an entry left out only if its lease had come due, the log expiring it
// next), and the updates are, in order and with sequences 1, 2, 3, ..., exactly the log's changes of
// the prefix after the snapshot, up to the last update received.
func checkSession(t *testing.T, sess *watchSession, h []committed) {
	t.Helper()
	ws := sess.snapshot
	if ws.SnapshotRevision > uint64(len(h)) {
		t.Fatalf("watch %s: snapshot revision %d past the log's %d", ws.WatchID, ws.SnapshotRevision, len(h))
	}
	want := stateAt(h, ws.SnapshotRevision)
	seen := map[string]bool{}
	for _, e := range ws.Entries {
		c, ok := want[e.Key]
		if !ok || c.revision != e.Revision || c.digest != documentDigest(e.Document) || !strings.HasPrefix(e.Key, sess.prefix) {
			t.Fatalf("watch %s: snapshot at %d holds %s at revision %d; the log has %+v", ws.WatchID, ws.SnapshotRevision, e.Key, e.Revision, c)
		}
		seen[e.Key] = true
	}
	for key := range want {
		if seen[key] || !strings.HasPrefix(key, sess.prefix) {
			continue
		}
		expiredNext := false
		for _, c := range h[ws.SnapshotRevision:] {
			if c.key == key {
				expiredNext = c.op == "expire"
				break
			}
		}
		if !expiredNext {
			t.Fatalf("watch %s: snapshot at %d misses %s", ws.WatchID, ws.SnapshotRevision, key)
		}
	}
	next := ws.SnapshotRevision // changes of h up to next are accounted for
	for i, m := range sess.updates {
		if m.Sequence != uint64(i)+1 {
			t.Fatalf("watch %s: update %d has sequence %d", ws.WatchID, i+1, m.Sequence)
		}
		for next < uint64(len(h)) && !strings.HasPrefix(h[next].key, sess.prefix) {
			next++
		}
		if next >= uint64(len(h)) {
			t.Fatalf("watch %s: update %+v past the log's end", ws.WatchID, m.Event)
		}
		c := h[next]
		next++
		ev := m.Event
		wantKind := map[string]wire.UpdateKind{"put": wire.UpdatePut, "delete": wire.UpdateDelete, "expire": wire.UpdateExpire}[c.op]
		if ev.Revision != c.revision || ev.Key != c.key || ev.Kind != wantKind {
			t.Fatalf("watch %s: update %d is %s %s at %d; the log's next change of the prefix is %+v", ws.WatchID, m.Sequence, ev.Kind, ev.Key, ev.Revision, c)
		}
		if c.op == "put" && (ev.Entry == nil || documentDigest(ev.Entry.Document) != c.digest || ev.Entry.Revision != c.revision) {
			t.Fatalf("watch %s: update %d carries %+v; the log has %+v", ws.WatchID, m.Sequence, ev.Entry, c)
		}
	}
	if sess.closed != nil && sess.closed.WatchID != ws.WatchID {
		t.Fatalf("watch %s closed as %s", ws.WatchID, sess.closed.WatchID)
	}
}

// Close racing writers and watches, many rounds: every call returns (ok or UNAVAILABLE), every ok put
// is in the database when it opens again, and every watch that registered gets exactly one SHUTDOWN
// close and nothing after it.
func TestStressCloseRacingWritesAndWatches(t *testing.T) {
	path := t.TempDir() + "/state-store.db"
	opts := DefaultOptions()
	opts.MaxBatch = 2
	const ns = "service/close"
	acked := map[string]uint64{}
	for round := range 15 {
		s := openAt(t, path, opts)
		ctx := ctxT(t)
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range 4 {
			wg.Go(func() {
				<-start
				for i := 0; ; i++ {
					key := fmt.Sprintf("r%d/w%d/%d", round, w, i)
					e, err := s.Put(ctx, admin, putLease(ns, key))
					if err != nil {
						codeIs(t, err, wire.CodeUnavailable)
						return
					}
					mu.Lock()
					acked[key] = e.Revision
					mu.Unlock()
				}
			})
		}
		type watchLog struct {
			mu        sync.Mutex
			closes    int
			afterEnd  int
			unwatched bool
		}
		var logs []*watchLog
		for w := range 2 {
			wg.Go(func() {
				<-start
				for i := range 200 { // at most 100 left live each: under max_watches_per_principal
					wl := &watchLog{}
					sink := func(m Message) {
						wl.mu.Lock()
						defer wl.mu.Unlock()
						if wl.closes > 0 {
							wl.afterEnd++
						}
						if m.Closed != nil {
							if m.Closed.Reason != wire.CloseShutdown {
								t.Errorf("closed with %s", m.Closed.Reason)
							}
							wl.closes++
						}
					}
					_, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: fmt.Sprintf("w%d-%d", w, i), Namespace: ns, KeyPrefix: fmt.Sprintf("r%d/none", round)}, sink)
					if err != nil {
						codeIs(t, err, wire.CodeUnavailable)
						return
					}
					mu.Lock()
					logs = append(logs, wl)
					mu.Unlock()
					if i%2 == 1 {
						continue // stays live until Close
					}
					// Unwatched: no close message for it, unless Close closed it first.
					err = s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: fmt.Sprintf("w%d-%d", w, i)})
					wl.mu.Lock()
					wl.unwatched = err == nil
					wl.mu.Unlock()
					if err != nil {
						codeIs(t, err, wire.CodeUnavailable)
						return
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(round%5) * time.Millisecond) // vary where Close lands; not a synchronisation
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, wl := range logs {
			if want := map[bool]int{true: 0, false: 1}[wl.unwatched]; wl.closes != want || wl.afterEnd != 0 {
				t.Fatalf("round %d: watch %d (unwatched %v) got %d closes and %d messages after its close", round, i, wl.unwatched, wl.closes, wl.afterEnd)
			}
		}
	}
	s := openAt(t, path, opts)
	for key, rev := range acked {
		e, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: key})
		if err != nil || e.Revision != rev {
			t.Fatalf("acknowledged put %s at %d: after reopen %+v %v", key, rev, e, err)
		}
	}
	if len(acked) == 0 {
		t.Fatal("no put was acknowledged")
	}
}

// Principal reloads racing watches and writes: once a reload that takes a principal's read permission
// away has returned, no update reaches any of its watches (SPEC section 2); each of its watches live at
// the reload gets exactly one close, UNAUTHORIZED; and none registers until a reload gives it back.
func TestStressReloadRacingWatchesAndWrites(t *testing.T) {
	opts := DefaultOptions()
	opts.Bounds.MaxPendingUpdates = wire.MaxPendingUpdatesLimit // no OVERFLOW: the watches never ack
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/reload"
	viewer := policy.Principal{ID: "viewer", Admin: true}
	var demoted atomic.Bool // set after a demoting reload returned, cleared before a promoting one
	lookup := func(admin bool) func(string) (policy.Principal, bool) {
		return func(id string) (policy.Principal, bool) {
			switch id {
			case "viewer":
				return policy.Principal{ID: "viewer", Admin: admin}, true
			case "coordinator":
				return policy.Principal{ID: "coordinator", Admin: true}, true
			}
			return policy.Principal{}, false
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Put(ctx, admin, putLease(ns, fmt.Sprintf("k%d", i%16))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	type viewerWatch struct {
		mu         sync.Mutex
		closes     int
		unwatched  bool
		lateUpdate bool
	}
	var (
		mu      sync.Mutex
		watches []*viewerWatch
	)
	for w := range 3 {
		wg.Go(func() {
			type liveWatch struct {
				id string
				vw *viewerWatch
			}
			var live []liveWatch
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				vw := &viewerWatch{}
				sink := func(m Message) {
					vw.mu.Lock()
					defer vw.mu.Unlock()
					if m.Closed != nil {
						vw.closes++
						if m.Closed.Reason != wire.CloseUnauthorized {
							t.Errorf("closed with %s", m.Closed.Reason)
						}
						return
					}
					if demoted.Load() || vw.closes > 0 {
						vw.lateUpdate = true
					}
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := s.Watch(ctx, viewer, wire.WatchRequest{WatchID: id, Namespace: ns}, sink); err != nil {
					codeIs(t, err, wire.CodePermissionDenied)
					continue
				}
				mu.Lock()
				watches = append(watches, vw)
				mu.Unlock()
				// Keep a few live; unwatch the rest (a closed one answers NOT_FOUND).
				unwatch := func(id string, vw *viewerWatch) {
					err := s.Unwatch(ctx, viewer, wire.UnwatchRequest{WatchID: id})
					if err != nil {
						codeIs(t, err, wire.CodeNotFound)
						return
					}
					vw.mu.Lock()
					vw.unwatched = true
					vw.mu.Unlock()
				}
				if i%2 == 0 {
					unwatch(id, vw)
					continue
				}
				if live = append(live, liveWatch{id, vw}); len(live) > 20 {
					unwatch(live[0].id, live[0].vw)
					live = live[1:]
				}
			}
		})
	}
	for round := range 40 {
		s.ReloadPrincipals(lookup(false))
		demoted.Store(true)
		time.Sleep(time.Millisecond) // let writes and refused watches run while demoted; not a synchronisation
		demoted.Store(false)
		s.ReloadPrincipals(lookup(true))
		time.Sleep(time.Duration(round%3) * time.Millisecond)
	}
	s.ReloadPrincipals(lookup(false))
	demoted.Store(true)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i, vw := range watches {
		vw.mu.Lock()
		if vw.lateUpdate {
			t.Fatalf("watch %d: an update after its principal lost read permission", i)
		}
		if (!vw.unwatched && vw.closes != 1) || vw.closes > 1 {
			t.Fatalf("watch %d (unwatched %v): %d closes", i, vw.unwatched, vw.closes)
		}
		vw.mu.Unlock()
	}
	if len(watches) == 0 {
		t.Fatal("no watch registered")
	}
}

// Close is idempotent and returns only once the store is closed, whoever calls it: a second Close
// racing the first waits for it, so a caller that goes on to open the database again (or restore it)
// never finds it still in use.
func TestCloseReturnsOnlyWhenClosed(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxBatch = 1 // Close drains one commit per queued put: it takes a while
	s, path := openT(t, opts)
	ctx := ctxT(t)
	var writers sync.WaitGroup
	for i := range 200 {
		writers.Go(func() {
			_, err := s.Put(ctx, admin, putLease("service/tx", fmt.Sprintf("k%d", i)))
			if err != nil && wire.CodeOf(err) != wire.CodeUnavailable {
				t.Errorf("Put: %v", err)
			}
		})
	}
	first := make(chan error, 1)
	go func() { first <- s.Close() }()
	for s.Serving() == nil { // the first Close has begun
		time.Sleep(100 * time.Microsecond)
	}
	secondErr := s.Close()
	unlock, _, lockErr := lockForRestore(path)
	if lockErr == nil {
		unlock()
	}
	firstErr := <-first
	writers.Wait()
	if secondErr != nil || firstErr != nil {
		t.Fatal(secondErr, firstErr)
	}
	if lockErr != nil {
		t.Fatalf("a second Close returned while the database was still open: %v", lockErr)
	}
}

// codeIs reports whether err carries code, and fails the test (without stopping it: goroutines call
// it) when it does not.
func codeIs(t testing.TB, err error, code wire.Code) bool {
	t.Helper()
	if got := wire.CodeOf(err); got != code {
		t.Errorf("want %s, got %v", code, err)
		return false
	}
	return true
}
