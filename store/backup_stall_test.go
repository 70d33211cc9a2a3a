package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// A backup's read transaction stays open for as long as its writer takes. A writer that stops
// reading (a slow network, a stuck client) must not hold back the commits meanwhile: bbolt remaps
// the database as it grows, and a remap waits for every open read transaction, so a commit that
// grows the file would wait on the backup's writer for as long as it is stuck. The backup itself
// is still the state at its start.
func TestBackupIntoAStuckWriterHoldsNoCommitBack(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	mustPut(t, s, admin, putLease("service/tx", "before"))
	pr, pw := io.Pipe()
	backedUp := make(chan error, 1)
	go func() {
		_, err := s.Backup(ctx, admin, pw)
		pw.CloseWithError(err)
		backedUp <- err
	}()
	puts := make(chan error, 1)
	// Runs before the store's own cleanup closes it: a commit still waiting on the backup is let go,
	// and the writer below ends.
	t.Cleanup(func() {
		pr.CloseWithError(errors.New("test over"))
		<-backedUp
		<-puts
	})
	head := make([]byte, 4096)
	if _, err := io.ReadFull(pr, head); err != nil {
		close(puts)
		t.Fatalf("the backup's first bytes: %v", err)
	}
	// The backup's transaction is open, its writer stuck. About 4 MiB of documents grow the file
	// well past the size bbolt maps it at first. A put that leads its own commit waits for it
	// whatever its context says, so the wait is bounded here.
	go func() {
		for i := range 512 {
			req := wire.PutRequest{Namespace: "user/alice", Key: fmt.Sprintf("intents/i%03d", i),
				Schema: "keeppeek.media-intent.v1", Document: proseIntentDoc(fmt.Sprintf("cam%d", i), 8)}
			if _, err := s.Put(ctx, alice, req); err != nil {
				puts <- fmt.Errorf("put %d: %w", i, err)
				return
			}
		}
		puts <- nil
	}()
	select {
	case err := <-puts:
		puts <- err // for the cleanup
		if err != nil {
			t.Fatalf("while a backup's writer is stuck: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("puts still wait after %v on a backup whose writer is stuck", testTimeout)
	}
	buf := bytes.NewBuffer(head)
	if _, err := io.Copy(buf, pr); err != nil {
		t.Fatalf("reading the backup: %v", err)
	}
	err := <-backedUp
	backedUp <- err // for the cleanup
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	path := filepath.Join(t.TempDir(), "restored.db")
	if _, err := Restore(path, buf, DefaultOptions()); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	r := openAt(t, path, DefaultOptions())
	if _, err := r.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "before"}); err != nil {
		t.Fatalf("the backup lacks what was there before it: %v", err)
	}
	if rev := nsRevision(t, r, "user/alice"); rev != 0 {
		t.Fatalf("the backup holds user/alice at revision %d: puts made after it began", rev)
	}
}

// cancelOnWrite is a backup writer whose caller gives up during the first write.
type cancelOnWrite struct {
	cancel context.CancelFunc
	writes int
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	c.writes++
	c.cancel()
	return len(p), nil
}

// Backup honours its context while it writes: once it ends, the next write is not made, the read
// transaction ends and Backup returns the context's error.
func TestBackupStopsWhenItsContextEnds(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	backupFixture(t, s)
	ctx, cancel := context.WithCancel(ctxT(t))
	w := &cancelOnWrite{cancel: cancel}
	_, err := s.Backup(ctx, admin, w)
	if !errors.Is(err, context.Canceled) || w.writes != 1 {
		t.Fatalf("Backup whose context ended at its first write: %v after %d writes", err, w.writes)
	}
	// The store is as it was: the next backup is whole.
	var buf bytes.Buffer
	if _, err := s.Backup(ctxT(t), admin, &buf); err != nil {
		t.Fatalf("the next Backup: %v", err)
	}
	if _, err := Restore(filepath.Join(t.TempDir(), "restored.db"), &buf, DefaultOptions()); err != nil {
		t.Fatalf("Restore of the next backup: %v", err)
	}
}

// The database file grows with what it holds, not with the address space mapped for it (see
// initialMmapSize): a store with a few entries takes well under a MiB of disk.
func TestSmallDatabaseStaysSmallOnDisk(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	backupFixture(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 1<<20 {
		t.Fatalf("a database of a few entries is %d bytes on disk", fi.Size())
	}
}
