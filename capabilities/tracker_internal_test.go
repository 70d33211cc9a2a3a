package capabilities

import "testing"

// TestInstallOnlyGrows: a fetched snapshot is installed only when its generation is above the one held.
func TestInstallOnlyGrows(t *testing.T) {
	tr := NewTracker(nil, TrackerOptions{})
	notes, cancel := tr.Subscribe()
	defer cancel()
	if !tr.install(&ServerCapabilities{Generation: 5}) {
		t.Fatal("first snapshot not installed")
	}
	<-notes
	for _, g := range []uint64{5, 4, 0} {
		if tr.install(&ServerCapabilities{Generation: g, Sources: []Source{{SourceID: "x"}}}) {
			t.Errorf("generation %d installed over 5", g)
		}
	}
	if tr.Generation() != 5 || len(tr.Current().Sources) != 0 || len(notes) != 0 {
		t.Errorf("held %+v, %d notifications", tr.Current(), len(notes))
	}
	if !tr.install(&ServerCapabilities{Generation: 9}) || tr.Generation() != 9 {
		t.Error("a later generation was not installed")
	}
	if err := tr.Start(t.Context()); err == nil {
		t.Error("Start with a nil connection succeeded")
	}
}
