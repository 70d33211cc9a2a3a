package settingsfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// RemoveStaleTemps reports what it removed, skips what is not a regular file, and follows the link
// to the configuration file, whose directory holds the temporary files.
func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	if err := os.Mkdir(etc, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(etc, "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	link := filepath.Join(dir, "stated.toml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(etc, ".stated.toml.tmp-42")
	writeFile(t, stale, "half a configuration", 0o600)
	notOurs := filepath.Join(etc, ".stated.toml.tmp-43")
	if err := os.Mkdir(notOurs, 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveStaleTemps(link)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != stale {
		t.Fatalf("removed %q, want %q", removed, stale)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the stale file: %v", err)
	}
	if _, err := os.Stat(notOurs); err != nil {
		t.Fatalf("a directory with a temporary file's name was removed: %v", err)
	}
	// A missing configuration file, or a missing directory, has nothing to sweep.
	if removed, err := RemoveStaleTemps(filepath.Join(dir, "nowhere", "x.toml")); err != nil || len(removed) != 0 {
		t.Fatalf("missing directory: %q %v", removed, err)
	}
}
