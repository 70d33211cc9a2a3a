package store

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// An in-process caller that passes a principal whose id is not a principal id (SPEC section 1) is
// refused, admin or not, and nothing is written: the owner of an entry (and the principal of its audit
// record) is always a valid id, so the database it writes always opens again (SPEC section 10).
func TestInvalidPrincipalWritesNothing(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	mustPut(t, s, admin, putLease(ns, "kept"))
	sink, _ := chanSink(4)
	for _, p := range []policy.Principal{{ID: "Bad.Admin", Admin: true}, {ID: "", Admin: true}, {ID: "a b", Admin: true}} {
		_, perr := s.Put(ctx, p, putLease(ns, "k"))
		_, derr := s.Delete(ctx, p, wire.DeleteRequest{Namespace: ns, Key: "kept"})
		_, gerr := s.Get(ctx, p, wire.GetRequest{Namespace: ns, Key: "kept"})
		_, lerr := s.List(ctx, p, wire.ListRequest{Namespace: ns})
		_, werr := s.Watch(ctx, p, wire.WatchRequest{WatchID: "w", Namespace: ns}, sink)
		for _, err := range []error{perr, derr, gerr, lerr, werr} {
			if !errors.Is(err, wire.ErrPermissionDenied) {
				t.Fatalf("principal %q: got %v, want PERMISSION_DENIED", p.ID, err)
			}
		}
	}
	if r := nsRevision(t, s, ns); r != 1 {
		t.Fatalf("namespace revision %d after refused writes, want 1", r)
	}
	s.Close()
	s2 := openAt(t, path, DefaultOptions()) // fails the test if the store opens unavailable
	if _, err := s2.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: "kept"}); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

// A document that is not UTF-8 is not JSON (RFC 8259, section 8.1): a put of one is INVALID_ARGUMENT
// and changes nothing, so no watcher is ever handed bytes a strict JSON decoder refuses.
func TestPutRefusesDocumentNotUTF8(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	const ns = "service/tx"
	_, ch := watchT(t, s, admin, "w", ns, "")
	for _, doc := range []string{
		"{\"holder\":\"w1\",\"claimed_at_ms\":1,\"purpose\":\"a\xffb\"}",
		"{\"holder\":\"w1\",\"claimed_at_ms\":1,\"purpose\":\"\xed\xa0\x80\"}", // an encoded surrogate
	} {
		req := putLease(ns, "k")
		req.Document = []byte(doc)
		_, err := s.Put(ctxT(t), admin, req)
		wantCode(t, err, wire.CodeInvalidArgument)
	}
	if r := nsRevision(t, s, ns); r != 0 {
		t.Fatalf("namespace revision %d after refused puts, want 0", r)
	}
	noMessage(t, ch)
	req := putLease(ns, "k")
	req.Document = []byte(`{"holder":"w1","claimed_at_ms":1,"purpose":"é 日本 \ud800"}`) // escapes are JSON
	mustPut(t, s, admin, req)
}

// Open validates the identifiers of a settings-backed namespace's entries as it validates the
// database's (SPEC section 10): an entry whose owner is not a principal id, written into the file by
// hand, leaves the store unavailable with the reason instead of being served.
func TestSettingsEntryWithInvalidOwnerIsNotServed(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: TOMLSettings(cfg, ns)}
	s, path := openT(t, opts)
	mustPut(t, s, alice, wire.PutRequest{Namespace: ns, Key: "prefs", Schema: "keeppeek.preference.v1", Document: []byte(`{"kind":"ui"}`)})
	s.Close()

	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil {
		t.Fatal(err)
	}
	st.Entries[0].Owner = "Ops Team"
	if err := TOMLSettings(cfg, ns).Save(st); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if r := s2.Unavailable(); r == nil || !strings.Contains(r.Error(), "owner") {
		t.Fatalf("store with an invalid settings owner: unavailable = %v, want the owner named", r)
	}
}

// A store with no disk has nothing to back up: Backup answers UNAVAILABLE, as the backend says, not
// STORAGE (which would claim a disk refused a commit).
func TestBackupOfInMemoryStoreIsUnavailable(t *testing.T) {
	opts := DefaultOptions()
	opts.InMemory = true
	s, _ := openT(t, opts)
	var buf bytes.Buffer
	_, err := s.Backup(ctxT(t), admin, &buf)
	wantCode(t, err, wire.CodeUnavailable)
}
