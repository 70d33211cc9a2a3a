package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// saveOutcome is what one Save of a flakySettings does.
type saveOutcome int

const (
	saveOK      saveOutcome = iota
	saveRefused             // fails, nothing written
	saveLanded              // writes the file, then fails (settingsfile: the fsync of the directory after the rename)
)

// flakySettings is a SettingsBackend over a real TOML file whose next Saves follow plan (then succeed);
// with refuseGoingBack, a Save of an older revision than the last written (a put back) is refused.
type flakySettings struct {
	SettingsBackend
	plan            []saveOutcome
	refuseGoingBack bool
	last            uint64          // revision of the last Save written
	saves           []SettingsState // every Save asked for, in order
}

func (f *flakySettings) Save(st SettingsState) error {
	f.saves = append(f.saves, st)
	out := saveOK
	if len(f.plan) > 0 {
		out, f.plan = f.plan[0], f.plan[1:]
	}
	if f.refuseGoingBack && st.Revision < f.last {
		out = saveRefused
	}
	if out != saveRefused {
		defer func() { f.last = st.Revision }()
	}
	if out == saveRefused {
		return errors.New("disk refused the write")
	}
	if err := f.SettingsBackend.Save(st); err != nil {
		return err
	}
	if out == saveLanded {
		return errors.New("sync of the directory after the rename: input/output error")
	}
	return nil
}

func settingsPref(ns, key string) wire.PutRequest {
	return wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.preference.v1", Document: []byte(`{"kind":"ui"}`)}
}

// settingsFileRevision is the revision of ns in the TOML file at cfg.
func settingsFileRevision(t *testing.T, cfg, ns string) uint64 {
	t.Helper()
	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil {
		t.Fatal(err)
	}
	return st.Revision
}

// A settings write whose Save failed after it had replaced the file answers STORAGE, so that file is
// put back too: "nothing changed" must hold for the file as well, or the refused write comes back at
// the next start (a file ahead of the database is served as the file says).
func TestSettingsSaveThatLandedIsPutBack(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	fs := &flakySettings{SettingsBackend: TOMLSettings(cfg, ns)}
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: fs}
	s, path := openT(t, opts)
	ctx := ctxT(t)
	mustPut(t, s, alice, settingsPref(ns, "kept"))
	fs.plan = []saveOutcome{saveLanded}
	_, err := s.Put(ctx, alice, settingsPref(ns, "refused"))
	wantCode(t, err, wire.CodeStorage)
	if r := settingsFileRevision(t, cfg, ns); r != 1 {
		t.Fatalf("settings file at revision %d after a write answered STORAGE, want 1", r)
	}
	s.Close()
	s2 := openAt(t, path, opts)
	if _, err := s2.Get(ctx, alice, wire.GetRequest{Namespace: ns, Key: "refused"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the write answered STORAGE, after a restart: %v", err)
	}
}

// A Save that failed without writing needs no putting back: STORAGE, and the store serves on, even
// when the put back it is given anyway fails too.
func TestSettingsSaveRefusedStopsNothing(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	fs := &flakySettings{SettingsBackend: TOMLSettings(cfg, ns)}
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: fs}
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	mustPut(t, s, alice, settingsPref(ns, "kept"))

	// Refused with nothing written, and refused again if written back: STORAGE, and the store serves on.
	fs.plan = []saveOutcome{saveRefused, saveRefused}
	_, err := s.Put(ctx, alice, settingsPref(ns, "refused"))
	wantCode(t, err, wire.CodeStorage)
	if s.Unavailable() != nil {
		t.Fatalf("a settings write refused before it wrote anything stopped the store: %v", s.Unavailable())
	}
}

// A settings file that cannot be put back after the database refused the commit (its disk is full:
// a tmpfs) holds a write that memory and the database do not: its outcome is unknown (the file is
// served at the next start), so the store stops, as after an uncertain database commit, and never
// answers STORAGE ("nothing changed").
func TestSettingsPutBackFailureOnAFullDiskStopsTheStore(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml") // on a disk with room: only the database's is full
	fs := &flakySettings{SettingsBackend: TOMLSettings(cfg, ns), refuseGoingBack: true}
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: fs}
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, opts)
	ctx := ctxT(t)
	mustPut(t, s, alice, settingsPref(ns, "kept"))
	filler := filepath.Join(dir, "filler")
	if err := fillFile(t, filler); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v, want ENOSPC", err)
	}
	var err error
	var unknown string
	for i := 0; i < 1000 && err == nil; i++ {
		unknown = fmt.Sprintf("prefs/%04d", i)
		_, err = s.Put(ctx, alice, settingsPref(ns, unknown))
	}
	wantCode(t, err, wire.CodeUnavailable)
	if s.Unavailable() == nil {
		t.Fatal("the store serves on over a settings file that holds a write memory does not")
	}
	if r := settingsFileRevision(t, cfg, ns); r != fs.last || len(fs.saves) < 2 || fs.saves[len(fs.saves)-1].Revision >= r {
		t.Fatalf("settings file at revision %d; want the write that could not be put back, then a refused put back (saves %d)", r, len(fs.saves))
	}
	_, err = s.Get(ctx, alice, wire.GetRequest{Namespace: ns, Key: "kept"})
	wantCode(t, err, wire.CodeUnavailable)
	s.Close()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// A restart serves what the file holds (with its warning): the write whose outcome was unknown.
	s2 := openAt(t, path, opts)
	if _, err := s2.Get(ctx, alice, wire.GetRequest{Namespace: ns, Key: unknown}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}

// A configuration file left unparsable (a hand edit under way, a typo before a SIGHUP) refuses a
// settings write with STORAGE, and nothing else: the write changed nothing, and the store serves on.
func TestSettingsWriteToAnUnparsableFileChangesNothing(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: TOMLSettings(cfg, ns)}
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	mustPut(t, s, alice, settingsPref(ns, "kept"))
	good, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("[principals\nid = "), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, alice, settingsPref(ns, "refused"))
	wantCode(t, err, wire.CodeStorage)
	if s.Unavailable() != nil {
		t.Fatalf("a write refused by an unparsable file stopped the store: %v", s.Unavailable())
	}
	if err := os.WriteFile(cfg, good, 0o600); err != nil { // the edit is finished
		t.Fatal(err)
	}
	mustPut(t, s, alice, settingsPref(ns, "later"))
	if r := nsRevision(t, s, ns); r != 2 {
		t.Fatalf("namespace revision %d, want 2: the refused write took none", r)
	}
}

// A settings-backed namespace whose file refuses a write (a hand edit left it unparsable) fails that
// namespace's writes only. The writes of other namespaces that share its batch, and the leases due when
// it runs, are committed as if it were not there: STORAGE says the disk refused the commit, and the
// database's disk did not.
func TestSettingsFileFailureFailsOnlyItsNamespace(t *testing.T) {
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml")
	opts, clk := withClock(DefaultOptions())
	opts.Settings = map[string]SettingsBackend{ns: TOMLSettings(cfg, ns)}
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	mustPut(t, s, alice, settingsPref(ns, "kept"))
	_, ch := watchT(t, s, admin, "w", "service/tx", "")
	lease := mustPut(t, s, admin, ttlPut("service/tx", "leases/a", 60_000))
	recv(t, ch)
	clk.advance(61 * time.Second) // the lease is due by the store's clock; its timer is a minute away
	if err := os.WriteFile(cfg, []byte("[principals\nid = "), 0o600); err != nil {
		t.Fatal(err)
	}

	// Both writes queue behind a running commit, so one batch takes them both.
	s.commitMu.Lock()
	settingsErr, otherErr := make(chan error, 1), make(chan error, 1)
	var other wire.Entry
	go func() { _, err := s.Put(ctx, alice, settingsPref(ns, "refused")); settingsErr <- err }()
	waitQueued(t, s, 1)
	go func() {
		e, err := s.Put(ctx, admin, putLease("service/tx", "b"))
		other = e
		otherErr <- err
	}()
	waitQueued(t, s, 2)
	s.commitMu.Unlock()

	wantCode(t, <-settingsErr, wire.CodeStorage)
	if err := <-otherErr; err != nil {
		t.Fatalf("a write of service/tx in the batch of a refused settings write: %v", err)
	}
	if other.Revision != lease.Revision+2 {
		t.Fatalf("the put committed at revision %d, want %d (after the due expiry)", other.Revision, lease.Revision+2)
	}
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdateExpire || m.Event.Revision != lease.Revision+1 {
		t.Fatalf("first update %+v, want the EXPIRE of the due lease", m)
	}
	if m := recv(t, ch); m.Event == nil || m.Event.Kind != wire.UpdatePut || m.Event.Key != "b" {
		t.Fatalf("second update %+v, want the PUT of b", m)
	}
	if r := nsRevision(t, s, ns); r != 1 {
		t.Fatalf("the refused settings write moved its namespace to revision %d", r)
	}
	if s.Unavailable() != nil {
		t.Fatalf("the store stopped: %v", s.Unavailable())
	}
}

// waitQueued waits until n mutations are queued for the next commit.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		s.qmu.Lock()
		queued := len(s.pending)
		s.qmu.Unlock()
		if queued >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d mutations queued, want %d", queued, n)
		}
		runtime.Gosched()
	}
}
