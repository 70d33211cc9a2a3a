package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// writeSettingsSection writes, as an operator would by hand, a configuration file holding the
// settings namespace ns at revision rev, with one preference entry, prefs, at that revision (none
// when rev is 0).
func writeSettingsSection(t *testing.T, cfg, ns string, rev uint64) {
	t.Helper()
	body := fmt.Sprintf("[state_store.settings.%q]\nrevision = %d\n", ns, rev)
	if rev > 0 {
		body += fmt.Sprintf("[state_store.settings.%q.entries.prefs]\nschema = \"keeppeek.preference.v1\"\nowner = \"alice\"\n"+
			"revision = %d\ncreated_at_ms = 1\nupdated_at_ms = 1\ndocument = '{\"kind\":\"ui\"}'\n", ns, rev)
	}
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// openSettingsT opens a store in a new directory with ns settings-backed in the configuration file
// cfg there; path is the database's.
func openSettingsT(t *testing.T, ns string) (s *Store, cfg, path string) {
	t.Helper()
	dir := t.TempDir()
	cfg, path = filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	return openAt(t, path, settingsOpts(cfg, ns)), cfg, path
}

func settingsOpts(cfg, ns string) Options {
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: TOMLSettings(cfg, ns)}
	return opts
}

// A settings file ahead of the database (written by hand, or by a write cut short after its rename)
// is served at its revision; that revision is then the namespace's floor, as if the store had written
// it: a later start with the file's revision edited lower, or with the namespace no longer declared,
// never serves a revision below one clients were shown (SPEC section 4). The entry gone with the
// undeclared namespace is a delete (revision 11); back with the file, it is a put (12).
func TestSettingsRevisionAheadOfTheDatabaseNeverGoesBack(t *testing.T) {
	const ns = "user/alice"
	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	writeSettingsSection(t, cfg, ns, 10)
	s := openAt(t, path, settingsOpts(cfg, ns))
	if r := nsRevision(t, s, ns); r != 10 {
		t.Fatalf("revision %d, want the file's 10", r)
	}
	s.Close()

	s = openAt(t, path, DefaultOptions())
	if r := nsRevision(t, s, ns); r != 11 {
		t.Errorf("the namespace no longer declared: revision %d, want 11 (clients saw 10, then its entry went)", r)
	}
	s.Close()

	writeSettingsSection(t, cfg, ns, 2) // edited by hand to a lower revision
	s = openAt(t, path, settingsOpts(cfg, ns))
	if r := nsRevision(t, s, ns); r != 12 {
		t.Errorf("the file's revision lowered to 2: revision %d, want 12", r)
	}
	e := mustPut(t, s, alice, wire.PutRequest{Namespace: ns, Key: "prefs", Schema: "keeppeek.preference.v1", Document: []byte(`{"kind":"tv"}`)})
	if e.Revision != 13 {
		t.Errorf("put after the file was lowered at revision %d, want 13", e.Revision)
	}
}

// Restore validates a backup together with the settings-backed namespaces the next start serves
// beside it, as Open does: a backup that fits the bounds alone but not with the settings file's
// entries is refused and the database left as it was, instead of being installed and then refused,
// the old database gone, by the next start.
func TestRestoreRefusesABackupTheSettingsPushOverTheBounds(t *testing.T) {
	const ns = "user/alice"
	src, _ := openT(t, DefaultOptions())
	mustPut(t, src, admin, putLease("service/tx", "a"))
	mustPut(t, src, admin, putLease("service/rx", "b"))
	var backup bytes.Buffer
	if _, err := src.Backup(ctxT(t), admin, &backup); err != nil {
		t.Fatal(err)
	}
	src.Close()

	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	writeSettingsSection(t, cfg, ns, 1)
	opts := settingsOpts(cfg, ns)
	opts.Bounds.MaxNamespaces = 2
	s := openAt(t, path, opts)
	mustPut(t, s, admin, putLease("service/tx", "old"))
	s.Close()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// Two namespaces with entries in the backup and the settings namespace: three, over max_namespaces.
	if epoch, err := Restore(path, bytes.NewReader(backup.Bytes()), opts); err == nil || !strings.Contains(err.Error(), "max_namespaces") {
		t.Fatalf("Restore: epoch %q, err %v; want a refusal naming max_namespaces", epoch, err)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, orig) {
		t.Fatalf("a refused restore changed the database (%v)", err)
	}
	s = openAt(t, path, opts)
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "old"}); err != nil {
		t.Fatalf("the old database after a refused restore: %v", err)
	}
}

// settingsKillChildEnv carries the directory of TestSettingsKillChild's configuration file and
// database.
const settingsKillChildEnv = "STORE_SETTINGS_KILL_CHILD"

// pausingSettings is a real settings file whose Save, once it has written revision pauseAt, says so on
// standard output and never returns: the process is killed between the file's rename and the
// database's commit.
type pausingSettings struct {
	SettingsBackend
	pauseAt uint64
}

func (p pausingSettings) Save(s SettingsState) error {
	if err := p.SettingsBackend.Save(s); err != nil {
		return err
	}
	if s.Revision == p.pauseAt {
		fmt.Println("saved")
		select {} // killed here
	}
	return nil
}

// TestSettingsKillChild is the child process of TestSettingsWriteKilledBeforeItsCommit, not a test of
// its own: without STORE_SETTINGS_KILL_CHILD it returns at once.
func TestSettingsKillChild(t *testing.T) {
	dir := os.Getenv(settingsKillChildEnv)
	if dir == "" {
		return
	}
	const ns = "user/alice"
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: pausingSettings{TOMLSettings(filepath.Join(dir, "stated.toml"), ns), 2}}
	s, err := Open(filepath.Join(dir, "state-store.db"), opts)
	if err != nil || s.Unavailable() != nil {
		fmt.Println("open:", err, s.Unavailable())
		os.Exit(2)
	}
	for _, kind := range []string{"ui", "tv"} {
		_, err := s.Put(context.Background(), alice, wire.PutRequest{Namespace: ns, Key: "prefs", Schema: "keeppeek.preference.v1",
			Document: []byte(`{"kind":"` + kind + `"}`)})
		fmt.Println("put:", err)
	}
	os.Exit(3) // never reached: the second put pauses
}

// A process killed between a settings write's rename and its database commit leaves the file a
// revision ahead of the database. The next start serves the file's revision (an unacknowledged write
// that landed, SPEC section 10 allows it), and records it, so a later start that no longer declares
// the namespace never goes back to the database's older revision (SPEC section 4).
func TestSettingsWriteKilledBeforeItsCommit(t *testing.T) {
	const ns = "user/alice"
	dir := t.TempDir()
	cfg, path := filepath.Join(dir, "stated.toml"), filepath.Join(dir, "state-store.db")
	writeSettingsSection(t, cfg, ns, 0)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSettingsKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), settingsKillChildEnv+"="+dir, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "saved" {
		said = append(said, sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(said) != 1 || said[0] != "put: <nil>" {
		t.Fatalf("the child said %q before its second write paused, want one acknowledged put", said)
	}

	s := openAt(t, path, settingsOpts(cfg, ns))
	if r := nsRevision(t, s, ns); r != 2 {
		t.Fatalf("after the kill: revision %d, want the file's 2", r)
	}
	s.Close()
	s = openAt(t, path, DefaultOptions())
	if r := nsRevision(t, s, ns); r != 3 {
		t.Fatalf("the namespace no longer declared after a start that served revision 2: revision %d, want 3 (its one entry gone)", r)
	}
}
