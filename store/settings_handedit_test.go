package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/wire"
)

// writePrefsByHand writes, as an operator would with an editor, a configuration file holding the
// settings namespace ns at revision rev with the preference entries given as key -> {revision, kind}.
func writePrefsByHand(t *testing.T, cfg, ns string, rev uint64, entries map[string]handEntry) {
	t.Helper()
	body := fmt.Sprintf("# edited by hand\ndata_dir = \"./data\"\n\n[state_store.settings.%q]\nrevision = %d\n", ns, rev)
	for key, e := range entries {
		body += fmt.Sprintf("\n[state_store.settings.%q.entries.%q]\nschema = \"keeppeek.preference.v1\"\nowner = \"alice\"\n"+
			"revision = %d\ncreated_at_ms = 1\nupdated_at_ms = 1\ndocument = '{\"kind\":%q}'\n", ns, key, e.rev, e.kind)
	}
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

type handEntry struct {
	rev  uint64
	kind string
}

// getT gets ns/key as alice.
func getT(t *testing.T, s *Store, ns, key string) wire.Entry {
	t.Helper()
	e, err := s.Get(ctxT(t), alice, wire.GetRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatalf("Get %s %s: %v", ns, key, err)
	}
	return e
}

func prefsPut(ns, key, kind string) wire.PutRequest {
	return wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaPreference, Document: []byte(`{"kind":"` + kind + `"}`)}
}

// editSettings loads the namespace's section with the settings file code, lets edit change it, and
// saves it: the file changed outside the store, whatever revisions edit leaves.
func editSettings(t *testing.T, cfg, ns string, edit func(*SettingsState)) {
	t.Helper()
	sb := TOMLSettings(cfg, ns)
	st, err := sb.Load()
	if err != nil {
		t.Fatal(err)
	}
	edit(&st)
	if err := sb.Save(st); err != nil {
		t.Fatal(err)
	}
}

// A settings entry whose content is changed by hand, its revision left as it was, is served at a new
// revision above the namespace's, as etcd gives every change one: a compare-and-set at the old
// revision, from a writer that never saw the edit, is refused. An unchanged entry keeps its revision,
// and so does the edited one at every later start (the store does not rewrite the file to say so).
func TestSettingsHandEditKeepingTheRevisionGetsANewOne(t *testing.T) {
	const ns = "user/alice"
	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	writePrefsByHand(t, cfg, ns, 3, map[string]handEntry{"prefs": {3, "ui"}, "layout": {2, "grid"}})
	s := openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 3 {
		t.Fatalf("prefs at %d, want the file's 3", e.Revision)
	}
	s.Close()

	writePrefsByHand(t, cfg, ns, 3, map[string]handEntry{"prefs": {3, "tv"}, "layout": {2, "grid"}})
	s = openAt(t, path, settingsOpts(cfg, ns))
	e := getT(t, s, ns, "prefs")
	if e.Revision != 4 || string(e.Document) != `{"kind":"tv"}` {
		t.Fatalf("prefs edited by hand: %s at revision %d, want the edit at 4", e.Document, e.Revision)
	}
	if l := getT(t, s, ns, "layout"); l.Revision != 2 {
		t.Errorf("layout, not edited, at revision %d, want 2", l.Revision)
	}
	if r := nsRevision(t, s, ns); r != 4 {
		t.Errorf("namespace revision %d, want 4", r)
	}
	req := prefsPut(ns, "prefs", "stale")
	req.ExpectedRevision = i64(3)
	_, err := s.Put(ctxT(t), alice, req)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeConflict || we.CurrentRevision == nil || *we.CurrentRevision != 4 {
		t.Fatalf("put at the revision the edit kept: %v, want CONFLICT at current revision 4", err)
	}
	ws, _ := watchT(t, s, alice, "w", ns, "")
	if ws.SnapshotRevision != 4 || len(ws.Entries) != 2 {
		t.Fatalf("snapshot %+v, want revision 4 with both entries", ws)
	}
	s.Close()

	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 4 {
		t.Fatalf("prefs at the next start: revision %d, want 4 still", e.Revision)
	}
	if r := nsRevision(t, s, ns); r != 4 {
		t.Fatalf("namespace revision at the next start %d, want 4 still", r)
	}
	req.ExpectedRevision = i64(4)
	if e := mustPut(t, s, alice, req); e.Revision != 5 {
		t.Fatalf("put after the edit at %d, want 5", e.Revision)
	}
	s.Close()
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 5 || string(e.Document) != `{"kind":"stale"}` {
		t.Fatalf("after a store write and a restart: %s at %d", e.Document, e.Revision)
	}
}

// Entries written through the store keep their revisions across restarts, whatever their documents
// hold (escapes, non-ASCII text, nesting, numbers): the store never takes a write of its own for an
// edit.
func TestSettingsUnchangedEntriesKeepTheirRevisions(t *testing.T) {
	const ns = "user/alice"
	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	docs := []string{
		`{"kind":"ui"}`,
		`{"kind":"caf\u00e9 \"quoted\" \\ back","layout":"grid"}`,
		"{\"kind\":\"x\",   \"layout\" : \"\u65e5\u672c\"}",
		`{"kind":"a'b'''c","preferred_group":"g-1"}`,
	}
	s := openAt(t, path, settingsOpts(cfg, ns))
	want := map[string]uint64{}
	for i, d := range docs {
		key := fmt.Sprintf("k.%d/v-%d", i, i)
		e := mustPut(t, s, alice, wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaPreference, Document: []byte(d)})
		want[key] = e.Revision
	}
	if _, err := s.Delete(ctxT(t), alice, wire.DeleteRequest{Namespace: ns, Key: "k.0/v-0"}); err != nil {
		t.Fatal(err)
	}
	delete(want, "k.0/v-0")
	nsRev := nsRevision(t, s, ns)
	s.Close()
	for round := range 2 {
		s = openAt(t, path, settingsOpts(cfg, ns))
		for key, rev := range want {
			if e := getT(t, s, ns, key); e.Revision != rev {
				t.Errorf("start %d: %s at revision %d, want %d", round, key, e.Revision, rev)
			}
		}
		if r := nsRevision(t, s, ns); r != nsRev {
			t.Errorf("start %d: namespace revision %d, want %d", round, r, nsRev)
		}
		s.Close()
	}
}

// An entry removed from the file by hand is a delete: the namespace's revision advances by one, so a
// list or snapshot at the old revision never shows a different content at the same revision.
func TestSettingsHandDeletedEntryAdvancesTheRevision(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "b", "tv"))
	s.Close()

	editSettings(t, cfg, ns, func(st *SettingsState) { st.Entries = st.Entries[:1] })
	s = openAt(t, path, settingsOpts(cfg, ns))
	if r := nsRevision(t, s, ns); r != 3 {
		t.Fatalf("namespace revision after b was removed by hand: %d, want 3", r)
	}
	if e := getT(t, s, ns, "a"); e.Revision != 1 {
		t.Errorf("a, untouched, at %d, want 1", e.Revision)
	}
	req := prefsPut(ns, "b", "new")
	req.ExpectedRevision = i64(0)
	if e := mustPut(t, s, alice, req); e.Revision != 4 {
		t.Fatalf("b created again at %d, want 4", e.Revision)
	}
	s.Close()
	s = openAt(t, path, settingsOpts(cfg, ns))
	if r := nsRevision(t, s, ns); r != 4 {
		t.Fatalf("namespace revision at the next start %d, want 4", r)
	}
}

// A file put back to a lower revision than one served (an older copy of the configuration): the
// namespace never goes back (the database's floor), an entry whose content is what the store last
// served keeps the revision it was served at, and an entry whose content differs is a change, at a
// new revision above the namespace's. No revision a client saw is given to other content.
func TestSettingsFileLoweredRevision(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "prefs", "tv"))
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	s.Close()

	lower := func(kind string) func(*SettingsState) {
		return func(st *SettingsState) {
			st.Revision, st.Entries[0].Revision = 1, 1
			st.Entries[0].Document = []byte(`{"kind":"` + kind + `"}`)
		}
	}
	editSettings(t, cfg, ns, lower("ui")) // the content served at 3, numbered 1
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 3 {
		t.Fatalf("prefs lowered to revision 1, content as served at 3: revision %d, want 3", e.Revision)
	}
	if r := nsRevision(t, s, ns); r != 3 {
		t.Fatalf("namespace revision %d, want 3", r)
	}
	s.Close()

	editSettings(t, cfg, ns, lower("tv")) // content served at 2 once, not the last served: a change
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 4 || string(e.Document) != `{"kind":"tv"}` {
		t.Fatalf("prefs lowered to revision 1 with other content: %s at %d, want it at 4", e.Document, e.Revision)
	}
	if r := nsRevision(t, s, ns); r != 4 {
		t.Fatalf("namespace revision %d, want 4", r)
	}
}

// An entry added by hand at a revision the namespace has already passed (a key deleted since, say) is
// given a new revision: a writer that held the deleted entry at that revision cannot write over it.
func TestSettingsHandAddedEntryAtAnOldRevision(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	if _, err := s.Delete(ctxT(t), alice, wire.DeleteRequest{Namespace: ns, Key: "prefs"}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, alice, prefsPut(ns, "other", "x"))
	s.Close()

	editSettings(t, cfg, ns, func(st *SettingsState) {
		e := st.Entries[0]
		e.Key, e.Revision, e.Document = "prefs", 1, []byte(`{"kind":"ui"}`)
		st.Entries = append(st.Entries, e)
	})
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 4 {
		t.Fatalf("prefs added by hand at revision 1: served at %d, want 4", e.Revision)
	}
	if e := getT(t, s, ns, "other"); e.Revision != 3 {
		t.Fatalf("other at %d, want 3", e.Revision)
	}
}

// A database of format 3 (before the store recorded what it served from settings files) opens with
// every settings entry at the revision its file gives, none renumbered; from then on an edit by hand
// is noticed.
func TestMigrateFormat3KeepsSettingsRevisions(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "b", "tv"))
	s.Close()
	boltEditFile(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketSettings); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaFormat, []byte("3"))
	})

	s = openAt(t, path, settingsOpts(cfg, ns))
	if a, b := getT(t, s, ns, "a"), getT(t, s, ns, "b"); a.Revision != 1 || b.Revision != 2 {
		t.Fatalf("after migration: a at %d, b at %d, want 1 and 2", a.Revision, b.Revision)
	}
	s.Close()
	editSettings(t, cfg, ns, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"edited"}`) })
	s = openAt(t, path, settingsOpts(cfg, ns))
	if a := getT(t, s, ns, "a"); a.Revision != 3 {
		t.Fatalf("a edited by hand after migration at %d, want 3", a.Revision)
	}
}

// The database's record of what the store served from settings files is checked on open like the
// rest of its metadata: a damaged one opens the store unavailable with the reason, never a panic and
// never a record that would renumber entries at random.
func TestSettingsRecordsCheckedOnOpen(t *testing.T) {
	const ns = "user/alice"
	cases := []struct {
		name   string
		damage func(b *bolt.Bucket) error
		want   string
	}{
		{"namespace record past the namespace's revision", func(b *bolt.Bucket) error {
			return b.Put([]byte(ns+"\x00"), []byte(`{"revision":9}`))
		}, "past the namespace's"},
		{"entry record with a bad digest", func(b *bolt.Bucket) error {
			return b.Put([]byte(ns+"\x00prefs"), []byte(`{"revision":1,"sha256":"xyz"}`))
		}, "out of range"},
		{"entry record past its namespace record", func(b *bolt.Bucket) error {
			return b.Put([]byte(ns+"\x00prefs"), []byte(`{"revision":2,"sha256":"`+strings.Repeat("a", 64)+`"}`))
		}, "out of range"},
		{"entry record of a namespace without one", func(b *bolt.Bucket) error {
			return b.Put([]byte("user/bob\x00prefs"), []byte(`{"revision":1,"sha256":"`+strings.Repeat("a", 64)+`"}`))
		}, "has no record"},
		{"unknown field", func(b *bolt.Bucket) error {
			return b.Put([]byte(ns+"\x00"), []byte(`{"revision":1,"extra":1}`))
		}, "unknown field"},
		{"nested bucket", func(b *bolt.Bucket) error {
			_, err := b.CreateBucket([]byte("x"))
			return err
		}, "holds a bucket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
			s := openAt(t, path, settingsOpts(cfg, ns))
			mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
			s.Close()
			boltEditFile(t, path, func(tx *bolt.Tx) error { return c.damage(tx.Bucket(bucketSettings)) })
			s, err := openRecovering(path, settingsOpts(cfg, ns))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if r := s.Unavailable(); r == nil || !strings.Contains(r.Error(), c.want) {
				t.Fatalf("reason %v, want one naming %q", r, c.want)
			}
		})
	}
}

// A namespace no longer settings-backed (its section removed from the configuration) lost its
// entries with the file: each is a delete, one revision each, so no list or snapshot shows other
// content at a revision clients saw. A namespace written in the database since keeps its revision.
func TestSettingsNamespaceNoLongerDeclaredDeletesItsEntries(t *testing.T) {
	const ns = "user/alice"
	s, _, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "b", "tv"))
	s.Close()

	for range 2 {
		s = openAt(t, path, DefaultOptions())
		r, err := s.List(ctxT(t), alice, wire.ListRequest{Namespace: ns})
		if err != nil || r.Revision != 4 || len(r.Entries) != 0 {
			t.Fatalf("the namespace no longer declared: %+v %v, want revision 4 (two deletes) and no entries", r, err)
		}
		s.Close()
	}
}

// A restore brings back the database's record of what was served from the settings files with the
// rest of the backup: the next start serves entries unchanged since at their revisions, and entries
// written since the backup (above its revision) as the file gives them, renumbering nothing.
func TestRestoreKeepsSettingsRevisions(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "b", "tv"))
	var backup bytes.Buffer
	if _, err := s.Backup(ctxT(t), admin, &backup); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, alice, prefsPut(ns, "b", "radio"))
	if _, err := s.Delete(ctxT(t), alice, wire.DeleteRequest{Namespace: ns, Key: "a"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Restore(path, bytes.NewReader(backup.Bytes()), settingsOpts(cfg, ns)); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, settingsOpts(cfg, ns))
	r, err := s.List(ctxT(t), alice, wire.ListRequest{Namespace: ns})
	if err != nil || r.Revision != 4 || len(r.Entries) != 1 || r.Entries[0].Key != "b" || r.Entries[0].Revision != 3 {
		t.Fatalf("after the restore: %+v %v, want revision 4 and b at 3", r, err)
	}
}

// Changes found in a settings file at Open are committed mutations like those a reload finds (SPEC
// section 10): each has its audit record, the settings file's, in the transaction that gives it its
// revision, with the document's digest for a put; and so has each entry of a namespace no longer
// declared, gone with its file. The chain stays intact.
func TestSettingsChangesFoundAtOpenAreAudited(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "b", "tv"))
	mustPut(t, s, alice, prefsPut(ns, "c", "radio"))
	head := s.audit.Seq
	s.Close()

	editSettings(t, cfg, ns, func(st *SettingsState) {
		st.Entries[0].Document = []byte(`{"kind":"edited"}`) // a, its revision (1) kept
		d := st.Entries[2]                                   // c, copied as d at revision 2
		d.Key, d.Revision, d.Document = "d", 2, []byte(`{"kind":"new"}`)
		st.Entries = append([]wire.Entry{st.Entries[0], st.Entries[2]}, d) // b removed
	})
	type rec struct {
		op, key string
		rev     uint64
		doc     string
	}
	check := func(s *Store, from uint64, want []rec) {
		t.Helper()
		recs := auditTail(t, s, from)
		if len(recs) != len(want) {
			t.Fatalf("%d audit records from %d, want %d: %+v", len(recs), from, len(want), recs)
		}
		for i, r := range recs {
			w := want[i]
			digest := ""
			if w.doc != "" {
				sum := sha256.Sum256([]byte(w.doc))
				digest = hex.EncodeToString(sum[:])
			}
			if r.Principal != SettingsFilePrincipal || r.Namespace != ns || r.Op != w.op || r.Key != w.key || r.Revision != w.rev || r.DocumentSHA256 != digest {
				t.Fatalf("audit record %d: %+v, want %s's %s of %s at %d (document %s)", i, r, SettingsFilePrincipal, w.op, w.key, w.rev, w.doc)
			}
		}
		if rep, err := s.VerifyAudit(); err != nil || !rep.OK() || rep.HeadSeq != from-1+uint64(len(want)) {
			t.Fatalf("audit: %+v %v", rep, err)
		}
	}
	s = openAt(t, path, settingsOpts(cfg, ns))
	if a := getT(t, s, ns, "a"); a.Revision != 4 {
		t.Fatalf("a, edited, at revision %d, want 4", a.Revision)
	}
	check(s, head+1, []rec{{"put", "a", 4, `{"kind":"edited"}`}, {"delete", "b", 5, ""}, {"put", "d", 6, `{"kind":"new"}`}})
	s.Close()

	// A restart that finds nothing new audits nothing.
	s = openAt(t, path, settingsOpts(cfg, ns))
	check(s, head+1, []rec{{"put", "a", 4, `{"kind":"edited"}`}, {"delete", "b", 5, ""}, {"put", "d", 6, `{"kind":"new"}`}})
	s.Close()

	// The namespace no longer declared: its three entries are gone, each a delete, in key order.
	s = openAt(t, path, DefaultOptions())
	if r := nsRevision(t, s, ns); r != 9 {
		t.Fatalf("the namespace no longer declared at revision %d, want 9", r)
	}
	check(s, head+4, []rec{{"delete", "a", 7, ""}, {"delete", "c", 8, ""}, {"delete", "d", 9, ""}})
	s.Close()
}

// CheckSettings tells, for a namespace the store does not serve from a settings file, whether the
// next Open with that file would serve the store: every case it refuses is one on which Open opens
// the store unavailable, and the case it accepts opens.
func TestCheckSettingsOfANamespaceAddedForTheNextStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, DefaultOptions())
	mustPut(t, s, alice, prefsPut("user/alice", "in-db", "ui"))
	write := func(name, ns, schema, doc string) string {
		cfg := filepath.Join(dir, name)
		body := fmt.Sprintf("[state_store.settings.%q]\nrevision = 1\n\n[state_store.settings.%q.entries.\"k\"]\nschema = %q\nowner = \"alice\"\n"+
			"revision = 1\ncreated_at_ms = 1\nupdated_at_ms = 1\ndocument = '%s'\n", ns, ns, schema, doc)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	good := write("good.toml", "user/bob", wire.SchemaPreference, `{"kind":"ui"}`)
	badSchema := write("bad-schema.toml", "user/bob", "keeppeek.lease.v1", `{"holder":"not a worker id!","claimed_at_ms":1}`)
	overDB := write("over-db.toml", "user/alice", wire.SchemaPreference, `{"kind":"ui"}`)
	for _, c := range []struct {
		cfg, ns, want string
	}{
		{good, "user/bob", ""},
		{badSchema, "user/bob", "SCHEMA_INVALID"},
		{overDB, "user/alice", "holds 1 entries in the database"},
	} {
		err := s.CheckSettings(c.ns, TOMLSettings(c.cfg, c.ns))
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Fatalf("CheckSettings(%s in %s) = %v, want %q", c.ns, filepath.Base(c.cfg), err, c.want)
		}
	}
	s.Close()
	// What Open makes of the same files.
	for _, c := range []struct {
		cfg, ns string
		served  bool
	}{{badSchema, "user/bob", false}, {overDB, "user/alice", false}, {good, "user/bob", true}} {
		opts := DefaultOptions()
		opts.Settings = map[string]SettingsBackend{c.ns: TOMLSettings(c.cfg, c.ns)}
		s, err := Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		if served := s.Unavailable() == nil; served != c.served {
			t.Fatalf("Open with %s: served %v (%v), want %v", filepath.Base(c.cfg), served, s.Unavailable(), c.served)
		}
		s.Close()
	}
}
