package wire_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// keysOf returns the sorted top-level member names of a JSON object.
func keysOf(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func TestEntryJSON(t *testing.T) {
	leased := wire.Entry{
		Namespace: "service/transcoder-a", Key: "intents/front-door", Schema: "keeppeek.media-intent.v1",
		Owner: "coordinator", Revision: 121, CreatedAtMs: 1764451200000, UpdatedAtMs: 1764451260000,
		TTLMs: 5000, ExpiresAtMs: 1764451265000, Document: json.RawMessage(`{"role":"publish"}`),
	}
	want := `{"namespace":"service/transcoder-a","key":"intents/front-door","schema":"keeppeek.media-intent.v1",` +
		`"owner":"coordinator","revision":121,"created_at_ms":1764451200000,"updated_at_ms":1764451260000,` +
		`"ttl_ms":5000,"expires_at_ms":1764451265000,"document":{"role":"publish"}}`
	if b := marshal(t, leased); string(b) != want {
		t.Errorf("leased entry:\n got %s\nwant %s", b, want)
	}

	plain := leased
	plain.TTLMs, plain.ExpiresAtMs = 0, 0
	b := marshal(t, plain)
	if got, want := keysOf(t, b), sorted("namespace", "key", "schema", "owner", "revision", "created_at_ms", "updated_at_ms", "document"); !slices.Equal(got, want) {
		t.Errorf("entry without lease has members %v, want %v", got, want)
	}
	if bytes.Contains(b, []byte("ttl_ms")) || bytes.Contains(b, []byte("expires_at_ms")) {
		t.Errorf("entry without lease: %s", b)
	}

	var back wire.Entry
	if err := wire.Decode([]byte(want), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, leased) {
		t.Errorf("round trip: %+v", back)
	}
	if s := leased.String(); s != "service/transcoder-a:intents/front-door@121" {
		t.Errorf("String() = %q", s)
	}
}

func TestListResultJSON(t *testing.T) {
	r := wire.Result{RequestID: 9, OK: true, Entries: []wire.Entry{}, Revision: u64(0)}
	b := marshal(t, r)
	if want := `{"request_id":9,"ok":true,"revision":0,"entries":[]}`; string(b) != want {
		t.Errorf("empty list: got %s, want %s", b, want)
	}
	if !bytes.Contains(b, []byte(`"entries":[]`)) || bytes.Contains(b, []byte("next_after_key")) {
		t.Errorf("empty list: %s", b)
	}

	r = wire.Result{RequestID: 9, OK: true, Entries: []wire.Entry{{Namespace: "user/alice", Key: "a", Document: json.RawMessage(`{}`)}},
		NextAfterKey: "a", Revision: u64(4)}
	b = marshal(t, r)
	if got, want := keysOf(t, b), sorted("request_id", "ok", "entries", "next_after_key", "revision"); !slices.Equal(got, want) {
		t.Errorf("list page members %v, want %v (%s)", got, want, b)
	}

	// A nil slice is omitted altogether, so a list reply must carry a non-nil, possibly empty, slice.
	b = marshal(t, wire.Result{RequestID: 1, OK: true, Revision: u64(0)})
	if bytes.Contains(b, []byte("entries")) {
		t.Errorf("nil entries encoded: %s", b)
	}
}

func TestOtherResultShapes(t *testing.T) {
	for _, c := range []struct {
		name string
		r    wire.Result
		want []string
	}{
		{"get", wire.Result{OK: true, Entry: &wire.Entry{Document: json.RawMessage(`{}`)}}, []string{"request_id", "ok", "entry"}},
		{"delete", wire.Result{OK: true, Revision: u64(0)}, []string{"request_id", "ok", "revision"}},
		{"watch", wire.Result{OK: true, Watch: &wire.WatchState{WatchID: "w", Namespace: "user/a", Entries: []wire.Entry{}}}, []string{"request_id", "ok", "watch"}},
		{"unwatch", wire.Result{OK: true, WatchID: "w"}, []string{"request_id", "ok", "watch_id"}},
		{"ack", wire.Result{OK: true, WatchID: "w", AppliedSequence: u64(0)}, []string{"request_id", "ok", "watch_id", "applied_sequence"}},
		{"info", wire.Result{OK: true, ServerID: "s", Version: "v", Epoch: "e", Features: []string{}, Bounds: new(wire.DefaultBounds())},
			[]string{"request_id", "ok", "server_id", "version", "epoch", "features", "bounds"}},
		{"error", wire.ErrorResult(1, wire.ErrNotFound), []string{"request_id", "ok", "error"}},
	} {
		b := marshal(t, c.r)
		if got, want := keysOf(t, b), sorted(c.want...); !slices.Equal(got, want) {
			t.Errorf("%s: members %v, want %v (%s)", c.name, got, want, b)
		}
	}

	ws := wire.WatchState{WatchID: "w", Namespace: "user/alice", KeyPrefix: "", SnapshotRevision: 0, Entries: []wire.Entry{}}
	if b, want := marshal(t, ws), `{"watch_id":"w","namespace":"user/alice","key_prefix":"","snapshot_revision":0,"entries":[]}`; string(b) != want {
		t.Errorf("WatchState = %s, want %s", b, want)
	}
}

func TestWatchMessagesJSON(t *testing.T) {
	closed := wire.WatchClosed{WatchID: "w-1", Kind: wire.UpdateClosed, Reason: wire.CloseOverflow, Message: "too many pending"}
	if b, want := marshal(t, closed), `{"watch_id":"w-1","kind":"CLOSED","reason":"OVERFLOW","message":"too many pending"}`; string(b) != want {
		t.Errorf("WatchClosed = %s, want %s", b, want)
	}
	reasons := []wire.CloseReason{wire.CloseOverflow, wire.CloseAckTimeout, wire.CloseUnauthorized, wire.CloseSnapshotFailed, wire.CloseRestored, wire.CloseShutdown}
	for i, want := range []string{"OVERFLOW", "ACK_TIMEOUT", "UNAUTHORIZED", "SNAPSHOT_FAILED", "RESTORED", "SHUTDOWN"} {
		if string(reasons[i]) != want {
			t.Errorf("close reason %q, SPEC says %q", reasons[i], want)
		}
		b := marshal(t, wire.WatchClosed{WatchID: "w", Kind: wire.UpdateClosed, Reason: reasons[i]})
		if !bytes.Contains(b, []byte(`"reason":"`+want+`"`)) {
			t.Errorf("close %s: %s", want, b)
		}
	}
	for i, want := range []string{"PUT", "DELETE", "EXPIRE", "CLOSED"} {
		if got := []wire.UpdateKind{wire.UpdatePut, wire.UpdateDelete, wire.UpdateExpire, wire.UpdateClosed}[i]; string(got) != want {
			t.Errorf("kind %q, SPEC says %q", got, want)
		}
	}

	del := wire.WatchUpdate{WatchID: "w", WatchSequence: 1, Revision: 121, Kind: wire.UpdateDelete, Key: "k"}
	if b, want := marshal(t, del), `{"watch_id":"w","watch_sequence":1,"revision":121,"kind":"DELETE","key":"k"}`; string(b) != want {
		t.Errorf("delete update = %s, want %s", b, want)
	}
	put := wire.WatchUpdate{WatchID: "w", WatchSequence: 2, Revision: 122, Kind: wire.UpdatePut, Key: "k",
		Entry: &wire.Entry{Namespace: "user/a", Key: "k", Revision: 122, Document: json.RawMessage(`{}`)}}
	if got, want := keysOf(t, marshal(t, put)), sorted("watch_id", "watch_sequence", "revision", "kind", "key", "entry"); !slices.Equal(got, want) {
		t.Errorf("put update members %v, want %v", got, want)
	}

	// WatchMessage reads both.
	var m wire.WatchMessage
	if err := wire.Decode(marshal(t, closed), &m); err != nil || m.Kind != wire.UpdateClosed || m.Reason != wire.CloseOverflow || m.Message != "too many pending" {
		t.Errorf("WatchMessage from close: %+v, %v", m, err)
	}
	m = wire.WatchMessage{}
	if err := wire.Decode(marshal(t, put), &m); err != nil || m.Kind != wire.UpdatePut || m.WatchSequence != 2 || m.Entry == nil || m.Entry.Revision != 122 {
		t.Errorf("WatchMessage from put: %+v, %v", m, err)
	}
}

func TestBoundsJSONNames(t *testing.T) {
	b := marshal(t, wire.DefaultBounds())
	want := `{"max_document_bytes":16384,"max_entries_per_namespace":4096,"max_namespaces":1024,` +
		`"max_total_value_bytes":67108864,"max_snapshot_entries":64,"max_snapshot_bytes":65536,` +
		`"max_watches":1024,"max_watches_per_principal":256,"max_pending_updates":32,"ack_deadline_ms":30000,` +
		`"max_workers_per_principal":256}`
	if string(b) != want {
		t.Errorf("DefaultBounds JSON:\n got %s\nwant %s", b, want)
	}
	var back wire.Bounds
	if err := wire.Decode(b, &back); err != nil || back != wire.DefaultBounds() {
		t.Errorf("round trip %+v, %v", back, err)
	}
	// The toml names are the JSON names.
	typ := reflect.TypeFor[wire.Bounds]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Tag.Get("json") != f.Tag.Get("toml") || f.Tag.Get("json") == "" {
			t.Errorf("%s: json %q, toml %q", f.Name, f.Tag.Get("json"), f.Tag.Get("toml"))
		}
	}
}

func TestDefaultBoundsMatchSpec(t *testing.T) {
	want := wire.Bounds{
		MaxDocumentBytes:       16_384,
		MaxEntriesPerNamespace: 4_096,
		MaxNamespaces:          1_024,
		MaxTotalValueBytes:     67_108_864,
		MaxSnapshotEntries:     64,
		MaxSnapshotBytes:       65_536,
		MaxWatches:             1_024,
		MaxWatchesPerPrincipal: 256,
		MaxPendingUpdates:      32,
		AckDeadlineMs:          30_000,
		MaxWorkersPerPrincipal: 256, // not in section 8: the project's own
	}
	if got := wire.DefaultBounds(); got != want {
		t.Errorf("DefaultBounds() = %+v, want %+v", got, want)
	}
	if err := wire.DefaultBounds().Validate(); err != nil {
		t.Errorf("DefaultBounds().Validate() = %v", err)
	}
}

func TestBoundsValidate(t *testing.T) {
	typ := reflect.TypeFor[wire.Bounds]()
	// The two bounds a server holds per-watch memory or time for have smaller ranges.
	limit := map[string]int64{"max_pending_updates": wire.MaxPendingUpdatesLimit, "ack_deadline_ms": wire.MaxAckDeadlineMs}
	for i := range typ.NumField() {
		name := typ.Field(i).Tag.Get("json")
		top, ok := limit[name]
		if !ok {
			top = wire.MaxSafeInteger
		}
		for _, v := range []int64{0, -1, -1 << 63, top + 1, wire.MaxSafeInteger + 1, 1<<63 - 1} {
			b := wire.DefaultBounds()
			reflect.ValueOf(&b).Elem().Field(i).SetInt(v)
			err := b.Validate()
			if err == nil {
				t.Errorf("%s = %d: Validate() = nil", name, v)
				continue
			}
			if !strings.Contains(err.Error(), name) {
				t.Errorf("%s = %d: error %q does not name the bound", name, v, err)
			}
		}
		for _, v := range []int64{1, top} {
			b := wire.DefaultBounds()
			reflect.ValueOf(&b).Elem().Field(i).SetInt(v)
			if err := b.Validate(); err != nil {
				t.Errorf("%s = %d: Validate() = %v", name, v, err)
			}
		}
	}
	if err := (wire.Bounds{}).Validate(); err == nil {
		t.Error("zero Bounds validate")
	}
}

func TestCompactDocument(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{}`, `{}`},
		{` { } `, `{}`},
		{"\n\t{\r\n}\n", `{}`},
		{`{ "a" : 1 , "b" : [ 1 , 2 , { "c" : null } ] }`, `{"a":1,"b":[1,2,{"c":null}]}`},
		{`{"s":"a b  c"}`, `{"s":"a b  c"}`},     // spaces inside strings stay
		{`{"s":"\u00e9\n"}`, `{"s":"\u00e9\n"}`}, // escapes stay as written
		{`{"n":1.5e3,"t":true,"f":false}`, `{"n":1.5e3,"t":true,"f":false}`},
		{`{"a":1,"a":2}`, `{"a":1,"a":2}`}, // compaction does not judge duplicate names
		{`{"<":"&"}`, `{"<":"&"}`},         // no HTML escaping: the size is json.Compact's
	} {
		got, err := wire.CompactDocument(json.RawMessage(c.in))
		if err != nil {
			t.Errorf("CompactDocument(%q) = %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("CompactDocument(%q) = %s, want %s", c.in, got, c.want)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(c.in)); err != nil || buf.String() != string(got) {
			t.Errorf("CompactDocument(%q) = %s, json.Compact gives %s", c.in, got, buf.String())
		}
	}
	for _, in := range []string{
		``, ` `, `null`, ` null `, `[]`, `[{}]`, `"{}"`, `1`, `true`, `false`,
		`{`, `}`, `{"a":}`, `{"a" 1}`, `{a:1}`, `{'a':1}`, `{"a":1,}`, `{} {}`, `{}x`, `{}]`, `{} null`,
		`{"a":"` + "\x01" + `"}`, `{"a":01}`, `{"a":NaN}`,
	} {
		_, err := wire.CompactDocument(json.RawMessage(in))
		wantInvalidArgument(t, err)
	}
	_, err := wire.CompactDocument(nil)
	wantInvalidArgument(t, err)
}

// TestCompactDocumentRejectsNonJSONWhitespace: CompactDocument says it "checks that raw is one JSON
// object", but it trims with bytes.TrimSpace, which removes Unicode white space that JSON does not
// allow (\v, \f, U+0085, U+00A0, U+2028, ...). Such input is not JSON yet is accepted; the returned
// compact form is valid JSON, so the stored document is sound.
func TestCompactDocumentRejectsNonJSONWhitespace(t *testing.T) {
	for _, in := range []string{"\v{}", "{}\f", "\u00a0{}", "{}\u2028", "\u0085{}"} {
		if json.Valid([]byte(in)) {
			t.Fatalf("%q is valid JSON", in)
		}
		if got, err := wire.CompactDocument(json.RawMessage(in)); err == nil {
			t.Errorf("CompactDocument(%q) = %s, nil; want INVALID_ARGUMENT (not JSON)", in, got)
		}
	}
}
