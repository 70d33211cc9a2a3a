package store

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// backupHolding returns the backup of a new store that holds one entry, service/tx:key.
func backupHolding(t *testing.T, key string) []byte {
	t.Helper()
	src, _ := openT(t, DefaultOptions())
	mustPut(t, src, admin, putLease("service/tx", key))
	var b bytes.Buffer
	if _, err := src.Backup(ctxT(t), admin, &b); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type restoreResult struct {
	epoch string
	err   error
}

// restoreFromPipe starts a Restore of path that reads its backup from the returned pipe, and returns
// once it has read the first byte: its copy of the backup then exists beside path.
func restoreFromPipe(t *testing.T, path string, backup []byte) (*io.PipeWriter, <-chan restoreResult) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan restoreResult, 1)
	go func() {
		epoch, err := Restore(path, pr, DefaultOptions())
		pr.CloseWithError(err)
		done <- restoreResult{epoch, err}
	}()
	if _, err := pw.Write(backup[:1]); err != nil { // returns once Restore reads
		t.Fatal(err)
	}
	return pw, done
}

// Two restores into a data directory with no database yet (a new machine): no database lock orders
// them. The second used to remove the first's copy of its backup as a leftover of a restore cut short;
// the first then validated a missing file, which the open created as a new, empty database, and
// renamed that into place: it reported success, and the store served neither backup.
func TestConcurrentRestoresIntoANewDirectory(t *testing.T) {
	a, b := backupHolding(t, "from-a"), backupHolding(t, "from-b")
	path := filepath.Join(t.TempDir(), "state-store.db")
	pw, done := restoreFromPipe(t, path, a)
	epochB, errB := Restore(path, bytes.NewReader(b), DefaultOptions())
	if _, err := pw.Write(a[1:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ra := <-done
	if errB == nil {
		t.Fatalf("a second restore ran while another restore into the same directory was copying (epoch %s)", epochB)
	}
	if !strings.Contains(errB.Error(), "another restore") {
		t.Errorf("second restore: %v, want it to say another restore is running", errB)
	}
	if ra.err != nil {
		t.Fatalf("the first restore: %v", ra.err)
	}
	s := openAt(t, path, DefaultOptions())
	if got := s.Info().Epoch; got != ra.epoch {
		t.Fatalf("the store serves epoch %s, the restore reported %s", got, ra.epoch)
	}
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "from-a"}); err != nil {
		t.Fatalf("the restore reported success, and its backup's entry: %v", err)
	}
	if left := restoreLeftovers(t, filepath.Dir(path)); len(left) != 0 {
		t.Fatalf("restores left %v behind", left)
	}
}

// A store that starts while a restore into a path with no database yet is copying creates a database
// there and serves it. The restore used to rename its copy over that file: the store went on
// acknowledging writes into a file no longer at path, all of them gone at the next start. It must
// refuse instead (the database is in use), and leave the served one in place.
func TestRestoreIntoAMissingPathNeverReplacesAServedDatabase(t *testing.T) {
	a := backupHolding(t, "from-a")
	path := filepath.Join(t.TempDir(), "state-store.db")
	pw, done := restoreFromPipe(t, path, a)
	s := openAt(t, path, DefaultOptions())
	mustPut(t, s, admin, putLease("service/tx", "acknowledged"))
	if _, err := pw.Write(a[1:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "in use") {
		t.Errorf("Restore over a database a running store created meanwhile: %v (epoch %q), want it refused as in use", r.err, r.epoch)
	}
	mustPut(t, s, admin, putLease("service/tx", "acknowledged-after"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, path, DefaultOptions())
	for _, key := range []string{"acknowledged", "acknowledged-after"} {
		if _, err := s2.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: key}); err != nil {
			t.Errorf("an acknowledged write after the restore: %s: %v", key, err)
		}
	}
	if left := restoreLeftovers(t, filepath.Dir(path)); len(left) != 0 {
		t.Fatalf("the refused restore left %v behind", left)
	}

	// Once the store is stopped, the same restore goes through: the database is replaced.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	epoch, err := Restore(path, bytes.NewReader(a), DefaultOptions())
	if err != nil {
		t.Fatalf("Restore with the store stopped: %v", err)
	}
	s3 := openAt(t, path, DefaultOptions())
	if s3.Info().Epoch != epoch {
		t.Fatalf("epoch %s, the restore reported %s", s3.Info().Epoch, epoch)
	}
	if _, err := s3.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "from-a"}); err != nil {
		t.Fatalf("the restored entry: %v", err)
	}
}

// A restore into a path with no database, with nothing racing it, puts the backup in place.
func TestRestoreIntoAMissingPath(t *testing.T) {
	a := backupHolding(t, "from-a")
	path := filepath.Join(t.TempDir(), "state-store.db")
	epoch, err := Restore(path, bytes.NewReader(a), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if left := restoreLeftovers(t, filepath.Dir(path)); len(left) != 0 {
		t.Fatalf("the restore left %v behind", left)
	}
	s := openAt(t, path, DefaultOptions())
	if s.Info().Epoch != epoch {
		t.Fatalf("epoch %s, the restore reported %s", s.Info().Epoch, epoch)
	}
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "from-a"}); err != nil {
		t.Fatalf("the restored entry: %v", err)
	}
}

// The validation of a restore's copy never creates it: a copy that is gone is an error, not a new,
// empty database that would pass every check and be renamed into place.
func TestRestoreValidationNeverCreatesItsCopy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), ".restore-gone.db")
	if epoch, err := validateBackup(missing, DefaultOptions()); err == nil {
		t.Fatalf("a missing copy validated (epoch %s)", epoch)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("validating a missing copy made one: %v", err)
	}
}
