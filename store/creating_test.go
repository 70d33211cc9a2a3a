package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// creationLeftovers lists the files beside path that createBolt names its new databases by.
func creationLeftovers(t *testing.T, path string) []string {
	t.Helper()
	left, err := filepath.Glob(path + ".creating-*")
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// createKillChildEnv carries the database path of TestCreateKillChild.
const createKillChildEnv = "STORE_CREATE_KILL_CHILD"

// TestCreateKillChild is the child process of TestOpenRemovesTheLeftoverOfAKilledCreation, not a test
// of its own: without STORE_CREATE_KILL_CHILD it returns at once. It opens a new database and, while
// createBolt builds it beside its path, says so and waits to be killed.
func TestCreateKillChild(t *testing.T) {
	path := os.Getenv(createKillChildEnv)
	if path == "" {
		return
	}
	whileCreating = func(string) {
		fmt.Println("creating")
		select {} // killed here
	}
	s, err := Open(path, DefaultOptions())
	fmt.Println("open:", err, s.Unavailable())
	os.Exit(3) // never reached
}

// A first start killed (SIGKILL) while it creates the database leaves its half-made database beside
// the path. The next start, which creates the database, removes it, and so does any later start:
// nothing is left to grow in the data directory with every interrupted first start.
func TestOpenRemovesTheLeftoverOfAKilledCreation(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock, no SIGKILL")
	}
	path := filepath.Join(t.TempDir(), "state-store.db")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCreateKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), createKillChildEnv+"="+path, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "creating" {
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if left := creationLeftovers(t, path); len(left) != 1 {
		t.Fatalf("the killed creation left %q, want one file", left)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the killed creation put a database at the path: %v", err)
	}

	s := openAt(t, path, DefaultOptions())
	if left := creationLeftovers(t, path); len(left) != 0 {
		t.Fatalf("after the next start: %q left beside the database", left)
	}
	mustPut(t, s, admin, putLease("service/tx", "a"))
	s.Close()

	// A leftover made as createBolt makes its file (killed before bbolt had it), beside a database that
	// exists: a later start removes it too.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".creating-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	s = openAt(t, path, DefaultOptions())
	if left := creationLeftovers(t, path); len(left) != 0 {
		t.Fatalf("after a later start: %q left beside the database", left)
	}
	if _, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "a"}); err != nil {
		t.Fatalf("the database after the sweep: %v", err)
	}
}

// A store that opens the database while another builds it (bbolt holds the file being built): the
// opener leaves that file alone, and the builder, once done, finds the database made and opens it.
func TestOpenLeavesADatabaseBeingCreatedAlone(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	path := filepath.Join(t.TempDir(), "state-store.db")
	var epoch string
	var building string
	whileCreating = func(tmp string) {
		whileCreating = func(string) {}
		building = tmp
		other := openAt(t, path, DefaultOptions())
		epoch = other.Info().Epoch
		if _, err := os.Stat(tmp); err != nil {
			t.Errorf("the file being created was taken by a store that opened meanwhile: %v", err)
		}
		other.Close()
	}
	t.Cleanup(func() { whileCreating = func(string) {} })
	s := openAt(t, path, DefaultOptions())
	if building == "" {
		t.Fatal("the hook never ran")
	}
	if got := s.Info().Epoch; got != epoch {
		t.Fatalf("the creator serves epoch %s, the database made meanwhile is %s", got, epoch)
	}
	if left := creationLeftovers(t, path); len(left) != 0 {
		t.Fatalf("left beside the database: %q", left)
	}
}

// A store that opens the database in the instant a creator has closed its new file and not yet
// linked it into place (nothing holds the file then) may remove that file as a leftover; the creator
// must then open the database that exists, not fail.
func TestCreatorWhoseFileWasSweptOpensTheDatabase(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	path := filepath.Join(t.TempDir(), "state-store.db")
	var epoch string
	beforeCreateLink = func(tmp string) {
		beforeCreateLink = func(string) {}
		other := openAt(t, path, DefaultOptions())
		epoch = other.Info().Epoch
		other.Close()
	}
	t.Cleanup(func() { beforeCreateLink = func(string) {} })
	s, err := Open(path, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Unavailable(); r != nil {
		t.Fatalf("the creator whose file was swept: unavailable: %v", r)
	}
	if got := s.Info().Epoch; got != epoch {
		t.Fatalf("the creator serves epoch %s, the database made meanwhile is %s", got, epoch)
	}
	if left := creationLeftovers(t, path); len(left) != 0 {
		t.Fatalf("left beside the database: %q", left)
	}
}
