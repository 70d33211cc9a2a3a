package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// A commit that fails answers STORAGE only to the mutations that passed their checks, or that failed
// them only against changes of the same batch (which never committed). A mutation that fails its
// checks against the committed state keeps its own error (SPEC section 5: the first failing check
// answers), with current_revision. The commit here fails because a settings-backed namespace's file
// refuses the write: that namespace's mutations fail, and the rest of the batch commits without them.
func TestFailedCommitKeepsCheckErrors(t *testing.T) {
	const settingsNS = "user/alice"
	fs := &failingSettings{SettingsBackend: TOMLSettings(filepath.Join(t.TempDir(), "stated.toml"), settingsNS)}
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{settingsNS: fs}
	s, _ := openT(t, opts)
	mustPut(t, s, alice, settingsPref(settingsNS, "k")) // revision 1
	fs.fail = true

	pref, lease := []byte(`{"kind":"ui"}`), []byte(`{"holder":"w","claimed_at_ms":1}`)
	mk := func(ns, key string, expected *int64) *mutation {
		schema, doc := "keeppeek.preference.v1", pref
		if ns != settingsNS {
			schema, doc = "keeppeek.lease.v1", lease
		}
		return &mutation{kind: mutPut, principal: "alice", ns: ns, key: key, schema: schema,
			doc: doc, digest: documentDigest(doc), expected: expected, done: make(chan mutResult, 1)}
	}
	zero, wrong := int64(0), int64(99)
	muts := []*mutation{
		mk(settingsNS, "prefs", nil),    // its settings file refuses the write: the commit fails
		mk(settingsNS, "k", &wrong),     // CONFLICT against the committed state
		mk("service/tx", "other", nil),  // another namespace: committed without the settings writes
		mk(settingsNS, "c", &zero),      // passes its checks: STORAGE
		mk(settingsNS, "c", &zero),      // CONFLICT only against the create above, which never committed
		mk(settingsNS, "k", new(int64)), // create-only on an existing key: CONFLICT against the committed state
	}
	s.commitMu.Lock()
	_ = s.runBatch(muts)
	s.commitMu.Unlock()
	want := []wire.Code{wire.CodeStorage, wire.CodeConflict, "", wire.CodeStorage, wire.CodeStorage, wire.CodeConflict}
	for i, m := range muts {
		r := <-m.done
		if want[i] == "" {
			if r.err != nil || r.entry == nil || r.entry.Revision != 1 {
				t.Fatalf("mutation %d answered %+v, want it committed at revision 1", i, r)
			}
			continue
		}
		var we *wire.Error
		if !errors.As(r.err, &we) || we.Code != want[i] {
			t.Fatalf("mutation %d answered %v, want %s", i, r.err, want[i])
		}
		if we.Code == wire.CodeConflict && (we.CurrentRevision == nil || *we.CurrentRevision != 1) {
			t.Fatalf("mutation %d: CONFLICT without the committed current_revision 1: %+v", i, we)
		}
	}
	if r := nsRevision(t, s, settingsNS); r != 1 {
		t.Fatalf("a failed commit moved the revision to %d", r)
	}
	_, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: settingsNS, Key: "c"})
	wantCode(t, err, wire.CodeNotFound)
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "other"}); err != nil {
		t.Fatalf("the write of another namespace: %v", err)
	}
}

// A put whose context has already ended is not queued; one whose answer is there when the context
// ends returns the answer. So an error never hides a committed write whose result was known.
func TestEndedContextNeverHidesACommit(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		req := putLease("service/tx", "k")
		_, err := s.Put(ctx, admin, req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("put %d with an ended context: %v", i, err)
		}
	}
	if r := nsRevision(t, s, "service/tx"); r != 0 {
		t.Fatalf("puts refused for their ended context moved the revision to %d", r)
	}
	// An answer that is there when the context ends wins over the context's error.
	for i := range 100 {
		m := &mutation{done: make(chan mutResult, 1)}
		m.done <- mutResult{revision: 7}
		if r := m.wait(ctx); r.err != nil || r.revision != 7 {
			t.Fatalf("wait %d with the answer ready and the context ended: %+v", i, r)
		}
	}
}

// A watch racing Close either gets SHUTDOWN or is refused: once the registry is shut, nothing
// registers (a registration after the close messages would never get one).
func TestNoWatchRegistersAfterShutdown(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	s.watches.shutdown(wire.CloseShutdown, "stopping")
	sink, _ := chanSink(4)
	_, _, _, err := s.tryWatch(admin, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink, false)
	wantCode(t, err, wire.CodeUnavailable)
	if s.Stats().Watches != 0 {
		t.Fatal("a watch registered after shutdown")
	}
}

// A watch whose caller resolved its principal before a reload is checked against the reloaded
// principals: it cannot register with a permission the reload took away.
func TestWatchAfterReloadUsesTheNewPrincipals(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ops := policy.Principal{ID: "ops", Admin: true}
	s.ReloadPrincipals(func(id string) (policy.Principal, bool) {
		if id == "ops" {
			return policy.Principal{ID: "ops"}, true // demoted
		}
		return policy.Principal{}, false
	})
	sink, ch := chanSink(4)
	_, err := s.Watch(ctxT(t), ops, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink)
	wantCode(t, err, wire.CodePermissionDenied)
	_, err = s.Watch(ctxT(t), admin, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink)
	wantCode(t, err, wire.CodePermissionDenied) // removed by the reload
	if s.Stats().Watches != 0 {
		t.Fatal("a refused watch registered")
	}
	noMessage(t, ch)
}

// A lease that came due in a batch whose commit failed is still due: the next batch expires it (one
// EXPIRE, revision +1), so a failed commit never loses an expiry.
func TestDueLeaseSurvivesAFailedCommit(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, _ := openT(t, opts)
	_, ch := watchT(t, s, admin, "w", "service/tx", "leases/")
	e := mustPut(t, s, admin, ttlPut("service/tx", "leases/a", 60_000)) // the committer's own timer is a minute away
	recv(t, ch)

	rb := refuseCommits(s)
	clk.advance(61 * time.Second) // the lease is due, by the store's clock
	_, err := s.Put(ctxT(t), admin, putLease("service/other", "k"))
	wantCode(t, err, wire.CodeStorage) // its batch held the due expiry too, and failed
	noMessage(t, ch)
	rb.setFail(false)
	// The expiry is retried (the committer goroutine is woken for it at once): one EXPIRE, at the
	// revision after the lease's, whichever batch commits it.
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Revision != e.Revision+1 {
		t.Fatalf("after the failed commit: %+v", m)
	}
	if r := s.submit(ctxT(t), &mutation{kind: mutBarrier}); r.err != nil {
		t.Fatal(r.err)
	}
	noMessage(t, ch)
	if r := nsRevision(t, s, "service/tx"); r != e.Revision+1 {
		t.Fatalf("revision %d after the expiry, want %d", r, e.Revision+1)
	}
}

// refusingBackend refuses every commit while fail is set, as bbolt does when a write of the
// transaction's pages fails (disk full, I/O error): nothing reaches the database.
type refusingBackend struct {
	backend
	mu   sync.Mutex
	fail bool
}

// refuseCommits puts a refusingBackend, failing, in front of s's backend. It swaps it in between
// commits, as every commit reads the backend under commitMu.
func refuseCommits(s *Store) *refusingBackend {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	rb := &refusingBackend{backend: s.be, fail: true}
	s.be = rb
	return rb
}

func (r *refusingBackend) setFail(fail bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = fail
}

func (r *refusingBackend) commit(bt *batch) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail {
		return errors.New("write state-store.db: input/output error")
	}
	return r.backend.commit(bt)
}

// landedButFailed commits each batch, then reports the failure bbolt reports when the sync of its meta
// page fails: the batch is in the database, the commit said it was not.
type landedButFailed struct {
	backend
	fail bool
}

func (l *landedButFailed) commit(bt *batch) error {
	if err := l.backend.commit(bt); err != nil || !l.fail {
		return err
	}
	return fmt.Errorf("%w: sync: input/output error", errCommitUncertain)
}

// A commit that failed after it may have reached the database stops the store: neither STORAGE
// (nothing changed) nor OK is known to be true, and committing on top of a database memory may not
// reflect could leave it inconsistent. Every call then answers UNAVAILABLE, watches close, and a
// restart reloads what the database holds.
func TestUncertainCommitStopsTheStore(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	ctx := ctxT(t)
	mustPut(t, s, admin, putLease("service/tx", "a"))
	_, ch := watchT(t, s, admin, "w", "service/tx", "")
	lb := &landedButFailed{backend: s.be, fail: true}
	s.be = lb
	select {
	case <-s.Halted():
		t.Fatal("Halted closed before any commit failed")
	default:
	}
	_, err := s.Put(ctx, admin, putLease("service/tx", "b"))
	wantCode(t, err, wire.CodeUnavailable)
	wantClosed(t, ch, wire.CloseShutdown)
	select {
	case <-s.Halted():
	default:
		t.Fatal("Halted not closed once the store stopped serving")
	}
	lb.fail = false
	_, err = s.Put(ctx, admin, putLease("service/tx", "c"))
	wantCode(t, err, wire.CodeUnavailable)
	_, err = s.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "a"})
	wantCode(t, err, wire.CodeUnavailable)
	if s.Unavailable() == nil || strings.Contains(strings.Join(s.Info().Features, ","), wire.FeatureStateStore) {
		t.Fatalf("a stopped store: reason %v, features %v", s.Unavailable(), s.Info().Features)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, path, DefaultOptions())
	if s2.Unavailable() != nil {
		t.Fatalf("reopened: %v", s2.Unavailable())
	}
	if _, err := s2.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "b"}); err != nil {
		t.Fatalf("the write that landed: %v", err)
	}
	if _, err := s2.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "c"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("a write after the stop: %v", err)
	}
	if r := nsRevision(t, s2, "service/tx"); r != 2 {
		t.Fatalf("revision %d after reopen, want 2", r)
	}
}
