package settingsfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A configuration file emptied while its File is in use (an editor that truncates it and writes it
// again in place, caught in between; an operator's mistake) reads as nothing at all: a Save used to
// write it back holding only the settings section, on which stated restarts with the embedded
// defaults (the credential-less dev principal), and a Load to report an empty section, which the
// store serves as every entry removed. Both refuse, as for a file that went away; Save leaves the
// file as it is, and once the content is back both work again.
func TestAFileEmptiedSinceItWasReadIsRefused(t *testing.T) {
	for _, empty := range []string{"", "\n  \n"} {
		path := filepath.Join(t.TempDir(), "stated.toml")
		writeFile(t, path, principalsContent, 0o600)
		f := Open(path)
		if err := f.Save("service/a", State{Revision: 1}); err != nil {
			t.Fatal(err)
		}
		kept := readFile(t, path)
		writeFile(t, path, empty, 0o600)
		if _, err := f.Load("service/a"); !errors.Is(err, ErrEmptied) {
			t.Fatalf("Load of the emptied file (%q): %v, want ErrEmptied", empty, err)
		}
		if err := f.Save("service/a", State{Revision: 2}); !errors.Is(err, ErrEmptied) || !errors.Is(err, ErrNotWritten) {
			t.Fatalf("Save over the emptied file (%q): %v, want ErrEmptied and ErrNotWritten", empty, err)
		}
		if got := readFile(t, path); string(got) != empty {
			t.Fatalf("Save wrote over the emptied file:\n%s", got)
		}
		if err := os.WriteFile(path, kept, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := f.Save("service/a", State{Revision: 2}); err != nil {
			t.Fatalf("Save once the content is back: %v", err)
		}
	}
	// A file empty from the start is a new configuration, written as before.
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, "", 0o600)
	if err := Open(path).Save("service/a", State{Revision: 1}); err != nil {
		t.Fatalf("Save to a file empty from the start: %v", err)
	}
}
