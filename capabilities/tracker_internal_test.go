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

// TestSameCapabilities: the comparison that tells a media server that went back (the generation held,
// other capabilities) from one answering the generation held again ignores the order in which the
// media server lists things (the SPEC does not fix one) and nothing else.
func TestSameCapabilities(t *testing.T) {
	v := func(id string, st VariantState) Variant {
		return Variant{VariantID: id, Codec: "h264", Width: 1280, Height: 720, State: st}
	}
	src := func(id, sess string, modes []string, variants ...Variant) Source {
		return Source{SourceID: id, SessionID: sess, Online: true, Publication: Publication{RecordingModes: modes},
			Streams: []Stream{{StreamID: "video", MediaKind: MediaKindVideo, Variants: variants}, {StreamID: "audio", MediaKind: MediaKindAudio}}}
	}
	held := &ServerCapabilities{Generation: 7, Sources: []Source{
		src("a", "s1", []string{"inherit", "disabled"}, v("source", StateReady), v("p720", StatePending)),
		src("b", "s2", nil),
	}}
	reordered := &ServerCapabilities{Generation: 7, Sources: []Source{
		{SourceID: "b", SessionID: "s2", Online: true, Publication: Publication{RecordingModes: []string{}},
			Streams: []Stream{{StreamID: "audio", MediaKind: MediaKindAudio, Variants: []Variant{}}, {StreamID: "video", MediaKind: MediaKindVideo}}},
		src("a", "s1", []string{"disabled", "inherit"}, v("p720", StatePending), v("source", StateReady)),
	}}
	if !sameCapabilities(held, reordered) || !sameCapabilities(reordered, held) {
		t.Error("the same capabilities listed in another order compare different")
	}
	marked := held.Clone() // what the tracker adds is not the media server's
	marked.Sources[0].Streams[0].Variants[0].ReadySince = 3
	if !sameCapabilities(held, &marked) || !sameCapabilities(&marked, held) {
		t.Error("capabilities that differ only in ReadySince compare different")
	}
	for name, change := range map[string]func(c *ServerCapabilities){
		"generation":      func(c *ServerCapabilities) { c.Generation++ },
		"session":         func(c *ServerCapabilities) { c.Sources[0].SessionID = "s3" },
		"online":          func(c *ServerCapabilities) { c.Sources[1].Online = false },
		"variant state":   func(c *ServerCapabilities) { c.Sources[0].Streams[0].Variants[1].State = StateReady },
		"variant gone":    func(c *ServerCapabilities) { c.Sources[0].Streams[0].Variants = c.Sources[0].Streams[0].Variants[:1] },
		"source gone":     func(c *ServerCapabilities) { c.Sources = c.Sources[:1] },
		"source replaced": func(c *ServerCapabilities) { c.Sources[1].SourceID = "c" },
		"stream kind":     func(c *ServerCapabilities) { c.Sources[0].Streams[1].MediaKind = MediaKindVideo },
		"recording mode":  func(c *ServerCapabilities) { c.Sources[0].Publication.RecordingModes[1] = "required" },
		"publisher":       func(c *ServerCapabilities) { c.Sources[0].Streams[0].Variants[1].Publisher = "bob" },
	} {
		c := held.Clone()
		change(&c)
		if sameCapabilities(held, &c) || sameCapabilities(&c, held) {
			t.Errorf("capabilities with another %s compare the same", name)
		}
	}
}
