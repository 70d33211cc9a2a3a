package settingsfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const principalsContent = `data_dir = "./x"

[[principals]]
id = "coordinator"
admin = true
password = "pw"
`

// hookBeforeRename installs fn as the step just before Save's check and rename, for the test.
func hookBeforeRename(t *testing.T, fn func(path string)) {
	t.Helper()
	beforeRename = fn
	t.Cleanup(func() { beforeRename = func(string) {} })
}

// An editor that rewrites the file in place truncates it and then writes it. A Save that read it
// in between saw an empty file: it wrote back only its own section, and the principals, the rest of
// the configuration and the edit were gone (stated would restart with the credential-less dev
// principal). Save now sees that the file changed before it renames, and reads it again.
func TestSaveRereadsAFileRewrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	// The editor's truncation has happened when Save reads; its write lands before Save renames.
	edited := principalsContent + "\n[[principals]]\nid = \"alice\"\npassword = \"alice-pw\"\n"
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	calls := 0
	hookBeforeRename(t, func(string) {
		calls++
		if calls == 1 {
			f, err := os.OpenFile(path, os.O_WRONLY, 0) // in place: the same inode
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(edited); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err := Open(path).Save("service/a", State{Revision: 2}); err != nil {
		t.Fatal(err)
	}
	m := decodeMap(t, readFile(t, path))
	ps, _ := m["principals"].([]map[string]any)
	if m["data_dir"] != "./x" || len(ps) != 2 || ps[1]["id"] != "alice" {
		t.Fatalf("the file lost the configuration written while Save ran:\n%s", readFile(t, path))
	}
	if s, err := Open(path).Load("service/a"); err != nil || s.Revision != 2 {
		t.Fatalf("the section: %+v %v", s, err)
	}
	if calls != 2 {
		t.Fatalf("Save wrote %d times, want 2 (once more after the change)", calls)
	}
	assertNoTempFiles(t, dir, "stated.toml")
}

// An edit saved with a rename (a new inode) between Save's read and its rename is kept too.
func TestSaveRereadsAFileReplacedDuringTheWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	calls := 0
	hookBeforeRename(t, func(string) {
		calls++
		if calls == 1 {
			tmp := filepath.Join(dir, "edit.tmp")
			writeFile(t, tmp, strings.Replace(principalsContent, `"./x"`, `"./y"`, 1), 0o600)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err := Open(path).Save("service/a", State{Revision: 1}); err != nil {
		t.Fatal(err)
	}
	if m := decodeMap(t, readFile(t, path)); m["data_dir"] != "./y" {
		t.Fatalf("the edit was undone:\n%s", readFile(t, path))
	}
}

// A file that changes at every attempt is not overwritten: Save gives up with an error that says the
// file was not written.
func TestSaveGivesUpOnAFileThatKeepsChanging(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	calls := 0
	var last string
	hookBeforeRename(t, func(string) {
		calls++
		last = principalsContent + strings.Repeat("#\n", calls)
		writeFile(t, path, last, 0o600)
	})
	err := Open(path).Save("service/a", State{Revision: 1})
	if err == nil || !errors.Is(err, ErrNotWritten) || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("Save of a file that keeps changing: %v", err)
	}
	if calls != saveAttempts {
		t.Fatalf("%d attempts, want %d", calls, saveAttempts)
	}
	if got := string(readFile(t, path)); got != last {
		t.Fatalf("the file was overwritten:\n%s", got)
	}
	assertNoTempFiles(t, dir, "stated.toml")
}

// A symbolic link whose file is missing is followed too: Save creates the file it names and the
// link stays, as it does for a link to a file that exists. It used to replace the link.
func TestSaveFollowsADanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link.toml")
	target := filepath.Join(dir, "etc", "stated.toml")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("etc", "stated.toml"), link); err != nil {
		t.Fatal(err)
	}
	if err := Open(link).Save("service/a", State{Revision: 3}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if s, err := Open(target).Load("service/a"); err != nil || s.Revision != 3 {
		t.Fatalf("the file behind the link: %+v %v", s, err)
	}
	// A loop of links is an error, and nothing is written.
	a, b := filepath.Join(dir, "a.toml"), filepath.Join(dir, "b.toml")
	if err := os.Symlink("b.toml", a); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.toml", b); err != nil {
		t.Fatal(err)
	}
	if err := Open(a).Save("service/a", State{Revision: 1}); err == nil || !errors.Is(err, ErrNotWritten) {
		t.Fatalf("Save through a loop of links: %v", err)
	}
	if _, err := Open(a).Load("service/a"); err == nil {
		t.Fatal("Load through a loop of links succeeded")
	}
}

// Every error of Save that left the file as it was wraps ErrNotWritten, so that a caller can tell
// "nothing changed" from "the new content may be in place" without reading the file again (a file
// an operator left unparsable cannot be read again, and is not written either).
func TestSaveErrorsSayTheFileWasNotWritten(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.toml")
	writeFile(t, broken, principalsContent+"\n[[principals]\n", 0o600)
	err := Open(broken).Save("service/a", State{Revision: 1})
	if err == nil || !errors.Is(err, ErrNotWritten) {
		t.Fatalf("Save of an unparsable file: %v", err)
	}
	if got := string(readFile(t, broken)); got != principalsContent+"\n[[principals]\n" {
		t.Fatalf("the unparsable file changed:\n%s", got)
	}
	asDir := filepath.Join(dir, "isdir.toml")
	if err := os.Mkdir(asDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Open(asDir).Save("service/a", State{Revision: 1}); err == nil || !errors.Is(err, ErrNotWritten) {
		t.Fatalf("Save of a directory: %v", err)
	}
	if _, err := Open(asDir).Load("service/a"); err == nil {
		t.Fatal("Load of a directory succeeded")
	}
	if err := Open(filepath.Join(dir, "ok.toml")).Save("service/a", State{Revision: 1, Entries: []Entry{{Key: "k"}}}); err == nil ||
		!errors.Is(err, ErrNotWritten) {
		t.Fatalf("Save of an invalid state: %v", err)
	}
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	rename = func(string, string) error { return errors.New("injected rename failure") }
	t.Cleanup(func() { rename = os.Rename })
	if err := Open(path).Save("service/a", State{Revision: 1}); err == nil || !errors.Is(err, ErrNotWritten) ||
		!strings.Contains(err.Error(), "injected rename failure") {
		t.Fatalf("Save whose rename failed: %v", err)
	}
}

// A named pipe at the path is refused at once: opening it to read would wait for a writer for ever.
func TestNamedPipeIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 2)
	go func() {
		_, err := Open(path).Load("service/a")
		done <- err
	}()
	go func() { done <- Open(path).Save("service/a", State{Revision: 1}) }()
	for range 2 {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("a named pipe: %v", err)
			}
		case <-time.After(10 * time.Second):
			// Unblock the reader so the goroutine ends, then fail.
			if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
				_ = w.Close()
			}
			t.Fatal("Load or Save of a named pipe still waits after 10 s")
		}
	}
}
