package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

func TestSettingsBackedNamespace(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "stated.toml")
	const ns = "service/mqtt-bridge"
	if err := os.WriteFile(cfg, []byte("data_dir = \"./data\"\n\n[state_store.settings.\""+ns+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	settings, err := TOMLSettingsNamespaces(cfg)
	if err != nil || len(settings) != 1 {
		t.Fatalf("settings namespaces %v %v", settings, err)
	}
	opts := DefaultOptions()
	opts.Settings = settings
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, opts)
	ctx := ctxT(t)
	_, ch := watchT(t, s, admin, "w", ns, "")
	doc := json.RawMessage(`{"role":"subscribe","desired":true,"source_id":"front-door","media_kind":"video"}`)
	req := wire.PutRequest{Namespace: ns, Key: "bridge/config", Schema: "keeppeek.media-intent.v1", Document: doc}
	req.TTLMs = i64(5000)
	_, err = s.Put(ctx, admin, req)
	wantCode(t, err, wire.CodeTTLInvalid)
	req.TTLMs = nil
	e := mustPut(t, s, admin, req)
	if e.Revision != 1 || e.TTLMs != 0 {
		t.Fatalf("settings put %+v", e)
	}
	if m := recv(t, ch); m.Event.Kind != wire.UpdatePut || m.Event.Revision != 1 {
		t.Fatalf("settings watch %+v", m.Event)
	}
	raw, _ := os.ReadFile(cfg)
	if !strings.Contains(string(raw), "bridge/config") || !strings.Contains(string(raw), "data_dir") {
		t.Fatalf("config file after put:\n%s", raw)
	}
	mustPut(t, s, admin, wire.PutRequest{Namespace: ns, Key: "bridge/other", Schema: "keeppeek.media-intent.v1", Document: doc})
	if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: "bridge/other"}); err != nil {
		t.Fatal(err)
	}
	// The database holds none of it: a settings namespace lives in its file.
	s.Close()
	opts2 := DefaultOptions()
	opts2.Settings, _ = TOMLSettingsNamespaces(cfg)
	s2 := openAt(t, path, opts2)
	r, err := s2.List(ctx, admin, wire.ListRequest{Namespace: ns})
	if err != nil || r.Revision != 3 || len(r.Entries) != 1 || r.Entries[0].Key != "bridge/config" || r.Entries[0].Owner != "coordinator" {
		t.Fatalf("settings after reopen %+v %v", r, err)
	}
	if e := mustPut(t, s2, admin, req); e.Revision != 4 || e.CreatedAtMs != r.Entries[0].CreatedAtMs {
		t.Fatalf("settings put after reopen %+v", e)
	}
	rep, err := s2.VerifyAudit()
	if err != nil || !rep.OK() || rep.Records != 4 {
		t.Fatalf("settings writes are audited: %+v %v", rep, err)
	}
	// Without the settings declaration the namespace's entries are gone with the file, each a delete
	// (revision 5), and its revision never goes back: the database keeps it as a floor (SPEC section 4).
	s2.Close()
	s3 := openAt(t, path, DefaultOptions())
	if r, _ := s3.List(ctx, admin, wire.ListRequest{Namespace: ns}); r.Revision != 5 || len(r.Entries) != 0 {
		t.Fatalf("the namespace without its settings declaration: %+v, want revision 5 and no entries", r)
	}
	if e := mustPut(t, s3, admin, req); e.Revision != 6 {
		t.Fatalf("put after the settings declaration was dropped at revision %d, want 6", e.Revision)
	}
	if _, err := s3.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: req.Key}); err != nil {
		t.Fatal(err)
	}
	s3.Close()
	// Declared again, over a file whose revision (4) is behind the database's (7): the database's wins.
	// The file's entry, served at 4 before, was deleted (5), written and deleted in the database (6 and
	// 7) since: it comes back as a change, at a new revision (8), never at 4 again.
	s4 := openAt(t, path, opts2)
	r, err = s4.List(ctx, admin, wire.ListRequest{Namespace: ns})
	if err != nil || r.Revision != 8 || len(r.Entries) != 1 || r.Entries[0].Revision != 8 {
		t.Fatalf("settings namespace declared again: %+v %v, want revision 8 and the file's one entry at 8", r, err)
	}
	if e := mustPut(t, s4, admin, req); e.Revision != 9 {
		t.Fatalf("settings put after the floor at revision %d, want 9", e.Revision)
	}
}

// failingSettings is a SettingsBackend over a real file whose Save can be made to fail, standing in
// for a configuration file on a disk that refuses writes.
type failingSettings struct {
	SettingsBackend
	fail bool
}

func (f *failingSettings) Save(s SettingsState) error {
	if f.fail {
		return errors.New("disk refused the write")
	}
	return f.SettingsBackend.Save(s)
}

func TestSettingsSaveFailureIsStorage(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "stated.toml")
	const ns = "user/alice"
	fs := &failingSettings{SettingsBackend: TOMLSettings(cfg, ns)}
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: fs}
	s, _ := openT(t, opts)
	pref := json.RawMessage(`{"kind":"ui"}`)
	mustPut(t, s, alice, wire.PutRequest{Namespace: ns, Key: "prefs", Schema: "keeppeek.preference.v1", Document: pref})
	fs.fail = true
	_, err := s.Put(ctxT(t), alice, wire.PutRequest{Namespace: ns, Key: "prefs2", Schema: "keeppeek.preference.v1", Document: pref})
	wantCode(t, err, wire.CodeStorage)
	if r := nsRevision(t, s, ns); r != 1 {
		t.Fatalf("a failed settings write moved the revision to %d", r)
	}
	fs.fail = false
	if e := mustPut(t, s, alice, wire.PutRequest{Namespace: ns, Key: "prefs2", Schema: "keeppeek.preference.v1", Document: pref}); e.Revision != 2 {
		t.Fatalf("write after recovery at %d", e.Revision)
	}
}

// A settings file ahead of the database's record (edited by hand, or a write cut short by a crash
// between the file and the database) is served as the file says, with a warning; its changes, which no
// write committed, are audited as the settings file's.
func TestSettingsFileAheadOfTheDatabaseIsReported(t *testing.T) {
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
	e := st.Entries[0]
	e.Key, e.Revision = "by-hand", 2
	st.Entries, st.Revision = append(st.Entries, e), 2
	if err := TOMLSettings(cfg, ns).Save(st); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s2 := openAt(t, path, opts)
	if !strings.Contains(logs.String(), "audited as the settings file's") || !strings.Contains(logs.String(), "file_revision=2 recorded_revision=1") {
		t.Fatalf("no warning of the file ahead of the database; logs:\n%s", logs.String())
	}
	if recs := auditTail(t, s2, 2); len(recs) != 1 || recs[0].Principal != SettingsFilePrincipal || recs[0].Op != "put" ||
		recs[0].Key != "by-hand" || recs[0].Revision != 2 {
		t.Fatalf("audit records after the write's: %+v, want the settings file's put of by-hand at 2", recs)
	}
	if r := nsRevision(t, s2, ns); r != 2 {
		t.Fatalf("namespace revision %d, want the file's 2", r)
	}
	if _, err := s2.Get(ctxT(t), alice, wire.GetRequest{Namespace: ns, Key: "by-hand"}); err != nil {
		t.Fatalf("the file's entry: %v", err)
	}
}
