package settingsfile

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
)

// SaveIf writes only over the section the caller read: a section edited since (by hand) is left as
// it is, and the error says so (ErrSectionChanged, ErrNotWritten); an edit elsewhere in the file does
// not stop it, and is kept; a section that no longer loads stops it too.
func TestSaveIfWritesOnlyOverTheSectionRead(t *testing.T) {
	const ns = "service/mqtt-bridge"
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, principalsContent, 0o600)
	f := Open(path)
	first := State{Revision: 1, Entries: []Entry{{Key: "a", Schema: "s.v1", Owner: "alice", Revision: 1, Document: []byte(`{"v":1}`)}}}
	if err := f.Save(ns, first); err != nil {
		t.Fatal(err)
	}
	read, err := f.Load(ns)
	if err != nil {
		t.Fatal(err)
	}

	// Edited by hand since the read: refused, the edit kept.
	edited := read
	edited.Entries = []Entry{read.Entries[0]}
	edited.Entries[0].Document = []byte(`{"v":"by hand"}`)
	if err := Open(path).Save(ns, edited); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, path)
	next := State{Revision: 2, Entries: append(read.Entries, Entry{Key: "b", Schema: "s.v1", Owner: "alice", Revision: 2, Document: []byte(`{}`)})}
	err = f.SaveIf(ns, next, &read)
	if !errors.Is(err, ErrSectionChanged) || !errors.Is(err, ErrNotWritten) {
		t.Fatalf("SaveIf over a section edited since the read: %v, want ErrSectionChanged and ErrNotWritten", err)
	}
	if after := readFile(t, path); !bytes.Equal(before, after) {
		t.Fatalf("SaveIf refused, yet the file changed:\n%s", after)
	}

	// Read again, then another part of the file edited: written, the other edit kept.
	read, err = f.Load(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := Open(path).Save("user/other", State{Revision: 3}); err != nil {
		t.Fatal(err)
	}
	if err := f.SaveIf(ns, next, &read); err != nil {
		t.Fatalf("SaveIf over the section read, the file edited elsewhere: %v", err)
	}
	got, err := f.Load(ns)
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, got, next)
	if other, err := f.Load("user/other"); err != nil || other.Revision != 3 {
		t.Fatalf("the other section after SaveIf: %+v %v", other, err)
	}

	// A section that no longer loads is not the one read either.
	writeFile(t, path, principalsContent+"\n[state_store.settings.\"service/mqtt-bridge\"]\nrevision = \"x\"\n", 0o600)
	if err := f.SaveIf(ns, next, &got); !errors.Is(err, ErrSectionChanged) || !errors.Is(err, ErrNotWritten) {
		t.Fatalf("SaveIf over a section that does not load: %v", err)
	}
}
