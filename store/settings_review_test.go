package store

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// A hand edit that adds settings entries to a namespace near revision 2^53-1 is held to the rule a
// put is held to (revisionRoom: revision + entries <= 2^53-1, so that every entry can still be
// removed): a reload that would serve more entries than the revisions left can remove is refused
// (STORAGE, nothing changed), and so is a write to the namespace, which loads the file first. It used
// to be served, leaving entries that no delete could remove (QUOTA_EXCEEDED at 2^53-1).
func TestSettingsReloadKeepsRevisionRoomForRemovals(t *testing.T) {
	const ns = "user/alice"
	const top = wire.MaxSafeInteger
	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	writePrefsByHand(t, cfg, ns, top-4, map[string]handEntry{"a": {top - 4, "ui"}})
	s := openAt(t, path, settingsOpts(cfg, ns))
	if r := nsRevision(t, s, ns); r != top-4 {
		t.Fatalf("namespace at %d, want 2^53-5", r)
	}
	_, ch := watchT(t, s, alice, "w", ns, "")

	// Two entries added: served at 2^53-4 and 2^53-3, three entries would need revisions up to
	// 2^53, one past the last.
	writePrefsByHand(t, cfg, ns, top-4, map[string]handEntry{"a": {top - 4, "ui"}, "b": {1, "tv"}, "c": {1, "radio"}})
	changes, err := s.ReloadSettings(ctxT(t))
	wantCode(t, err, wire.CodeStorage)
	if len(changes) != 0 || !strings.Contains(err.Error(), "2^53-1") {
		t.Fatalf("reload: %+v %v, want it refused for want of revisions", changes, err)
	}
	_, err = s.Put(ctxT(t), alice, prefsPut(ns, "d", "x"))
	wantCode(t, err, wire.CodeStorage)
	if r := nsRevision(t, s, ns); r != top-4 {
		t.Fatalf("namespace at %d after the refused reload, want 2^53-5", r)
	}
	_, err = s.Get(ctxT(t), alice, wire.GetRequest{Namespace: ns, Key: "b"})
	wantCode(t, err, wire.CodeNotFound)

	// One entry added fits: two entries at 2^53-4 can both be removed.
	writePrefsByHand(t, cfg, ns, top-4, map[string]handEntry{"a": {top - 4, "ui"}, "b": {1, "tv"}})
	changes, err = s.ReloadSettings(ctxT(t))
	if err != nil || len(changes) != 1 || changes[0].Revision != top-3 {
		t.Fatalf("reload of one more entry: %+v %v, want b at 2^53-4", changes, err)
	}
	wantUpdate(t, ch, 1, wire.UpdatePut, "b", top-3, `{"kind":"tv"}`)
	for i, key := range []string{"a", "b"} {
		rev, err := s.Delete(ctxT(t), alice, wire.DeleteRequest{Namespace: ns, Key: key})
		if err != nil || rev != top-2+uint64(i) {
			t.Fatalf("delete of %s: %d %v", key, rev, err)
		}
	}
}

// A batch writes two settings namespaces of one file; the second's Save finds its section edited by
// hand since the batch read it, so the first namespace's file, already written, is put back and the
// batch staged again. A hand edit of the first namespace made then (after the put back, before the
// batch writes it again) is kept: it used to be overwritten, without a word, by the second Save of
// that namespace, made over whatever the file held.
func TestSettingsEditAfterAPutBackIsKept(t *testing.T) {
	const nsA, nsB = "user/alice", "user/bob"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "stated.toml")
	writePrefsByHand(t, cfg, nsA, 1, map[string]handEntry{"prefs": {1, "ui"}})
	editSettings(t, cfg, nsB, func(st *SettingsState) {
		st.Revision = 1
		st.Entries = []wire.Entry{{Key: "prefs", Schema: wire.SchemaPreference, Owner: "bob", Revision: 1, CreatedAtMs: 1, UpdatedAtMs: 1, Document: []byte(`{"kind":"ui"}`)}}
	})
	settings, err := TOMLSettingsNamespaces(cfg)
	if err != nil || len(settings) != 2 {
		t.Fatalf("settings namespaces %v %v", settings, err)
	}
	opts := DefaultOptions()
	opts.Settings = settings
	s, _ := openT(t, opts)
	ctx := ctxT(t)

	// The batch's first read is followed by an edit of bob's section (its Save is refused), the read
	// again of bob's by an edit of alice's.
	reads := 0
	afterSettingsRead = func() {
		reads++
		switch reads {
		case 1:
			editSettings(t, cfg, nsB, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"bob-edit"}`) })
		case 2:
			editSettings(t, cfg, nsA, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"alice-edit"}`) })
		}
	}
	t.Cleanup(func() { afterSettingsRead = func() {} })
	s.commitMu.Lock()
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := s.Put(ctx, alice, prefsPut(nsA, "layout", "grid")); errA <- err }()
	waitQueued(t, s, 1)
	bob := alice
	bob.ID = "bob"
	go func() { _, err := s.Put(ctx, bob, prefsPut(nsB, "layout", "list")); errB <- err }()
	waitQueued(t, s, 2)
	s.commitMu.Unlock()
	for _, ch := range []chan error{errA, errB} {
		if err := <-ch; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	afterSettingsRead = func() {}

	st, err := TOMLSettings(cfg, nsA).Load()
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, e := range st.Entries {
		docs[e.Key] = string(e.Document)
	}
	if docs["prefs"] != `{"kind":"alice-edit"}` || docs["layout"] != `{"kind":"grid"}` {
		t.Fatalf("alice's section after the batch holds %v, want the hand edit and the write", docs)
	}
	if e := getT(t, s, nsA, "prefs"); string(e.Document) != `{"kind":"alice-edit"}` {
		t.Fatalf("alice's prefs served as %s, want the hand edit", e.Document)
	}
}

// A namespace that held database entries (all of them deleted since) and is then declared
// settings-backed has served revisions: its file's entries at those revisions are changes, served at
// new revisions above the namespace's, never at a revision clients were shown with other content
// (SPEC section 4). Its entry used to be served at revision 1, the revision of a put of other content,
// so a compare-and-set at 1 made against that put succeeded over the file's entry.
func TestSettingsNewlyDeclaredNamespaceNeverReusesItsRevisions(t *testing.T) {
	const ns = "user/alice"
	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	s := openAt(t, path, DefaultOptions())
	if e := mustPut(t, s, alice, prefsPut(ns, "prefs", "database")); e.Revision != 1 {
		t.Fatalf("put at %d", e.Revision)
	}
	if _, err := s.Delete(ctxT(t), alice, wire.DeleteRequest{Namespace: ns, Key: "prefs"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	writePrefsByHand(t, cfg, ns, 1, map[string]handEntry{"prefs": {1, "file"}})
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 3 || string(e.Document) != `{"kind":"file"}` {
		t.Fatalf("the file's entry served as %s at %d, want it at 3 (revisions 1 and 2 were the database's put and delete)", e.Document, e.Revision)
	}
	if r := nsRevision(t, s, ns); r != 3 {
		t.Fatalf("namespace at %d, want 3", r)
	}
	req := prefsPut(ns, "prefs", "stale")
	req.ExpectedRevision = i64(1)
	_, err := s.Put(ctxT(t), alice, req)
	wantCode(t, err, wire.CodeConflict)
	s.Close()
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 3 {
		t.Fatalf("after a restart, prefs at %d, want 3", e.Revision)
	}
}

// A reload is held to max_namespaces and max_total_value_bytes as a put is: entries added by hand
// that would pass either are refused whole (STORAGE, nothing served), and so is a write to the
// namespace, until the file is put right.
func TestSettingsReloadHeldToNamespaceAndByteBounds(t *testing.T) {
	const ns = "user/alice"
	for _, c := range []struct {
		name  string
		bound func(*Options)
		want  string
	}{
		{"max_namespaces", func(o *Options) { o.Bounds.MaxNamespaces = 2 }, "max_namespaces"},
		{"max_total_value_bytes", func(o *Options) { o.Bounds.MaxTotalValueBytes = 80 }, "max_total_value_bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
			writePrefsByHand(t, cfg, ns, 0, nil)
			opts := settingsOpts(cfg, ns)
			c.bound(&opts)
			s := openAt(t, path, opts)
			mustPut(t, s, admin, putLease("service/a", "k")) // two namespaces, 66 document bytes
			mustPut(t, s, admin, putLease("service/b", "k"))
			writePrefsByHand(t, cfg, ns, 1, map[string]handEntry{"prefs": {1, strings.Repeat("x", 20)}})
			changes, err := s.ReloadSettings(ctxT(t))
			wantCode(t, err, wire.CodeStorage)
			if len(changes) != 0 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("reload: %+v %v, want it refused naming %s", changes, err, c.want)
			}
			_, err = s.Put(ctxT(t), alice, prefsPut(ns, "other", "x"))
			wantCode(t, err, wire.CodeStorage)
			_, err = s.Get(ctxT(t), alice, wire.GetRequest{Namespace: ns, Key: "prefs"})
			wantCode(t, err, wire.CodeNotFound)
			if _, err := s.Delete(ctxT(t), admin, wire.DeleteRequest{Namespace: "service/b", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			if changes, err := s.ReloadSettings(ctxT(t)); err != nil || len(changes) != 1 {
				t.Fatalf("reload once there is room: %+v %v", changes, err)
			}
		})
	}
}
