package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// replySeeds are replies and watch messages as the server writes them, and variants of them.
func replySeeds() []string {
	rev := uint64(9)
	entry := wire.Entry{Namespace: "service/x", Key: "a/b", Schema: "keeppeek.lease.v1", Owner: "alice", Revision: 3,
		CreatedAtMs: 1, UpdatedAtMs: 2, TTLMs: 3000, ExpiresAtMs: 3002, Document: json.RawMessage(`{"a":[1,"x\u00e9"],"b":{"c":null}}`)}
	results := []wire.Result{
		{RequestID: 7, OK: true, Entry: &entry},
		{RequestID: 8, OK: true, Revision: &rev},
		{RequestID: 9, OK: true, Entries: []wire.Entry{entry, entry}, NextAfterKey: "a/c"},
		{RequestID: 10, OK: true, Watch: &wire.WatchState{WatchID: "w", Namespace: "service/x", KeyPrefix: "a/", SnapshotRevision: 4, Entries: []wire.Entry{entry}}},
		{RequestID: 11, OK: true, WatchID: "w", AppliedSequence: &rev},
		{RequestID: 12, OK: true, ServerID: "s", Version: "v", Epoch: "e", Features: []string{wire.FeatureStateStore}, Bounds: &wire.Bounds{MaxDocumentBytes: 65536}},
		wire.ErrorResult(13, wire.RevisionError(wire.CodeConflict, 4, "a/b is at revision 4")),
		{RequestID: 14, OK: true, Entries: []wire.Entry{}},
	}
	var seeds []string
	for _, r := range results {
		seeds = append(seeds, string(wire.AppendResult(nil, &r)))
	}
	for _, m := range []wire.WatchMessage{
		{WatchID: "w", WatchSequence: 1, Revision: 3, Kind: wire.UpdatePut, Key: "a/b", Entry: &entry},
		{WatchID: "w", WatchSequence: 2, Revision: 4, Kind: wire.UpdateDelete, Key: "a/b"},
		{WatchID: "w", Kind: wire.UpdateClosed, Reason: wire.CloseOverflow, Message: "32 updates unacknowledged"},
	} {
		b, _ := json.Marshal(&m)
		seeds = append(seeds, string(b))
	}
	return append(seeds,
		`null`, ` {"request_id" : 1 , "ok" : true } `, `{"request_id":1,"ok":null,"entry":null,"revision":null,"entries":null}`,
		`{"entry":{"key":"a"},"entry":{"namespace":"b"}}`, `{"entries":[{"key":"a"},{"key":"b"}],"entries":[{"namespace":"c"}]}`,
		`{"entries":[null,{"key":"b"}]}`, `{"request_\u0069d":5,"k\u00e9y":"x","key":"\ud800\u00e9\n"}`, `{"request_id":1.5}`,
		`{"request_id":-0}`, `{"revision":-1}`, `{"revision":18446744073709551616}`, `{"ok":"true"}`, `{"entry":[]}`,
		`{"entry":{"document":null}}`, `{"entry":{"document":  [1, 2] }}`, `{"watch_sequence":"1"}`, `{"x":[1,{"y":"z"}]}`,
		`{"Request_ID":1}`, `{"ok":true}x`, `{"ok":true,}`, `[]`, `"x"`, `{"error":{"code":"NOT_FOUND","message":"m"}}`,
		`{"error":5}`, `{"features":["a"],"features":null}`, `{"error":{"code":"A","CODE":"B","current_revision":0}}`,
		`{"bounds":{"max_watches":1,"MAX_WATCHES":2}}`, `{"error":{"current_revision":null},"bounds":null}`, "{\"key\":\"\xff\"}", `{"kind":"PUT","entry":{"revision":1e2}}`,
	)
}

// foldedKeys reports whether data has a string (a member name, or a value: that only makes the check
// stricter) that differs from a field name of the wire types only in case: json.Unmarshal matches names
// ignoring case (Unicode simple folding, as strings.EqualFold), the decoders match them exactly.
func foldedKeys(data []byte) bool {
	names := map[string]bool{}
	for _, v := range []any{wire.Result{}, wire.WatchMessage{}, wire.Entry{}, wire.WatchState{}, wire.Error{}, wire.Bounds{}} {
		t := reflect.TypeOf(v)
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			names[name] = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok {
			for n := range names {
				if s != n && strings.EqualFold(s, n) {
					return true
				}
			}
		}
	}
}

// sameAsUnmarshal checks decode against json.Unmarshal on data: whatever json.Unmarshal rejects, decode
// rejects; whatever it accepts, decode accepts with the same value (where names are not in question).
func sameAsUnmarshal[T any](t *testing.T, data []byte, decode func([]byte, *T) error) {
	t.Helper()
	var got, want T
	gerr := decode(data, &got)
	werr := json.Unmarshal(data, &want)
	if foldedKeys(data) {
		if werr != nil && gerr == nil && !json.Valid(data) {
			t.Fatalf("decoded invalid JSON %q", data)
		}
		return
	}
	switch {
	case werr != nil && gerr == nil:
		t.Fatalf("decoded %q, which json.Unmarshal rejects (%v), as %+v", data, werr, got)
	case werr == nil && gerr != nil:
		t.Fatalf("rejected %q (%v), which json.Unmarshal decodes as %+v", data, gerr, want)
	case werr == nil && !reflect.DeepEqual(got, want):
		t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
	}
}

func FuzzDecodeReplies(f *testing.F) {
	for _, s := range replySeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsUnmarshal(t, data, wire.DecodeResult)
		sameAsUnmarshal(t, data, wire.DecodeWatchMessage)
	})
}

// The seeds are also a table test: every reply the server writes decodes to what it encoded.
func TestDecodeRepliesRoundTrip(t *testing.T) {
	for _, s := range replySeeds() {
		sameAsUnmarshal(t, []byte(s), wire.DecodeResult)
		sameAsUnmarshal(t, []byte(s), wire.DecodeWatchMessage)
	}
	var r wire.Result
	if err := wire.DecodeResult([]byte(replySeeds()[0]), &r); err != nil || r.Entry == nil || r.Entry.Revision != 3 ||
		string(r.Entry.Document) != `{"a":[1,"x\u00e9"],"b":{"c":null}}` {
		t.Fatalf("first seed: %+v %v", r, err)
	}
}

// A malformed reply is an error naming the problem, never a partial success.
func TestDecodeReplyErrors(t *testing.T) {
	for _, body := range []string{``, `{`, `{"ok":true`, `{"ok":tru}`, `{"request_id":"7"}`, `{"entry":5}`, `{"ok":true} {}`,
		`{"entries":[1]}`, `{"revision":1.0}`} {
		var r wire.Result
		err := wire.DecodeResult([]byte(body), &r)
		if err == nil {
			t.Errorf("%q decoded as %+v", body, r)
			continue
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("%q: bare EOF", body)
		}
	}
}

// BenchmarkDecodeWatchMessage compares the decoder with json.Unmarshal on a PUT update carrying a
// 2,193-byte document.
func BenchmarkDecodeWatchMessage(b *testing.B) {
	doc := `{"role":"publish","desired":true,"source_id":"camera-front-door","media_kind":"video","parameters":{"a":{"note":"` +
		strings.Repeat("plain words and spaces ", 90) + `"}}}`
	e := wire.Entry{Namespace: "service/bench", Key: "fanout/front-door", Schema: "keeppeek.media-intent.v1", Owner: "admin",
		Revision: 12, CreatedAtMs: 1, UpdatedAtMs: 2, Document: json.RawMessage(doc)}
	data, _ := json.Marshal(wire.WatchMessage{WatchID: "bench-0001", WatchSequence: 3, Revision: 12, Kind: wire.UpdatePut, Key: e.Key, Entry: &e})
	b.Run("DecodeWatchMessage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m wire.WatchMessage
			if err := wire.DecodeWatchMessage(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m wire.WatchMessage
			if err := json.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A decoded reply shares nothing with its data; a decoded watch message shares it (strings and
// document are views), but appending to its document copies instead of writing into data.
func TestDecodeSharing(t *testing.T) {
	e := wire.Entry{Namespace: "service/x", Key: "a/b", Schema: "keeppeek.lease.v1", Owner: "alice", Revision: 3,
		CreatedAtMs: 1, UpdatedAtMs: 2, Document: json.RawMessage(`{"holder":"w-1"}`)}
	reply, _ := json.Marshal(wire.Result{RequestID: 7, OK: true, Entry: &e})
	var r wire.Result
	if err := wire.DecodeResult(reply, &r); err != nil {
		t.Fatal(err)
	}
	for i := range reply {
		reply[i] = 'x'
	}
	if r.Entry == nil || r.Entry.Key != "a/b" || r.Entry.Owner != "alice" || string(r.Entry.Document) != `{"holder":"w-1"}` {
		t.Fatalf("reply entry changed with its data: %+v", r.Entry)
	}

	data, _ := json.Marshal(wire.WatchMessage{WatchID: "w", WatchSequence: 1, Revision: 3, Kind: wire.UpdatePut, Key: e.Key, Entry: &e})
	before := bytes.Clone(data)
	var m wire.WatchMessage
	if err := wire.DecodeWatchMessage(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Entry == nil || !reflect.DeepEqual(*m.Entry, e) || m.WatchID != "w" || m.Key != "a/b" || m.Kind != wire.UpdatePut {
		t.Fatalf("watch message decoded as %+v, entry %+v", m, m.Entry)
	}
	doc := m.Entry.Document
	if !bytes.Contains(data, doc) || &data[bytes.Index(data, doc)] != &doc[0] {
		t.Fatal("the watch message's document is a copy, not a view of its data")
	}
	if cap(doc) != len(doc) {
		t.Fatalf("document capacity %d beyond its %d bytes: an append would write into the message", cap(doc), len(doc))
	}
	_ = append(doc, `,"more":1}`...)
	if !bytes.Equal(data, before) || m.Entry.Owner != "alice" {
		t.Fatalf("appending to the document changed the message: %s", data)
	}
}

// TestDecodeResultNestedNamesAreExact: DecodeResult promises names spelled exactly, where
// json.Unmarshal also takes them ignoring case. That holds inside the error and bounds objects too: a
// member `CODE` or `Current_Revision` is an unknown field, skipped, not the code or the revision.
func TestDecodeResultNestedNamesAreExact(t *testing.T) {
	for _, c := range []struct {
		body string
		want wire.Result
	}{
		{`{"request_id":1,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_CONFLICT","CODE":"X","message":"m","Current_Revision":3}}`,
			wire.Result{RequestID: 1, Error: &wire.Error{Code: wire.CodeConflict, Message: "m"}}},
		{`{"request_id":1,"ok":false,"error":{"Code":"X","Message":"m","current_revision":0}}`,
			wire.Result{RequestID: 1, Error: &wire.Error{CurrentRevision: u64(0)}}},
		{`{"request_id":1,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_GUARD_FAILED","message":"m","current_revision":4,"extra":[1]}}`,
			wire.Result{RequestID: 1, Error: &wire.Error{Code: wire.CodeGuardFailed, Message: "m", CurrentRevision: u64(4)}}},
		{`{"request_id":2,"ok":true,"bounds":{"max_document_bytes":7,"MAX_WATCHES":9,"Ack_Deadline_Ms":1,"ack_deadline_ms":5}}`,
			wire.Result{RequestID: 2, OK: true, Bounds: &wire.Bounds{MaxDocumentBytes: 7, AckDeadlineMs: 5}}},
		{`{"request_id":2,"ok":true,"bounds":{"ack_deadline_ms":5,"ACK_DEADLINE_MS":1}}`,
			wire.Result{RequestID: 2, OK: true, Bounds: &wire.Bounds{AckDeadlineMs: 5}}},
	} {
		var got wire.Result
		if err := wire.DecodeResult([]byte(c.body), &got); err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v (error %+v, bounds %+v)\nwant %+v (error %+v, bounds %+v)", c.body, got, got.Error, got.Bounds, c.want, c.want.Error, c.want.Bounds)
		}
	}
	// The error and bounds of a reply as the server writes it come back whole.
	b := wire.Bounds{MaxDocumentBytes: 1, MaxEntriesPerNamespace: 2, MaxNamespaces: 3, MaxTotalValueBytes: 4, MaxSnapshotEntries: 5,
		MaxSnapshotBytes: 6, MaxWatches: 7, MaxWatchesPerPrincipal: 8, MaxPendingUpdates: 9, AckDeadlineMs: 10,
		MaxWorkersPerPrincipal: 11}
	for _, r := range []wire.Result{
		wire.ErrorResult(3, wire.RevisionError(wire.CodeConflict, 0, "k exists")),
		wire.ErrorResult(4, wire.Errorf(wire.CodeNotFound, "no <such> key & \u2028")),
		{RequestID: 5, OK: true, ServerID: "s", Features: []string{wire.FeatureStateStore}, Bounds: &b},
	} {
		var got wire.Result
		if err := wire.DecodeResult(wire.AppendResult(nil, &r), &got); err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	// Wrong types are errors, as json.Unmarshal has them.
	for _, body := range []string{`{"error":{"code":5}}`, `{"error":{"current_revision":-1}}`, `{"error":[]}`,
		`{"bounds":{"max_watches":"5"}}`, `{"bounds":{"max_watches":1.5}}`, `{"bounds":true}`} {
		var got wire.Result
		if err := wire.DecodeResult([]byte(body), &got); err == nil {
			t.Errorf("%s decoded as %+v", body, got)
		}
	}
}
