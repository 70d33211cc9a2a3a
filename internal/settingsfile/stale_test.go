package settingsfile

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stuckWriterEnv names the configuration file a helper process writes; it stops just before the
// rename, with its temporary file written, and waits to be killed.
const stuckWriterEnv = "SETTINGSFILE_STUCK_WRITER"

// stuckWriter is the helper process: it saves a section of path and, once its temporary file is
// written, says "ready" on stdout and waits for ever.
func stuckWriter(path string) {
	beforeRename = func(string) {
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour) // until killed (select{} would be a deadlock the runtime ends)
		}
	}
	err := Open(path).Save("service/a", State{Revision: 7})
	fmt.Fprintln(os.Stderr, "stuck writer: Save returned:", err)
	os.Exit(3)
}

// startStuckWriter starts the helper process on path and waits until its temporary file is written.
func startStuckWriter(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stuckWriterEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("helper said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the helper process never wrote its temporary file")
	}
	return cmd
}

// tempFiles lists the temporary files of Save beside path (.<name>.tmp-<digits>).
func tempFiles(t *testing.T, path string) []string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-[0-9]*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if strings.Trim(strings.TrimPrefix(filepath.Base(m), "."+filepath.Base(path)+".tmp-"), "0123456789") == "" {
			out = append(out, m)
		}
	}
	return out
}

// A process killed during a Save (stated, on SIGKILL or a power cut) leaves its temporary file
// beside the configuration file, and nothing ever removed it: each such kill left one more copy of
// the configuration, with its passwords, in the directory. The first read of a File removes the
// temporary files that no live writer holds; a temporary file a live writer, in this process or
// another, is writing is left alone, and that writer's Save goes through.
func TestStaleTemporaryFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	// A file of another configuration whose name merely starts like one of ours is not touched.
	other := filepath.Join(dir, ".stated.toml.tmp-x.tmp-123")
	writeFile(t, other, "x", 0o600)

	writer := startStuckWriter(t, path)
	live := tempFiles(t, path)
	if len(live) != 1 {
		t.Fatalf("temporary files while the helper writes: %q", live)
	}
	// A File's first read while the writer lives leaves its temporary file.
	if _, err := Open(path).Namespaces(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live[0]); err != nil {
		t.Fatalf("the temporary file of a live writer was removed: %v", err)
	}
	// The writer is killed mid-write: its temporary file stays behind, until a File reads.
	if err := writer.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = writer.Wait()
	if got := tempFiles(t, path); len(got) != 1 {
		t.Fatalf("temporary files after the kill: %q", got)
	}
	f := Open(path)
	if s, err := f.Load("service/a"); err != nil || s.Revision != 0 {
		t.Fatalf("Load: %+v %v (the killed write must not have landed)", s, err)
	}
	if got := tempFiles(t, path); len(got) != 0 {
		t.Fatalf("a dead writer's temporary files are still there: %q", got)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another file was removed: %v", err)
	}

	// In this process: a Save that is writing keeps its temporary file while another File's first
	// read sweeps, and then goes through.
	done := make(chan error, 1)
	reached, release := make(chan struct{}), make(chan struct{})
	hookBeforeRename(t, func(string) {
		close(reached)
		<-release
	})
	go func() { done <- f.Save("service/a", State{Revision: 4}) }()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("Save never reached its rename")
	}
	if _, err := Open(path).Namespaces(); err != nil {
		t.Fatal(err)
	}
	if got := tempFiles(t, path); len(got) != 1 {
		t.Fatalf("temporary files of a Save in progress after another File's sweep: %q", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the Save whose temporary file survived the sweep: %v", err)
	}
	if s, err := Open(path).Load("service/a"); err != nil || s.Revision != 4 {
		t.Fatalf("after the Save: %+v %v", s, err)
	}
	if got := tempFiles(t, path); len(got) != 0 {
		t.Fatalf("temporary files after the Save: %q", got)
	}
}
