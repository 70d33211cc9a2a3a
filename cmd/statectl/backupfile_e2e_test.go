package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// backup writes a temporary file beside FILE and renames it over FILE. Whatever FILE was is replaced:
// `statectl backup /dev/stdout > b.db` (a common way to give a tool "stdout") run as root replaced
// /dev/stdout's link with a regular file, and `statectl backup /dev/null` the device itself; a FIFO
// became a file, and a symbolic link to the operator's backup volume became a local file while the
// file it points to kept the old backup. "-" wrote a file named "-". FILE that exists must be a
// regular file (a link to one is followed, and the file it points to is replaced); anything else is
// refused before the download, and "-" is a usage error.
func TestBackupReplacesOnlyARegularFile(t *testing.T) {
	e := start(t, "")
	e.putLease("service/tx", "k")

	fifo := filepath.Join(e.dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link to something that is not a regular file is refused as that is (a link to the FIFO
	// stands for a link to a device, which a test run as root must not risk replacing).
	toFIFO := filepath.Join(e.dir, "to-fifo")
	if err := os.Symlink(fifo, toFIFO); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(e.dir, "dangling")
	if err := os.Symlink(filepath.Join(e.dir, "no-such-dir", "b.db"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{fifo, toFIFO, dangling} {
		before, err := os.Lstat(file)
		if err != nil {
			t.Fatal(err)
		}
		r := e.fails(1, "ERROR", "backup", file, "--json")
		if !strings.Contains(r.stderr, file) {
			t.Errorf("backup %s: the error does not name the file: %s", file, r)
		}
		if after, err := os.Lstat(file); err != nil || after.Mode() != before.Mode() {
			t.Errorf("backup %s replaced it: %v, mode %v, was %v", file, err, after.Mode(), before.Mode())
		}
	}
	if left, _ := filepath.Glob(filepath.Join(e.dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// A link to a regular file (elsewhere): the file it points to gets the backup, the link stays.
	vol := filepath.Join(e.dir, "volume")
	if err := os.Mkdir(vol, 0o700); err != nil {
		t.Fatal(err)
	}
	target := e.file("volume/store.db", "the previous backup")
	link := filepath.Join(e.dir, "latest.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	e.ok("backup", link)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("backup through a link replaced the link: %v %v", fi, err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) == "the previous backup" || len(b) < 4096 {
		t.Fatalf("the file the link points to was not replaced by the backup (%d bytes, %v)", len(b), err)
	}

	// "-" is not stdout.
	wd := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := e.command(ctx, "backup", "-")
	cmd.Dir = wd
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("backup - did not run: %s", out)
	}
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "statectl: USAGE: ") {
		t.Errorf("backup -: exit %d: %s", code, out)
	}
	if _, err := os.Lstat(filepath.Join(wd, "-")); !os.IsNotExist(err) {
		t.Errorf("backup - wrote a file named -: %v", err)
	}
}
