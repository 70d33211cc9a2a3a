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
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// mountTmpfs mounts a tmpfs of size (mount's notation, "4m") on a fresh directory and unmounts it at
// cleanup, after everything registered later (the store) is closed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs as root: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillFile appends to name until the file system refuses a write and returns that refusal.
func fillFile(t *testing.T, name string) error {
	t.Helper()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for range 1 << 14 { // 1 GiB: far more than any tmpfs this test mounts
		if _, err := f.Write(chunk); err != nil {
			return err
		}
	}
	t.Fatalf("wrote 1 GiB to %s without filling the file system", name)
	return nil
}

func TestDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/disk"

	acked := map[string]uint64{} // key -> revision of every acknowledged put
	var last uint64
	put := func(i int) (wire.Entry, error) {
		return s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: fmt.Sprintf("fill/%04d", i),
			Schema: "keeppeek.media-intent.v1", Document: proseIntentDoc(fmt.Sprintf("cam%d", i), 12)})
	}
	i := 0
	for ; i < 40; i++ {
		e, err := put(i)
		if err != nil {
			t.Fatalf("put %d before the disk is full: %v", i, err)
		}
		acked[e.Key], last = e.Revision, e.Revision
	}

	filler := filepath.Join(dir, "filler")
	if err := fillFile(t, filler); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v, want ENOSPC", err)
	}

	// Puts may still land in pages the database already holds; they must fail soon after.
	var storageErr error
	failedKey := ""
	for ; i < 2000; i++ {
		e, err := put(i)
		if err != nil {
			storageErr, failedKey = err, fmt.Sprintf("fill/%04d", i)
			break
		}
		if e.Revision != last+1 {
			t.Fatalf("put %d answered revision %d after %d", i, e.Revision, last)
		}
		acked[e.Key], last = e.Revision, e.Revision
	}
	if storageErr == nil {
		t.Fatalf("%d puts on a full 4 MiB tmpfs all succeeded", i)
	}
	if !errors.Is(storageErr, wire.ErrStorage) {
		t.Fatalf("a put on a full disk answered %v, want STORAGE", storageErr)
	}
	t.Logf("%d puts acknowledged, then: %v", len(acked), storageErr)

	// Nothing changed: every acknowledged entry is readable, the failed key is not, and the namespace
	// revision did not move.
	checkAcked := func(s *Store, when string) {
		t.Helper()
		for key, rev := range acked {
			e, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: key})
			if err != nil || e.Revision != rev {
				t.Fatalf("%s: Get %s: revision %d, %v; want revision %d", when, key, e.Revision, err, rev)
			}
		}
		var n int
		after := ""
		for {
			l, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, AfterKey: after, Limit: wire.MaxListLimit})
			if err != nil {
				t.Fatalf("%s: List: %v", when, err)
			}
			if l.Revision != last {
				t.Fatalf("%s: namespace revision %d, want %d", when, l.Revision, last)
			}
			n += len(l.Entries)
			if l.NextAfterKey == "" {
				break
			}
			after = l.NextAfterKey
		}
		if n != len(acked) {
			t.Fatalf("%s: List shows %d entries, %d were acknowledged", when, n, len(acked))
		}
	}
	checkAcked(s, "after the failed put")
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: ns, Key: failedKey}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the failed put's key %s: %v, want NOT_FOUND", failedKey, err)
	}

	// Free the space: the next put succeeds, one revision above the last acknowledged.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e, err := s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: failedKey, Schema: "keeppeek.media-intent.v1",
		Document: proseIntentDoc("again", 12)})
	if err != nil {
		t.Fatalf("put after freeing space: %v", err)
	}
	if e.Revision != last+1 {
		t.Fatalf("put after freeing space has revision %d, want %d", e.Revision, last+1)
	}
	acked[e.Key], last = e.Revision, e.Revision
	checkAcked(s, "after freeing space")

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := openAt(t, path, DefaultOptions())
	checkAcked(s2, "after reopening")
	rep, err := s2.VerifyAudit()
	if err != nil || !rep.OK() || rep.HeadSeq != last {
		t.Fatalf("audit after reopening: %v, %v; want intact with head seq %d", rep, err, last)
	}
	if err := s2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// When the database refuses a commit that also wrote a settings-backed namespace, the settings file,
// already rewritten, is put back: file, memory and database agree on the last acknowledged write.
func TestDiskFullPutsTheSettingsFileBack(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	const ns = "user/alice"
	cfg := filepath.Join(t.TempDir(), "stated.toml") // on a disk with room: only the database's is full
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: TOMLSettings(cfg, ns)}
	s := openAt(t, filepath.Join(dir, "state-store.db"), opts)
	ctx := ctxT(t)
	put := func(i int) (wire.Entry, error) {
		return s.Put(ctx, alice, wire.PutRequest{Namespace: ns, Key: fmt.Sprintf("prefs/%04d", i),
			Schema: "keeppeek.preference.v1", Document: []byte(`{"kind":"ui"}`)})
	}
	if _, err := put(0); err != nil {
		t.Fatal(err)
	}
	last := uint64(1)
	if err := fillFile(t, filepath.Join(dir, "filler")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v, want ENOSPC", err)
	}
	// Each write appends an audit record to the database, which soon needs a page it cannot have.
	failed := -1
	for i := 1; i < 1000; i++ {
		e, err := put(i)
		if err != nil {
			if !errors.Is(err, wire.ErrStorage) {
				t.Fatalf("settings put %d on a full database disk: %v, want STORAGE", i, err)
			}
			failed = i
			break
		}
		last = e.Revision
	}
	if failed < 0 {
		t.Fatal("1,000 settings writes on a full database disk all succeeded")
	}
	state, err := TOMLSettings(cfg, ns).Load()
	if err != nil {
		t.Fatal(err)
	}
	if state.Revision != last || len(state.Entries) != int(last) {
		t.Fatalf("settings file after the failed commit: revision %d with %d entries, want %d and %d", state.Revision, len(state.Entries), last, last)
	}
	for _, e := range state.Entries {
		if e.Key == fmt.Sprintf("prefs/%04d", failed) {
			t.Fatalf("the failed write %s is in the settings file", e.Key)
		}
	}
	if r := nsRevision(t, s, ns); r != last {
		t.Fatalf("namespace revision %d after the failed commit, want %d", r, last)
	}
}

// A start that moves the lease deadlines with a wall clock step taken while the store was stopped must
// record them, with its clock's anchor, before it serves: served from memory, they would be written by
// later commits beside entries the database still holds in the old time, under the old anchor, and the
// next start could not tell them apart. On a disk too full for that commit the store is unavailable,
// with the reason, and changes nothing; once there is room, the next start moves and records them.
func TestStartThatCannotRecordMovedDeadlines(t *testing.T) {
	h := installHostClocks(t)
	dir := mountTmpfs(t, "4m")
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, DefaultOptions())
	const ns = "service/disk"
	const leases = 1500
	first := mustPut(t, s, admin, ttlPut(ns, "leases/0000", time.Hour.Milliseconds()))
	for i := 1; i < leases; i++ {
		mustPut(t, s, admin, ttlPut(ns, fmt.Sprintf("leases/%04d", i), time.Hour.Milliseconds()))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	if err := fillFile(t, filler); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}
	h.step(2 * time.Hour)
	s, err := Open(path, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Unavailable(); r == nil || !strings.Contains(r.Error(), "moved with the wall clock") {
		t.Fatalf("a start that could not record the moved deadlines: %v, want unavailable naming them", r)
	}
	_ = s.Close()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, DefaultOptions())
	e, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: ns, Key: "leases/0000"})
	if err != nil || e.Revision != first.Revision || e.ExpiresAtMs-first.ExpiresAtMs < time.Hour.Milliseconds() {
		t.Fatalf("a lease once there is room: %+v, %v; want it live, its deadline moved by the step from %d", e, err, first.ExpiresAtMs)
	}
}
