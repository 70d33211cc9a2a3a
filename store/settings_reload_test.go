package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// wantUpdate receives the next watch message and checks it is an update of kind, key and revision
// at watch sequence seq; for a PUT, that its entry holds doc.
func wantUpdate(t *testing.T, ch chan Message, seq uint64, kind wire.UpdateKind, key string, rev uint64, doc string) {
	t.Helper()
	m := recv(t, ch)
	if m.Event == nil || m.Sequence != seq || m.Event.Kind != kind || m.Event.Key != key || m.Event.Revision != rev {
		t.Fatalf("update %+v (event %+v), want %s %s at revision %d, sequence %d", m, m.Event, kind, key, rev, seq)
	}
	if kind == wire.UpdatePut && (m.Event.Entry == nil || string(m.Event.Entry.Document) != doc || m.Event.Entry.Revision != rev) {
		t.Fatalf("PUT %s carries %+v, want %s at %d", key, m.Event.Entry, doc, rev)
	}
}

// auditTail returns the audit records of s from seq on.
func auditTail(t *testing.T, s *Store, from uint64) []auditRecord {
	t.Helper()
	var out []auditRecord
	if _, _, err := s.be.scanAudit(func(_ auditCheckpoint, rec *auditRecord, _ []byte) error {
		if rec != nil && rec.Seq >= from {
			out = append(out, *rec)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A hand edit of a settings file while the store runs reaches clients at ReloadSettings (stated's
// SIGHUP), as ordinary updates in revision order: an edited entry and an entry added by hand (at a
// revision already passed) are PUTs at new revisions, an entry removed by hand a DELETE; an entry
// left alone keeps its revision and sends nothing; each change is audited as the settings file's.
// A second reload finds nothing, and a restart serves what the reload served.
func TestSettingsReloadFansOutHandEditsInOrder(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
	mustPut(t, s, alice, prefsPut(ns, "b", "tv"))
	mustPut(t, s, alice, prefsPut(ns, "c", "radio"))
	_, ch := watchT(t, s, alice, "w", ns, "")
	head := s.audit.Seq

	editSettings(t, cfg, ns, func(st *SettingsState) {
		st.Entries[0].Document = []byte(`{"kind":"edited"}`) // a, its revision (1) kept
		d := st.Entries[2]                                   // c, copied as d at revision 2
		d.Key, d.Revision, d.Document = "d", 2, []byte(`{"kind":"new"}`)
		st.Entries = append([]wire.Entry{st.Entries[0], st.Entries[2]}, d) // b removed
	})
	changes, err := s.ReloadSettings(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []SettingsChange{{ns, "a", wire.UpdatePut, 4}, {ns, "b", wire.UpdateDelete, 5}, {ns, "d", wire.UpdatePut, 6}}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("reload changes %+v, want %+v", changes, want)
	}
	wantUpdate(t, ch, 1, wire.UpdatePut, "a", 4, `{"kind":"edited"}`)
	wantUpdate(t, ch, 2, wire.UpdateDelete, "b", 5, "")
	wantUpdate(t, ch, 3, wire.UpdatePut, "d", 6, `{"kind":"new"}`)
	if c := getT(t, s, ns, "c"); c.Revision != 3 {
		t.Fatalf("c, not edited, at revision %d after the reload, want 3", c.Revision)
	}
	if r := nsRevision(t, s, ns); r != 6 {
		t.Fatalf("namespace at %d after the reload, want 6", r)
	}
	recs := auditTail(t, s, head+1)
	if len(recs) != 3 {
		t.Fatalf("%d audit records for the reload, want 3: %+v", len(recs), recs)
	}
	for i, r := range recs {
		if r.Principal != SettingsFilePrincipal || r.Namespace != ns || r.Key != want[i].Key || r.Revision != want[i].Revision {
			t.Fatalf("audit record %d: %+v, want %s's %s of %s at %d", i, r, SettingsFilePrincipal, want[i].Kind, want[i].Key, want[i].Revision)
		}
	}
	if rep, err := s.VerifyAudit(); err != nil || !rep.OK() {
		t.Fatalf("audit after the reload: %+v %v", rep, err)
	}

	// Nothing changed since: a second reload finds nothing, and the next update is a write's.
	if changes, err := s.ReloadSettings(ctxT(t)); err != nil || len(changes) != 0 {
		t.Fatalf("second reload: %+v %v, want no change", changes, err)
	}
	mustPut(t, s, alice, prefsPut(ns, "e", "x"))
	wantUpdate(t, ch, 4, wire.UpdatePut, "e", 7, `{"kind":"x"}`)
	s.Close()

	s = openAt(t, path, settingsOpts(cfg, ns))
	for key, rev := range map[string]uint64{"a": 4, "c": 3, "d": 6, "e": 7} {
		if e := getT(t, s, ns, key); e.Revision != rev {
			t.Errorf("%s at %d after a restart, want %d", key, e.Revision, rev)
		}
	}
	if r := nsRevision(t, s, ns); r != 7 {
		t.Errorf("namespace at %d after a restart, want 7", r)
	}
}

// A hand edit of a settings file, then a client's write to that namespace before any reload: the
// write used to rewrite the section from the store's memory, and the edit was lost without a word,
// while a compare-and-set made against the entry as it was before the edit succeeded. The write now
// loads the edit first: a blind write is committed after it (watchers see the edit's updates first),
// a compare-and-set against the old revision fails CONFLICT, and the file keeps the edit.
func TestSettingsWriteAfterAHandEditKeepsTheEdit(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	prefs := mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	_, ch := watchT(t, s, alice, "w", ns, "")

	editSettings(t, cfg, ns, func(st *SettingsState) {
		st.Entries[0].Document = []byte(`{"kind":"tv"}`) // its revision (1) kept
		extra := st.Entries[0]
		extra.Key, extra.Document = "extra", []byte(`{"kind":"added"}`)
		st.Entries = append(st.Entries, extra)
	})
	if e := mustPut(t, s, alice, prefsPut(ns, "layout", "grid")); e.Revision != 4 {
		t.Fatalf("a blind write after the edit at %d, want 4 (after the edit's two changes)", e.Revision)
	}
	wantUpdate(t, ch, 1, wire.UpdatePut, "extra", 2, `{"kind":"added"}`)
	wantUpdate(t, ch, 2, wire.UpdatePut, "prefs", 3, `{"kind":"tv"}`)
	wantUpdate(t, ch, 3, wire.UpdatePut, "layout", 4, `{"kind":"grid"}`)

	// And a compare-and-set against the entry as it was before an edit.
	editSettings(t, cfg, ns, func(st *SettingsState) {
		for i := range st.Entries {
			if st.Entries[i].Key == "prefs" {
				st.Entries[i].Document = []byte(`{"kind":"radio"}`)
			}
		}
	})
	req := prefsPut(ns, "prefs", "stale")
	req.ExpectedRevision = i64(int64(3))
	_, err := s.Put(ctxT(t), alice, req)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeConflict || we.CurrentRevision == nil || *we.CurrentRevision != 5 {
		t.Fatalf("a compare-and-set against the entry before the edit: %v, want CONFLICT at current revision 5", err)
	}
	_, err = s.Delete(ctxT(t), alice, wire.DeleteRequest{Namespace: ns, Key: "prefs", ExpectedRevision: i64(int64(prefs.Revision))})
	wantCode(t, err, wire.CodeConflict)
	wantUpdate(t, ch, 4, wire.UpdatePut, "prefs", 5, `{"kind":"radio"}`)
	if e := getT(t, s, ns, "prefs"); e.Revision != 5 || string(e.Document) != `{"kind":"radio"}` {
		t.Fatalf("prefs after the refused writes: %s at %d, want the edit at 5", e.Document, e.Revision)
	}
	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range st.Entries {
		got[e.Key] = string(e.Document)
	}
	if got["prefs"] != `{"kind":"radio"}` || got["extra"] != `{"kind":"added"}` || got["layout"] != `{"kind":"grid"}` || len(got) != 3 {
		t.Fatalf("the file after the writes holds %v, want the edits and the write", got)
	}
	s.Close()
	s = openAt(t, path, settingsOpts(cfg, ns))
	for key, rev := range map[string]uint64{"extra": 2, "layout": 4, "prefs": 5} {
		if e := getT(t, s, ns, key); e.Revision != rev {
			t.Errorf("%s at %d after a restart, want %d", key, e.Revision, rev)
		}
	}
}

// A settings file that does not load (TOML that does not parse, a file emptied, an entry that fails
// its schema, one over a bound) is refused whole by ReloadSettings, with the reason, and by a write to its
// namespace (STORAGE): nothing changes, no update is sent, and the operator's file is left as it is.
// Once the file is put right, the reload serves it.
func TestSettingsReloadOfABadFileChangesNothing(t *testing.T) {
	const ns = "user/alice"
	entry := func(key, doc string) string {
		return fmt.Sprintf("[state_store.settings.%q.entries.%q]\nschema = \"keeppeek.preference.v1\"\nowner = \"alice\"\n"+
			"revision = 1\ncreated_at_ms = 1\nupdated_at_ms = 1\ndocument = '%s'\n", ns, key, doc)
	}
	section := fmt.Sprintf("[state_store.settings.%q]\nrevision = 2\n", ns)
	cases := []struct{ name, file, want string }{
		{"TOML that does not parse", "[state_store.settings\nrevision = ", "toml"},
		{"a file emptied (an editor caught rewriting it in place)", "", "empty"},
		{"an entry that fails its schema", section + entry("a", `{"kind":"ui"}`) + entry("b", `{"colour":"red"}`), "entry b"},
		{"a document over max_document_bytes", section + entry("a", `{"kind":"`+strings.Repeat("x", 200)+`"}`), "invalid document"},
		{"more entries than max_entries_per_namespace", section + entry("a", `{"kind":"ui"}`) + entry("b", `{"kind":"ui"}`) + entry("c", `{"kind":"ui"}`), "max_entries_per_namespace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
			opts := settingsOpts(cfg, ns)
			opts.Bounds.MaxDocumentBytes = 128
			opts.Bounds.MaxEntriesPerNamespace = 2
			s := openAt(t, path, opts)
			mustPut(t, s, alice, prefsPut(ns, "a", "ui"))
			_, ch := watchT(t, s, alice, "w", ns, "")
			good, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			changes, err := s.ReloadSettings(ctxT(t))
			if err == nil || !strings.Contains(err.Error(), c.want) || len(changes) != 0 {
				t.Fatalf("reload of the bad file: %+v %v, want an error naming %q", changes, err, c.want)
			}
			_, err = s.Put(ctxT(t), alice, prefsPut(ns, "b", "tv"))
			wantCode(t, err, wire.CodeStorage)
			if raw, err := os.ReadFile(cfg); err != nil || string(raw) != c.file {
				t.Fatalf("the bad file was changed (%v):\n%s", err, raw)
			}
			if a := getT(t, s, ns, "a"); a.Revision != 1 || string(a.Document) != `{"kind":"ui"}` {
				t.Fatalf("a after the refused reload: %s at %d", a.Document, a.Revision)
			}
			if r := nsRevision(t, s, ns); r != 1 {
				t.Fatalf("namespace at %d after the refused reload, want 1", r)
			}
			if s.Unavailable() != nil {
				t.Fatalf("the store stopped: %v", s.Unavailable())
			}
			// Put right: the next update the watch sees is the good file's, the first of its sequence.
			if err := os.WriteFile(cfg, good, 0o600); err != nil {
				t.Fatal(err)
			}
			editSettings(t, cfg, ns, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"fixed"}`) })
			if changes, err := s.ReloadSettings(ctxT(t)); err != nil || len(changes) != 1 {
				t.Fatalf("reload of the fixed file: %+v %v", changes, err)
			}
			wantUpdate(t, ch, 1, wire.UpdatePut, "a", 2, `{"kind":"fixed"}`)
		})
	}
}

// A compare-and-set made against a settings entry as it was before a hand edit, with no reload in
// between, fails CONFLICT with the revision the edit is served at, and the edit survives in memory
// and in the file: it used to succeed and overwrite the edit.
func TestSettingsCASAgainstAHandEditedEntryConflicts(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	s, _ := openT(t, settingsOpts(cfg, ns))
	prefs := mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	editSettings(t, cfg, ns, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"tv"}`) })
	req := prefsPut(ns, "prefs", "stale")
	req.ExpectedRevision = i64(int64(prefs.Revision))
	_, err := s.Put(ctxT(t), alice, req)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeConflict || we.CurrentRevision == nil || *we.CurrentRevision != 2 {
		t.Fatalf("a compare-and-set against the entry before the edit: %v, want CONFLICT at current revision 2", err)
	}
	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil || len(st.Entries) != 1 || string(st.Entries[0].Document) != `{"kind":"tv"}` {
		t.Fatalf("the file after the refused write: %+v %v, want the edit", st, err)
	}
	if e := getT(t, s, ns, "prefs"); e.Revision != 2 || string(e.Document) != `{"kind":"tv"}` {
		t.Fatalf("prefs after the refused write: %s at %d, want the edit at 2", e.Document, e.Revision)
	}
}

// reloadCrashEnv carries a directory to TestSettingsReloadCrashChild, the child process of
// TestSettingsReloadKilledBeforeItsCommitLosesNothing.
const reloadCrashEnv = "STORE_RELOAD_CRASH_CHILD"

// TestSettingsReloadCrashChild is a child process, not a test of its own: without
// STORE_RELOAD_CRASH_CHILD it returns at once. With it, it writes two settings entries in that
// directory's store, edits the file by hand (one entry changed, the other removed) and reloads,
// killing itself (SIGKILL) once the reload has read the file and before it commits.
func TestSettingsReloadCrashChild(t *testing.T) {
	dir := os.Getenv(reloadCrashEnv)
	if dir == "" {
		return
	}
	const ns = "user/alice"
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	s, err := Open(path, settingsOpts(cfg, ns))
	if err != nil || s.Unavailable() != nil {
		fmt.Println("open:", err, s.Unavailable())
		os.Exit(2)
	}
	mustPut(t, s, alice, prefsPut(ns, "layout", "grid"))
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	editSettings(t, cfg, ns, func(st *SettingsState) {
		st.Entries = st.Entries[1:] // layout removed
		st.Entries[0].Document = []byte(`{"kind":"tv"}`)
	})
	afterSettingsRead = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	changes, err := s.ReloadSettings(ctxT(t))
	fmt.Println("the reload returned:", changes, err)
	os.Exit(3)
}

// A stated killed while it reloads a settings file, after the read and before the commit, loses
// nothing: the reload committed nothing, and the next start finds the edit as any edit made while
// the store was stopped (the entry changed at a new revision, the one removed a delete).
func TestSettingsReloadKilledBeforeItsCommitLosesNothing(t *testing.T) {
	const ns = "user/alice"
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSettingsReloadCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), reloadCrashEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed in its reload (%v):\n%s", err, out)
	}
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	s := openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 4 || string(e.Document) != `{"kind":"tv"}` {
		t.Fatalf("prefs after the kill: %s at %d, want the edit at 4 (after layout's removal, at 3)", e.Document, e.Revision)
	}
	_, err = s.Get(ctxT(t), alice, wire.GetRequest{Namespace: ns, Key: "layout"})
	wantCode(t, err, wire.CodeNotFound)
	if r := nsRevision(t, s, ns); r != 4 {
		t.Fatalf("namespace at %d after the kill, want 4 (the edit and the removal)", r)
	}
}

// A hand edit that lands after a write read its namespace's file and before the write's Save is not
// overwritten either: the Save finds the section changed, the file is read again, and the write is
// checked against, and committed after, the edit.
func TestSettingsEditDuringAWriteIsKept(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	s, _ := openT(t, settingsOpts(cfg, ns))
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	_, ch := watchT(t, s, alice, "w", ns, "")
	edited := false
	afterSettingsRead = func() {
		if !edited {
			edited = true
			editSettings(t, cfg, ns, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"tv"}`) })
		}
	}
	t.Cleanup(func() { afterSettingsRead = func() {} })
	if e := mustPut(t, s, alice, prefsPut(ns, "layout", "grid")); e.Revision != 3 {
		t.Fatalf("the write at %d, want 3 (after the edit, at 2)", e.Revision)
	}
	wantUpdate(t, ch, 1, wire.UpdatePut, "prefs", 2, `{"kind":"tv"}`)
	wantUpdate(t, ch, 2, wire.UpdatePut, "layout", 3, `{"kind":"grid"}`)
	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil || len(st.Entries) != 2 || st.Entries[1].Key != "prefs" || string(st.Entries[1].Document) != `{"kind":"tv"}` {
		t.Fatalf("the file after the write: %+v %v, want the edit kept", st, err)
	}
}

// A write after a hand edit whose Save replaced the file and then failed (the fsync of the directory
// after the rename) answers STORAGE and puts the file back as it was before the write: with the
// edit, which is served (at a new revision), not the store's state from before the edit.
func TestSettingsSaveThatLandedAfterAHandEditPutsTheEditBack(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	fs := &flakySettings{SettingsBackend: TOMLSettings(cfg, ns)}
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: fs}
	s, path := openT(t, opts)
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	_, ch := watchT(t, s, alice, "w", ns, "")
	editSettings(t, cfg, ns, func(st *SettingsState) { st.Entries[0].Document = []byte(`{"kind":"tv"}`) })
	fs.plan = []saveOutcome{saveLanded}
	_, err := s.Put(ctxT(t), alice, prefsPut(ns, "layout", "grid"))
	wantCode(t, err, wire.CodeStorage)
	wantUpdate(t, ch, 1, wire.UpdatePut, "prefs", 2, `{"kind":"tv"}`)
	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil || len(st.Entries) != 1 || string(st.Entries[0].Document) != `{"kind":"tv"}` {
		t.Fatalf("the file after the refused write: %+v %v, want the edit alone", st, err)
	}
	s.Close()
	s = openAt(t, path, opts)
	if e := getT(t, s, ns, "prefs"); e.Revision != 2 || string(e.Document) != `{"kind":"tv"}` {
		t.Fatalf("prefs after a restart: %s at %d, want the edit at 2", e.Document, e.Revision)
	}
}

// An entry a reload served at a new revision keeps it at the next start, even when the edit raised
// the file's revisions above every one served: the same content is never served at two revisions.
func TestSettingsReloadedEntryKeepsItsRevisionAcrossARestart(t *testing.T) {
	const ns = "user/alice"
	s, cfg, path := openSettingsT(t, ns)
	mustPut(t, s, alice, prefsPut(ns, "prefs", "ui"))
	editSettings(t, cfg, ns, func(st *SettingsState) {
		st.Revision, st.Entries[0].Revision, st.Entries[0].Document = 50, 50, []byte(`{"kind":"tv"}`)
	})
	changes, err := s.ReloadSettings(ctxT(t))
	if err != nil || len(changes) != 1 || changes[0].Revision != 2 {
		t.Fatalf("reload: %+v %v, want prefs at 2", changes, err)
	}
	s.Close()
	s = openAt(t, path, settingsOpts(cfg, ns))
	if e := getT(t, s, ns, "prefs"); e.Revision != 2 || string(e.Document) != `{"kind":"tv"}` {
		t.Fatalf("prefs after a restart: %s at %d, want the edit at 2, as the reload served it", e.Document, e.Revision)
	}
}
