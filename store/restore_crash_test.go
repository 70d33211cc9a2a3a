package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// restoreChildEnv carries the database path to the child process of TestRestoreKilledMidCopy.
const restoreChildEnv = "STORE_RESTORE_CHILD"

// TestRestoreChild is the child process of TestRestoreKilledMidCopy, not a test of its own: without
// STORE_RESTORE_CHILD it returns at once. With it, it restores the database at that path from its
// standard input, which the parent never finishes.
func TestRestoreChild(t *testing.T) {
	path := os.Getenv(restoreChildEnv)
	if path == "" {
		return
	}
	_, err := Restore(path, os.Stdin, DefaultOptions())
	fmt.Fprintln(os.Stderr, "restore returned:", err)
	os.Exit(2)
}

// A restore killed while it copies the backup leaves the database as it was, and the next restore
// clears the half-written copy the killed one left beside it (as large as a database, one more for
// every restore cut short), then succeeds.
func TestRestoreKilledMidCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, DefaultOptions())
	mustPut(t, s, admin, putLease("service/tx", "before"))
	oldEpoch := s.Info().Epoch
	var backup bytes.Buffer
	if _, err := s.Backup(ctxT(t), admin, &backup); err != nil {
		t.Fatal(err)
	}
	s.Close()

	killed := map[string]bool{} // the copies of killed restores
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRestoreChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), restoreChildEnv+"="+path)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Half the backup, then wait until the child's copy holds it: it is killed mid-copy.
		half := backup.Bytes()[:backup.Len()/2]
		if _, err := stdin.Write(half); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(testTimeout)
	wait:
		for {
			for _, name := range restoreLeftovers(t, dir) {
				if fi, err := os.Stat(name); err == nil && !killed[name] && fi.Size() >= int64(len(half)) {
					killed[name] = true
					break wait
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the child's copy never reached %d bytes; stderr: %s", round, len(half), stderr.String())
			}
			time.Sleep(5 * time.Millisecond) // polling the file system: there is no event to wait on
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cancel()
	}
	if left := restoreLeftovers(t, dir); len(left) == 0 {
		t.Fatal("a killed restore left no copy: the test did not kill it mid-copy")
	}
	s = openAt(t, path, DefaultOptions())
	if s.Info().Epoch != oldEpoch {
		t.Fatalf("a killed restore changed the epoch")
	}
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "before"}); err != nil {
		t.Fatalf("after a killed restore: %v", err)
	}
	s.Close()

	epoch, err := Restore(path, bytes.NewReader(backup.Bytes()), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if left := restoreLeftovers(t, dir); len(left) != 0 {
		t.Fatalf("after a restore that succeeded, the killed ones' copies are still there: %v", left)
	}
	s = openAt(t, path, DefaultOptions())
	if s.Info().Epoch != epoch {
		t.Fatalf("epoch %s after the restore, want %s", s.Info().Epoch, epoch)
	}
}
