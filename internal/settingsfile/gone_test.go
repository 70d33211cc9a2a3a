package settingsfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configuration file that is removed, or moved away, while its File is in use must not be created
// again by the next Save holding only the settings section: stated would then restart on the
// embedded defaults (a fresh ./data, the credential-less dev principal) instead of refusing to start
// without its configuration. Save refuses (the file is as it was: missing), Load too, and a file put
// back is written again.
func TestSaveRefusesAFileThatWentAway(t *testing.T) {
	for _, how := range []string{"removed", "moved away", "removed during the write"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "stated.toml")
			writeFile(t, path, principalsContent, 0o600)
			f := Open(path)
			if _, err := f.Namespaces(); err != nil {
				t.Fatal(err)
			}
			if err := f.Save("service/a", State{Revision: 1}); err != nil {
				t.Fatal(err)
			}
			kept := readFile(t, path)
			away := filepath.Join(dir, "stated.toml.old")
			switch how {
			case "removed":
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			case "moved away":
				if err := os.Rename(path, away); err != nil {
					t.Fatal(err)
				}
			case "removed during the write":
				hookBeforeRename(t, func(p string) {
					if p == path {
						_ = os.Remove(path)
					}
				})
			}
			err := f.Save("service/a", State{Revision: 2})
			if err == nil || !errors.Is(err, ErrNotWritten) || !strings.Contains(err.Error(), "gone") {
				t.Fatalf("Save after the file went away: %v, want a refusal that wraps ErrNotWritten and says the file is gone", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Save created the configuration file again: %v", err)
			}
			if _, err := f.Load("service/a"); err == nil {
				t.Fatal("Load of a file that went away read it as empty")
			}
			assertNoTempFiles(t, dir, filesIn(t, dir)...)
			// The file is put back: the File writes it again.
			hookBeforeRename(t, func(string) {})
			writeFile(t, path, string(kept), 0o600)
			if err := f.Save("service/a", State{Revision: 3}); err != nil {
				t.Fatalf("Save once the file is back: %v", err)
			}
			if s, err := f.Load("service/a"); err != nil || s.Revision != 3 {
				t.Fatalf("Load once the file is back: %+v %v", s, err)
			}
			if m := decodeMap(t, readFile(t, path)); m["data_dir"] != "./x" {
				t.Fatalf("the rest of the file is lost: %#v", m)
			}
		})
	}
}

// filesIn lists the names in dir that are not temporary files.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !strings.Contains(e.Name(), ".tmp-") {
			names = append(names, e.Name())
		}
	}
	return names
}
