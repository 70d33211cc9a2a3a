package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// Two stores opening the same new database at once: the lock lets one serve; the other waits for it
// and, when its wait ends, opens unavailable. Never do both serve, each its own file (the loser's
// rename of a fresh database over the winner's would leave the winner writing to a file no longer at
// path, its acknowledged writes gone at the next start).
func TestFirstOpenRaceServesOneFile(t *testing.T) {
	opts := DefaultOptions()
	opts.OpenTimeout = 50 * time.Millisecond // the loser waits this long for the winner's lock
	for round := range 40 {
		path := filepath.Join(t.TempDir(), "state-store.db")
		var wg sync.WaitGroup
		stores := make([]*Store, 2)
		start := make(chan struct{})
		for i := range stores {
			wg.Go(func() {
				<-start
				s, err := Open(path, opts)
				if err != nil {
					t.Errorf("Open: %v", err)
					return
				}
				stores[i] = s
			})
		}
		close(start)
		wg.Wait()
		serving := 0
		for _, s := range stores {
			if s != nil && s.Unavailable() == nil {
				serving++
			}
		}
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
		if serving != 1 {
			t.Fatalf("round %d: %d stores serve the same new database", round, serving)
		}
	}
}

// OpenTimeout bounds the wait for the file lock, not the work around it: a new database whose lock
// is free opens and serves however long its creation took (a slow disk, a loaded machine), even past
// the timeout. It used to time out there, and TestFirstOpenRaceServesOneFile, with 50 ms, then found
// neither racing store serving.
func TestOpenTimeoutBoundsOnlyTheLockWait(t *testing.T) {
	opts := DefaultOptions()
	opts.OpenTimeout = time.Nanosecond // creating or checking the database alone takes longer
	existing := filepath.Join(t.TempDir(), "state-store.db")
	openAt(t, existing, DefaultOptions()).Close()
	for name, path := range map[string]string{"new": filepath.Join(t.TempDir(), "state-store.db"), "existing": existing} {
		s, err := Open(path, opts)
		if err != nil {
			t.Fatalf("%s database: Open: %v", name, err)
		}
		if err := s.Unavailable(); err != nil {
			t.Errorf("%s database with a free lock: unavailable: %v", name, err)
		}
		s.Close()
	}
}

// descriptors counts this process's open descriptors of the file at path (Linux: /proc/self/fd).
func descriptors(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// A store that opens while a restore runs (a supervisor restarting the server, say) waits for the
// restore's lock, and then serves the restored database: not the file the restore replaced, which is
// no longer at path, where every write it acknowledged would be lost at the next start.
func TestOpenDuringRestoreServesTheRestoredFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("follows the store's descriptors through /proc")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "state-store.db")
	// The database in place: one entry. The backup: another store, with another entry.
	old := openAt(t, path, DefaultOptions())
	mustPut(t, old, admin, putLease("service/tx", "before-restore"))
	old.Close()
	src, _ := openT(t, DefaultOptions())
	mustPut(t, src, admin, putLease("service/tx", "from-backup"))
	var backup bytes.Buffer
	if _, err := src.Backup(ctxT(t), admin, &backup); err != nil {
		t.Fatal(err)
	}

	pr, pw := io.Pipe()
	type restored struct {
		epoch string
		err   error
	}
	restoreDone := make(chan restored, 1)
	go func() {
		epoch, err := Restore(path, pr, DefaultOptions())
		pr.CloseWithError(err)
		restoreDone <- restored{epoch, err}
	}()
	raw := backup.Bytes()
	if _, err := pw.Write(raw[:1]); err != nil { // returns once Restore reads: it holds the lock
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.OpenTimeout = testTimeout
	opened := make(chan *Store, 1)
	go func() {
		s, err := Open(path, opts)
		if err != nil {
			t.Errorf("Open: %v", err)
		}
		opened <- s
	}()
	// Wait until the opening store has the file open, waiting on the lock: the restore's descriptor and
	// its own.
	deadline := time.Now().Add(testTimeout)
	for descriptors(t, path) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the opening store never opened the database file")
		}
		time.Sleep(time.Millisecond) // polling /proc: there is no event to wait on
	}
	if _, err := pw.Write(raw[1:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := <-restoreDone
	if r.err != nil {
		t.Fatalf("Restore: %v", r.err)
	}
	s := <-opened
	if s == nil {
		t.FailNow()
	}
	defer s.Close()
	if err := s.Unavailable(); err != nil {
		t.Fatalf("the store opened during the restore is unavailable: %v", err)
	}
	if got := s.Info().Epoch; got != r.epoch {
		t.Fatalf("the store opened during the restore serves epoch %s, not the restored %s", got, r.epoch)
	}
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "from-backup"}); err != nil {
		t.Fatalf("the restored entry: %v", err)
	}
}

// A store that opens while another still has the database open and writes to it (a server still
// stopping when the next one starts) waits for the lock, and then serves: its check of the file's pages
// never reads pages the other rewrites meanwhile, which would call a sound database corrupt and leave
// the new store unavailable.
func TestOpenWhileAnotherStoreWritesWaitsForIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state-store.db")
	doc := func(n int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"holder":"w","claimed_at_ms":1,"purpose":%q}`, strings.Repeat("x y ", n)))
	}
	// Enough pages that checking them takes a while, as a real database's would.
	first := openAt(t, path, DefaultOptions())
	var fill sync.WaitGroup
	for w := range 8 {
		fill.Go(func() {
			for i := w; i < 1200; i += 8 {
				req := putLease("service/fill", fmt.Sprintf("k%04d", i))
				req.Document = doc(375)
				if _, err := first.Put(ctxT(t), admin, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	fill.Wait()
	first.Close()

	opts := DefaultOptions()
	opts.OpenTimeout = testTimeout
	for round := range 4 {
		old := openAt(t, path, DefaultOptions())
		stop := make(chan struct{})
		var writing sync.WaitGroup
		for w := range 4 {
			writing.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					req := putLease("service/tx", fmt.Sprintf("r%d/w%d/k%d", round, w, i%200))
					req.Document = doc(i % 500)
					if _, err := old.Put(ctxT(t), admin, req); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		opened := make(chan *Store, 1)
		go func() {
			s, err := Open(path, opts)
			if err != nil {
				t.Errorf("Open: %v", err)
			}
			opened <- s
		}()
		// The old store writes on for a while (its commits are what the new one must not read
		// half-way), then stops; the new one, waiting for the lock, opens.
		var more sync.WaitGroup
		for w := range 4 {
			more.Go(func() {
				for i := range 40 {
					if _, err := old.Put(ctxT(t), admin, putLease("service/more", fmt.Sprintf("r%d/w%d/%d", round, w, i))); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		more.Wait()
		close(stop)
		writing.Wait()
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		s := <-opened
		if s == nil {
			t.FailNow()
		}
		err := s.Unavailable()
		s.Close()
		if err != nil {
			t.Fatalf("round %d: a store opened while the last one was still writing: %v", round, err)
		}
	}
}
