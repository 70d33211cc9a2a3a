package store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/wire"
)

// backupNamespaces are the namespaces the backup tests write.
var backupNamespaces = []string{"service/tx", "service/live", "user/alice"}

// storeView is what a client can see of a store: every namespace's entries and revision, and the
// engine's counters.
type storeView struct {
	lists map[string]ListResult
	stats Stats
}

func viewOf(t *testing.T, s *Store) storeView {
	t.Helper()
	v := storeView{lists: map[string]ListResult{}, stats: s.Stats()}
	for _, ns := range backupNamespaces {
		l, err := s.List(ctxT(t), admin, wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
		if err != nil {
			t.Fatalf("List %s: %v", ns, err)
		}
		if l.NextAfterKey != "" {
			t.Fatalf("List %s: more than one page", ns)
		}
		v.lists[ns] = l
	}
	return v
}

// backupFixture writes entries in backupNamespaces (with a delete, so a revision is above the entry
// count) to s.
func backupFixture(t *testing.T, s *Store) {
	t.Helper()
	for i := range 6 {
		mustPut(t, s, admin, putLease("service/tx", fmt.Sprintf("leases/l%d", i)))
	}
	mustPut(t, s, admin, wire.PutRequest{Namespace: "service/tx", Key: "leases/l0", Schema: "keeppeek.lease.v1",
		Document: leaseDoc("w2"), ExpectedRevision: i64(1)})
	if _, err := s.Delete(ctxT(t), admin, wire.DeleteRequest{Namespace: "service/tx", Key: "leases/l5"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for i := range 3 {
		mustPut(t, s, alice, wire.PutRequest{Namespace: "user/alice", Key: fmt.Sprintf("intents/i%d", i),
			Schema: "keeppeek.media-intent.v1", Document: proseIntentDoc(fmt.Sprintf("cam%d", i), i+1)})
	}
}

func restoreLeftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".restore-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBackupRestore(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	ctx := ctxT(t)
	backupFixture(t, s)

	// A writer puts new keys service/live w/000001, w/000002, ... (key n at revision n) while the
	// backup runs.
	stop := make(chan struct{})
	started := make(chan struct{})
	var wg sync.WaitGroup
	var writerErr error
	wg.Go(func() {
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			e, err := s.Put(ctx, admin, putLease("service/live", fmt.Sprintf("w/%06d", n)))
			if err != nil {
				writerErr = err
				return
			}
			if e.Revision != uint64(n) {
				writerErr = fmt.Errorf("w/%06d has revision %d", n, e.Revision)
				return
			}
			if n == 20 { // the backup starts mid-stream
				close(started)
			}
		}
	})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	defer halt() // no goroutine outlives the test, whatever fails
	stopWriter := func() {
		halt()
		if writerErr != nil {
			t.Fatalf("writer: %v", writerErr)
		}
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the writer made no put")
	}

	var backup bytes.Buffer
	n, err := s.Backup(ctx, admin, &backup)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if n != int64(backup.Len()) || n == 0 {
		t.Fatalf("Backup reported %d bytes, wrote %d", n, backup.Len())
	}
	var denied bytes.Buffer
	if _, err := s.Backup(ctx, alice, &denied); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("non-admin Backup: %v, want PERMISSION_DENIED", err)
	}
	if denied.Len() != 0 {
		t.Fatalf("a denied Backup wrote %d bytes", denied.Len())
	}
	// A write surely after the backup.
	mustPut(t, s, admin, putLease("service/tx", "leases/after-backup"))
	stopWriter()

	// The backup is a valid store on its own, taken in one read transaction: service/live holds
	// exactly keys 1..R at revisions 1..R, and the audit chain has one record per revision.
	copyPath := filepath.Join(t.TempDir(), "backup-copy.db")
	writeBytes(t, copyPath, backup.Bytes())
	sb := openAt(t, copyPath, DefaultOptions())
	want := viewOf(t, sb)
	live := want.lists["service/live"]
	if live.Revision == 0 || uint64(len(live.Entries)) != live.Revision {
		t.Fatalf("backup: service/live at revision %d holds %d entries", live.Revision, len(live.Entries))
	}
	for i, e := range live.Entries {
		if e.Key != fmt.Sprintf("w/%06d", i+1) || e.Revision != uint64(i+1) {
			t.Fatalf("backup: service/live entry %d is %s at revision %d", i, e.Key, e.Revision)
		}
	}
	var revSum uint64
	for _, l := range want.lists {
		revSum += l.Revision
	}
	rep, err := sb.VerifyAudit()
	if err != nil || !rep.OK() || rep.HeadSeq != revSum {
		t.Fatalf("backup audit: %v, %v; want intact with head seq %d", rep, err, revSum)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}

	// The live store moved on past the backup.
	before := viewOf(t, s)
	if before.lists["service/live"].Revision <= live.Revision && before.lists["service/tx"].Revision <= want.lists["service/tx"].Revision {
		t.Fatalf("the live store did not move past the backup")
	}
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/after-backup"}); err != nil {
		t.Fatalf("Get leases/after-backup: %v", err)
	}
	t.Logf("backup: %d bytes, service/live at revision %d; live store at %d", n, live.Revision, before.lists["service/live"].Revision)
	oldEpoch := s.Info().Epoch

	// Restore refuses while the store holds the file.
	if _, err := Restore(path, bytes.NewReader(backup.Bytes()), DefaultOptions()); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Restore over an open store: %v, want an error saying it is in use", err)
	}
	if _, err := s.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/after-backup"}); err != nil {
		t.Fatalf("Get after the refused restore: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	epoch, err := Restore(path, bytes.NewReader(backup.Bytes()), DefaultOptions())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if epoch == "" || epoch == oldEpoch {
		t.Fatalf("Restore returned epoch %q; the old one was %q", epoch, oldEpoch)
	}
	if left := restoreLeftovers(t, filepath.Dir(path)); len(left) != 0 {
		t.Fatalf("Restore left %v behind", left)
	}

	s2 := openAt(t, path, DefaultOptions())
	if got := s2.Info().Epoch; got != epoch {
		t.Fatalf("restored store reports epoch %q, Restore returned %q", got, epoch)
	}
	got := viewOf(t, s2)
	for _, ns := range backupNamespaces {
		if !reflect.DeepEqual(got.lists[ns], want.lists[ns]) {
			t.Errorf("%s after restore:\n got %+v\nwant %+v", ns, got.lists[ns], want.lists[ns])
		}
	}
	if !reflect.DeepEqual(got.stats, want.stats) {
		t.Errorf("stats after restore:\n got %+v\nwant %+v", got.stats, want.stats)
	}
	if _, err := s2.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/after-backup"}); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("a put made after the backup survived the restore: %v", err)
	}
	rep, err = s2.VerifyAudit()
	if err != nil || !rep.OK() || rep.HeadSeq != revSum {
		t.Fatalf("audit after restore: %v, %v; want intact with head seq %d", rep, err, revSum)
	}

	// Writes continue from the restored revisions.
	for _, ns := range []string{"service/tx", "service/live"} {
		e := mustPut(t, s2, admin, putLease(ns, "after-restore"))
		if e.Revision != want.lists[ns].Revision+1 {
			t.Errorf("first put in %s after restore has revision %d, want %d", ns, e.Revision, want.lists[ns].Revision+1)
		}
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRestoreRejectsInvalid(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	backupFixture(t, s)
	var good bytes.Buffer
	if _, err := s.Backup(ctxT(t), admin, &good); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	want := viewOf(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// A backup whose total_bytes disagrees with its namespaces' counters.
	badCounters := filepath.Join(t.TempDir(), "bad-counters.db")
	writeBytes(t, badCounters, good.Bytes())
	boltEditFile(t, badCounters, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaTotalBytes, []byte("12345"))
	})
	badCountersBytes, err := os.ReadFile(badCounters)
	if err != nil {
		t.Fatal(err)
	}
	// A backup cut short by its last page in use: pages its tree may reference lie past its end.
	truncated := filepath.Join(t.TempDir(), "truncated.db")
	writeBytes(t, truncated, good.Bytes())
	pageSize, _, pgid := boltMeta(t, truncated)
	if (pgid-1)*pageSize >= uint64(good.Len()) {
		t.Fatalf("backup layout: high-water page %d is not inside the %d-byte backup", pgid, good.Len())
	}
	truncatedBytes := good.Bytes()[:(pgid-1)*pageSize]
	garbage := make([]byte, 64<<10)
	_, _ = rand.Read(garbage)

	cases := []struct {
		name   string
		backup []byte
		want   string // in the error
	}{
		{"garbage", garbage, "not valid"},
		{"counters disagree", badCountersBytes, "total_bytes 12345 disagrees"},
		{"empty", nil, "not valid"},
		{"truncated", truncatedBytes, "not valid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			epoch, err := restoreRecovering(path, tc.backup)
			if err == nil {
				t.Fatalf("Restore accepted the backup (epoch %q)", epoch)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Restore: %v, want it to say %q", err, tc.want)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, orig) {
				t.Fatalf("a rejected restore changed the database file")
			}
			if left := restoreLeftovers(t, filepath.Dir(path)); len(left) != 0 {
				t.Fatalf("a rejected restore left %v behind", left)
			}
		})
	}

	// The store is as it was.
	s2 := openAt(t, path, DefaultOptions())
	got := viewOf(t, s2)
	if !reflect.DeepEqual(got.lists, want.lists) {
		t.Errorf("after rejected restores:\n got %+v\nwant %+v", got.lists, want.lists)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
}

// restoreRecovering calls Restore and turns a panic, or a memory fault while it reads the backup (on
// this goroutine), into an error, so a backup that crashes the validation fails its own test only.
func restoreRecovering(path string, backup []byte) (epoch string, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			epoch, err = "", fmt.Errorf("Restore panicked (it must reject the backup instead): %v", r)
		}
	}()
	return Restore(path, bytes.NewReader(backup), DefaultOptions())
}

// A damaged database is what a restore is for: Restore replaces a file bbolt cannot open, and the
// store opens served from the backup.
func TestRestoreOverADamagedDatabase(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	mustPut(t, s, admin, putLease("service/tx", "leases/a"))
	var backup bytes.Buffer
	if _, err := s.Backup(ctxT(t), admin, &backup); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writeBytes(t, path, bytes.Repeat([]byte("garbage!"), 4096))
	if _, err := Restore(path, bytes.NewReader(backup.Bytes()), DefaultOptions()); err != nil {
		t.Fatalf("Restore over a damaged database: %v", err)
	}
	s2 := openAt(t, path, DefaultOptions())
	if _, err := s2.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/a"}); err != nil {
		t.Fatalf("after the restore: %v", err)
	}
}
