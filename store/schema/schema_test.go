package schema

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/keeppeek/coordination/store/wire"
)

// examples are valid documents of each schema, with every optional property set, and a namespace
// the schema is allowed in.
func examples() map[string]struct {
	ns  string
	doc map[string]any
} {
	return map[string]struct {
		ns  string
		doc map[string]any
	}{
		MediaIntentV1: {"service/coordinator", map[string]any{
			"role": "publish", "desired": true, "source_id": "front-door", "media_kind": "video",
			"stream_id": "main", "variant_id": "720p", "output_profile": "h264.main_v2", "priority": 500,
			"recording_mode": "inherit",
			"parameters": map[string]any{
				"transcoder-a": map[string]any{"bitrate": 2500000, "codecs": []any{"h264", "vp8"}},
				"recorder_1":   map[string]any{},
			},
		}},
		LeaseV1: {"service/transcoder-a", map[string]any{
			"holder": "worker-1_A", "claimed_at_ms": 1764451200000, "renewed_at_ms": 1764451260000,
			"purpose": "transcode front-door",
		}},
		ObservedStatusV1: {"user/alice", map[string]any{
			"subject_key": "intents/front-door", "state": "active", "observed_at_ms": 1764451260000,
			"message": "streaming since 12:00", "publication_id": "pub-1", "subscription_id": "sub.1",
			"variant_id": "720p", "error_code": "", "holder": "worker_1",
		}},
		PreferenceV1: {"group/family", map[string]any{
			"kind": "display", "preferred_group": "family", "layout": "grid", "audio_device": "USB Headset",
		}},
		WorkerStatusV1: {"system", map[string]any{
			"worker_id": "w-1", "service": "transcoder", "principal": "transcoder-a", "status": "ready",
			"interval_ms": 5000, "leases": []any{"leases/front-door", "leases/back.door"},
			"first_seen_ms": 1764451200000,
		}},
	}
}

// required lists the required properties of each schema (SPEC section 13).
var required = map[string][]string{
	MediaIntentV1:    {"role", "desired", "source_id", "media_kind"},
	LeaseV1:          {"holder", "claimed_at_ms"},
	ObservedStatusV1: {"subject_key", "state", "observed_at_ms"},
	PreferenceV1:     {"kind"},
	WorkerStatusV1:   {"worker_id", "service", "principal", "status", "interval_ms", "leases", "first_seen_ms"},
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// with returns a copy of doc with the properties of set set (a nil value deletes).
func with(doc map[string]any, set map[string]any) map[string]any {
	out := maps.Clone(doc)
	for k, v := range set {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// deleted is the marker for "remove this property" in with (a nil map value).
var deleted any

func TestNewIDsRegistered(t *testing.T) {
	r := newRegistry(t)
	want := []string{LeaseV1, MediaIntentV1, ObservedStatusV1, PreferenceV1, WorkerStatusV1}
	if got := r.IDs(); !slices.Equal(got, want) {
		t.Fatalf("IDs() = %v, want %v", got, want)
	}
	ids := r.IDs()
	ids[0] = "mutated"
	if r.IDs()[0] != LeaseV1 {
		t.Fatal("IDs() exposes the registry's slice")
	}
	for _, id := range want {
		if !r.Registered(id) {
			t.Errorf("Registered(%q) = false", id)
		}
	}
	for _, id := range []string{"", "keeppeek.media-intent.v2", "keeppeek.media-intent", "KEEPPEEK.LEASE.V1", "media-intent.v1"} {
		if r.Registered(id) {
			t.Errorf("Registered(%q) = true", id)
		}
	}
}

// TestEmbeddedFiles checks the schema files themselves: draft 2020-12, titled by their id, closed at
// the top level, and one file per registered id.
func TestEmbeddedFiles(t *testing.T) {
	files, err := fs.Glob(schemaFiles, "schemas/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range files {
		data, err := schemaFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		id := strings.TrimSuffix(strings.TrimPrefix(f, "schemas/"), ".json")
		ids = append(ids, id)
		if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %v", f, doc["$schema"])
		}
		if doc["title"] != id || doc["$id"] != "urn:keeppeek:schema:"+id {
			t.Errorf("%s: title %v, $id %v", f, doc["title"], doc["$id"])
		}
		if doc["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties = %v, want false", f, doc["additionalProperties"])
		}
		if doc["type"] != "object" {
			t.Errorf("%s: type = %v, want object", f, doc["type"])
		}
		req, _ := doc["required"].([]any)
		var got []string
		for _, p := range req {
			got = append(got, p.(string))
		}
		if !slices.Equal(got, required[id]) {
			t.Errorf("%s: required = %v, want %v", f, got, required[id])
		}
	}
	if want := slices.Sorted(maps.Keys(where)); !slices.Equal(ids, want) {
		t.Fatalf("embedded %v, registered %v", ids, want)
	}
}

func TestValidExamples(t *testing.T) {
	r := newRegistry(t)
	for id, ex := range examples() {
		t.Run(id, func(t *testing.T) {
			wantValid(t, r.Validate(id, ex.ns, mustJSON(t, ex.doc)))
			// Only the required properties: still valid.
			min := map[string]any{}
			for _, p := range required[id] {
				min[p] = ex.doc[p]
			}
			if id == MediaIntentV1 {
				min["role"] = "subscribe"
			}
			wantValid(t, r.Validate(id, ex.ns, mustJSON(t, min)))
		})
	}
}

func TestMissingRequired(t *testing.T) {
	r := newRegistry(t)
	for id, ex := range examples() {
		for _, p := range required[id] {
			t.Run(id+"/"+p, func(t *testing.T) {
				doc := with(ex.doc, map[string]any{p: deleted})
				wantInvalid(t, r.Validate(id, ex.ns, mustJSON(t, doc)), `missing required property "`+p+`"`, id)
			})
		}
	}
}

func TestExtraTopLevelProperty(t *testing.T) {
	r := newRegistry(t)
	for id, ex := range examples() {
		for _, extra := range []string{"owner", "extra", "Role", "note"} {
			t.Run(id+"/"+extra, func(t *testing.T) {
				doc := with(ex.doc, map[string]any{extra: "x"})
				wantInvalid(t, r.Validate(id, ex.ns, mustJSON(t, doc)), `property "`+extra+`" is not allowed`)
			})
		}
	}
}

func TestWrongTypesAndValues(t *testing.T) {
	r := newRegistry(t)
	ex := examples()
	cases := []struct {
		id, prop string
		value    any
		mention  string
	}{
		{MediaIntentV1, "role", "relay", "/role"},
		{MediaIntentV1, "role", 1, "/role"},
		{MediaIntentV1, "desired", "true", "want boolean"},
		{MediaIntentV1, "desired", 1, "want boolean"},
		{MediaIntentV1, "source_id", 5, "want string"},
		{MediaIntentV1, "source_id", "", "/source_id"},
		{MediaIntentV1, "source_id", "front door", "pattern"},
		{MediaIntentV1, "source_id", "a/b", "pattern"},
		{MediaIntentV1, "source_id", ".", `"." and ".."`},
		{MediaIntentV1, "source_id", "..", `"." and ".."`},
		{MediaIntentV1, "source_id", strings.Repeat("a", 129), "at most 128"},
		{MediaIntentV1, "stream_id", "é", "/stream_id"},
		{MediaIntentV1, "variant_id", false, "/variant_id"},
		{MediaIntentV1, "output_profile", []any{"a"}, "/output_profile"},
		{MediaIntentV1, "media_kind", "screen", "/media_kind"},
		{MediaIntentV1, "media_kind", "Video", "/media_kind"},
		{MediaIntentV1, "priority", -1, "minimum 0"},
		{MediaIntentV1, "priority", 1001, "maximum 1000"},
		{MediaIntentV1, "priority", "1", "want integer"},
		{MediaIntentV1, "parameters", []any{}, "want object"},
		{MediaIntentV1, "parameters", map[string]any{"svc": "x"}, "/parameters/svc"},
		{MediaIntentV1, "parameters", map[string]any{"svc": []any{}}, "/parameters/svc"},
		{MediaIntentV1, "parameters", map[string]any{"Transcoder": map[string]any{}}, `property name "Transcoder"`},
		{MediaIntentV1, "parameters", map[string]any{"-svc": map[string]any{}}, `"-svc"`},
		{MediaIntentV1, "parameters", map[string]any{"svc.a": map[string]any{}}, `"svc.a"`},
		{MediaIntentV1, "parameters", map[string]any{strings.Repeat("a", 64): map[string]any{}}, "/parameters"},
		{LeaseV1, "holder", "worker.1", "/holder"},
		{LeaseV1, "holder", "", "/holder"},
		{LeaseV1, "holder", strings.Repeat("w", 65), "/holder"},
		{LeaseV1, "holder", 7, "want string"},
		{LeaseV1, "claimed_at_ms", -1, "minimum"},
		{LeaseV1, "claimed_at_ms", "1", "want integer"},
		{LeaseV1, "claimed_at_ms", true, "want integer"},
		{LeaseV1, "renewed_at_ms", -5, "/renewed_at_ms"},
		{LeaseV1, "purpose", 1, "/purpose"},
		{ObservedStatusV1, "subject_key", "", "/subject_key"},
		{ObservedStatusV1, "subject_key", "/a", "/subject_key"},
		{ObservedStatusV1, "subject_key", "a/", "/subject_key"},
		{ObservedStatusV1, "subject_key", "a//b", "/subject_key"},
		{ObservedStatusV1, "subject_key", "a/../b", `"." and ".."`},
		{ObservedStatusV1, "subject_key", "./a", `"." and ".."`},
		{ObservedStatusV1, "subject_key", strings.Repeat("k", 257), "/subject_key"},
		{ObservedStatusV1, "state", "running", "/state"},
		{ObservedStatusV1, "state", nil, "/state"}, // see below: nil means JSON null here
		{ObservedStatusV1, "observed_at_ms", "now", "/observed_at_ms"},
		{ObservedStatusV1, "message", 42, "/message"},
		{ObservedStatusV1, "publication_id", "pub 1", "/publication_id"},
		{ObservedStatusV1, "subscription_id", "..", "/subscription_id"},
		{ObservedStatusV1, "variant_id", strings.Repeat("v", 129), "/variant_id"},
		{ObservedStatusV1, "error_code", 3, "/error_code"},
		{ObservedStatusV1, "holder", "a b", "/holder"},
		{PreferenceV1, "kind", 1, "/kind"},
		{PreferenceV1, "preferred_group", []any{}, "/preferred_group"},
		{PreferenceV1, "layout", true, "/layout"},
		{PreferenceV1, "audio_device", map[string]any{}, "/audio_device"},
		{WorkerStatusV1, "worker_id", "w/1", "/worker_id"},
		{WorkerStatusV1, "service", 1, "/service"},
		{WorkerStatusV1, "principal", "Transcoder", "/principal"},
		{WorkerStatusV1, "principal", "a.b", "/principal"},
		{WorkerStatusV1, "status", "up", "/status"},
		{WorkerStatusV1, "interval_ms", 99, "minimum 100"},
		{WorkerStatusV1, "interval_ms", 60001, "maximum 60000"},
		{WorkerStatusV1, "leases", "leases/a", "want array"},
		{WorkerStatusV1, "leases", []any{1}, "/leases/0"},
		{WorkerStatusV1, "leases", []any{"ok", "/bad"}, "/leases/1"},
		{WorkerStatusV1, "leases", []any{"a/../b"}, "/leases/0"},
		{WorkerStatusV1, "first_seen_ms", -1, "/first_seen_ms"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s=%v", c.id, c.prop, c.value), func(t *testing.T) {
			doc := maps.Clone(ex[c.id].doc)
			doc[c.prop] = c.value // a nil value encodes as JSON null
			wantInvalid(t, r.Validate(c.id, ex[c.id].ns, mustJSON(t, doc)), c.id, c.mention)
		})
	}
}

func TestIntegerBounds(t *testing.T) {
	r := newRegistry(t)
	ex := examples()[LeaseV1]
	doc := func(claimed string) []byte {
		return []byte(`{"holder":"w1","claimed_at_ms":` + claimed + `}`)
	}
	for _, ok := range []string{"0", "1", "9007199254740991", "1764451200000", "1.0", "1e3"} {
		wantValid(t, r.Validate(LeaseV1, ex.ns, doc(ok)))
	}
	for _, bad := range []string{"1.5", "-1", "9007199254740992", "18446744073709551616", "1e300", "-0.5", "0.1"} {
		wantInvalid(t, r.Validate(LeaseV1, ex.ns, doc(bad)), "/claimed_at_ms")
	}
	for _, bad := range []string{"1.5", "100.5", "999.9"} {
		wantInvalid(t, r.Validate(MediaIntentV1, "user/alice",
			[]byte(`{"role":"subscribe","desired":true,"source_id":"a","media_kind":"audio","priority":`+bad+`}`)), "/priority", "want integer")
	}
	for _, ok := range []string{"0", "1000"} {
		wantValid(t, r.Validate(MediaIntentV1, "user/alice",
			[]byte(`{"role":"subscribe","desired":true,"source_id":"a","media_kind":"audio","priority":`+ok+`}`)))
	}
	w := examples()[WorkerStatusV1]
	for _, ok := range []int{100, 60000} {
		wantValid(t, r.Validate(WorkerStatusV1, w.ns, mustJSON(t, with(w.doc, map[string]any{"interval_ms": ok}))))
	}
}

func TestRecordingMode(t *testing.T) {
	r := newRegistry(t)
	base := map[string]any{"desired": true, "source_id": "cam-1", "media_kind": "audio"}
	publish := with(base, map[string]any{"role": "publish"})
	subscribe := with(base, map[string]any{"role": "subscribe"})

	wantInvalid(t, r.Validate(MediaIntentV1, "user/alice", mustJSON(t, publish)),
		`missing property "recording_mode", required when role is "publish"`)
	for _, bad := range []any{"always", "", "Inherit", true, 1} {
		wantInvalid(t, r.Validate(MediaIntentV1, "user/alice",
			mustJSON(t, with(publish, map[string]any{"recording_mode": bad}))), "/recording_mode")
	}
	wantInvalid(t, r.Validate(MediaIntentV1, "user/alice",
		[]byte(`{"role":"publish","desired":true,"source_id":"a","media_kind":"audio","recording_mode":null}`)), "/recording_mode")
	for _, mode := range []string{"inherit", "disabled", "required"} {
		wantValid(t, r.Validate(MediaIntentV1, "user/alice", mustJSON(t, with(publish, map[string]any{"recording_mode": mode}))))
		wantValid(t, r.Validate(MediaIntentV1, "service/x", mustJSON(t, with(subscribe, map[string]any{"recording_mode": mode}))))
	}
	wantValid(t, r.Validate(MediaIntentV1, "user/alice", mustJSON(t, subscribe)))
	wantInvalid(t, r.Validate(MediaIntentV1, "user/alice",
		mustJSON(t, with(subscribe, map[string]any{"recording_mode": "sometimes"}))), "/recording_mode")
}

func TestWhere(t *testing.T) {
	r := newRegistry(t)
	namespaces := map[wire.NamespaceKind]string{
		wire.KindSystem: "system", wire.KindService: "service/x", wire.KindGroup: "group/family", wire.KindUser: "user/alice",
	}
	allowed := map[string][]wire.NamespaceKind{
		MediaIntentV1:    {wire.KindService, wire.KindUser},
		LeaseV1:          {wire.KindService},
		ObservedStatusV1: {wire.KindService, wire.KindUser},
		PreferenceV1:     {wire.KindUser, wire.KindGroup},
		WorkerStatusV1:   {wire.KindSystem},
	}
	for id, ex := range examples() {
		for kind, ns := range namespaces {
			t.Run(id+"@"+ns, func(t *testing.T) {
				err := r.Validate(id, ns, mustJSON(t, ex.doc))
				if slices.Contains(allowed[id], kind) {
					wantValid(t, err)
				} else {
					wantInvalid(t, err, id, "may not be used in namespace", ns)
				}
			})
		}
	}
	// The brief's own examples, spelled out.
	wantInvalid(t, r.Validate(LeaseV1, "user/alice", mustJSON(t, examples()[LeaseV1].doc)), "allowed only in service/<id>")
	wantInvalid(t, r.Validate(WorkerStatusV1, "service/x", mustJSON(t, examples()[WorkerStatusV1].doc)), "allowed only in system")
	wantInvalid(t, r.Validate(PreferenceV1, "service/x", mustJSON(t, examples()[PreferenceV1].doc)), "user/<id> or group/<id>")
	for _, ns := range []string{"", "foo/x", "system/x", "user/", "user/Alice", "user/a.b", "service/x/", "users/alice", "USER/alice"} {
		wantInvalid(t, r.Validate(MediaIntentV1, ns, mustJSON(t, examples()[MediaIntentV1].doc)), "not a valid namespace")
	}
}

func TestUnregistered(t *testing.T) {
	r := newRegistry(t)
	doc := mustJSON(t, examples()[MediaIntentV1].doc)
	for _, id := range []string{"", "keeppeek.media-intent.v2", "keeppeek.Media-Intent.v1", "x"} {
		wantInvalid(t, r.Validate(id, "user/alice", doc), "unregistered schema")
	}
}

// TestOrder checks the order of the checks: registration, namespace, document, guard.
func TestOrder(t *testing.T) {
	r := newRegistry(t)
	wantInvalid(t, r.Validate("nope", "foo/x", []byte("not json")), "unregistered schema")
	wantInvalid(t, r.Validate(LeaseV1, "user/alice", []byte("not json")), "may not be used in namespace")
	wantInvalid(t, r.Validate(LeaseV1, "service/x", []byte("not json")), "not valid JSON")
	// A schema mismatch is reported before forbidden content.
	wantInvalid(t, r.Validate(LeaseV1, "service/x", []byte(`{"holder":"w","claimed_at_ms":1,"password":"x"}`)),
		`property "password" is not allowed`)
	wantInvalid(t, r.Validate(LeaseV1, "service/x", []byte(`{"holder":"w","claimed_at_ms":-1,"purpose":"data:x"}`)),
		"/claimed_at_ms")
	// A valid document is still subject to the guard.
	wantInvalid(t, r.Validate(LeaseV1, "service/x", []byte(`{"holder":"w","claimed_at_ms":1,"purpose":"data:text/plain,hi"}`)),
		"data URI", `"/purpose"`)
}

func TestMalformedDocuments(t *testing.T) {
	r := newRegistry(t)
	cases := []struct{ doc, mention string }{
		{``, "not valid JSON"},
		{`{`, "not valid JSON"},
		{`{"kind":"a",}`, "not valid JSON"},
		{`{"kind":'a'}`, "not valid JSON"},
		{`{"kind":"a"} {"kind":"b"}`, "unexpected data"},
		{`{"kind":"a"}}`, "not one JSON value"},
		{`[{"kind":"a"}]`, "must be a JSON object, got array"},
		{`"kind"`, "must be a JSON object, got string"},
		{`null`, "must be a JSON object, got null"},
		{`3`, "must be a JSON object, got number"},
		{`{"kind":"a","kind":"b"}`, `duplicate property "kind" at the top level`},
	}
	for _, c := range cases {
		wantInvalid(t, r.Validate(PreferenceV1, "user/alice", []byte(c.doc)), c.mention)
	}
	// Whitespace around a valid document is fine; compactness is the caller's business.
	wantValid(t, r.Validate(PreferenceV1, "user/alice", []byte(" {\"kind\" : \"a\"}\n")))
}

// TestDuplicateKeysCannotHideContent: the store keeps the bytes it was given, so a duplicate key that
// would hide a value from the decoder is rejected wherever it is.
func TestDuplicateKeysCannotHideContent(t *testing.T) {
	r := newRegistry(t)
	wantInvalid(t, r.Validate(MediaIntentV1, "user/alice", []byte(
		`{"role":"bogus","role":"subscribe","desired":true,"source_id":"a","media_kind":"audio"}`)), `duplicate property "role"`)
	wantInvalid(t, r.Validate(MediaIntentV1, "user/alice", []byte(
		`{"role":"subscribe","desired":true,"source_id":"a","media_kind":"audio","parameters":{"svc":{"x":"data:,a","x":"ok"}}}`)),
		`duplicate property "x" at "/parameters/svc"`)
	wantInvalid(t, Guard([]byte(`{"a":[{"b":1,"b":2}]}`)), `duplicate property "b" at "/a/0"`)
}

func TestObservedStatusMessageBytes(t *testing.T) {
	r := newRegistry(t)
	ex := examples()[ObservedStatusV1]
	msg := func(m string) []byte { return mustJSON(t, with(ex.doc, map[string]any{"message": m})) }
	cases := []struct {
		m  string
		ok bool
	}{
		{"", true},
		{strings.Repeat("a", 256), true},
		{strings.Repeat("a", 257), false},
		{strings.Repeat("é", 128), true},        // 256 bytes, 128 characters
		{strings.Repeat("é", 128) + "a", false}, // 257 bytes, 129 characters: only the byte limit catches it
		{strings.Repeat("€", 85) + "a", true},   // 256 bytes
		{strings.Repeat("€", 85) + "é", false},  // 257 bytes
		{strings.Repeat("😀", 64), true},         // 256 bytes, 64 characters
		{strings.Repeat("😀", 64) + "a", false},  // 257 bytes
		{strings.Repeat("é", 200), false},       // 400 bytes, 200 characters
		{strings.Repeat("a", 300), false},       // over maxLength too
		{"line 1\nline 2\r\nline 3", true},
	}
	for _, c := range cases {
		err := r.Validate(ObservedStatusV1, ex.ns, msg(c.m))
		if c.ok {
			wantValid(t, err)
		} else {
			wantInvalid(t, err, "/message")
		}
	}
	wantInvalid(t, r.Validate(ObservedStatusV1, ex.ns, msg(strings.Repeat("é", 128)+"a")), "257 bytes, at most 256")
}

// identifierInputs are strings on both sides of the identifier, key, worker id and principal id rules.
var identifierInputs = []string{"", "a", "A", "0", ".", "..", "...", ".a", "a.", "a..b", "a b", "a/b", "a//b", "/a", "a/",
	"a/./b", "a/../b", "a/.../b", "./a", "a/.", "a/..", "-", "_", "a-b_c.d", "é", "a\n", "a\x00", "UPPER",
	"up-Per", "-lead", "_lead", "a+b", "a:b", "a=b", "1" + strings.Repeat("x", 62), strings.Repeat("x", 64),
	strings.Repeat("x", 65), strings.Repeat("x", 128), strings.Repeat("x", 129), strings.Repeat("ab/", 85) + "a",
	strings.Repeat("ab/", 85) + "ab", strings.Repeat("k", 256), strings.Repeat("k", 257), "a\n/b", "a/b\n",
	"a/\u00e9", "..\n", ".\r", "\u212a", "\u017f", "a\u0000b", strings.Repeat("é", 64), strings.Repeat("x", 127) + "é",
	strings.Repeat("a/", 128), strings.Repeat("a/", 127) + "a", strings.Repeat(".a/", 85) + "a", "tx-token", "sdp-relay"}

// TestIdentifierRulesMatchWire cross-checks the schemas' identifier, key, worker id and principal id
// rules with the wire package's.
func TestIdentifierRulesMatchWire(t *testing.T) {
	r := newRegistry(t)
	for _, s := range identifierInputs {
		checkIdentifierRules(t, r, s)
	}
}

// FuzzIdentifierRulesMatchWire is TestIdentifierRulesMatchWire for any string.
func FuzzIdentifierRulesMatchWire(f *testing.F) {
	r := newRegistry(f)
	for _, s := range identifierInputs {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // a JSON string holds none: the store refuses such a document before its schema
		}
		checkIdentifierRules(t, r, s)
	})
}

// checkIdentifierRules checks that each rule of the schemas accepts s exactly when the wire package's
// rule does. A service id is also a property name (of parameters), which the content guard judges
// too: one with a forbidden word ("tx-token") is refused whatever its rule says.
func checkIdentifierRules(t *testing.T, r *Registry, s string) {
	t.Helper()
	check := func(name string, valid bool, doc func(s string) (string, string, map[string]any), s string) {
		t.Helper()
		id, ns, d := doc(s)
		err := r.Validate(id, ns, mustJSON(t, d))
		if valid && err != nil {
			t.Errorf("%s %q: wire accepts, schema rejects: %v", name, s, err)
		}
		if !valid {
			if err == nil {
				t.Errorf("%s %q: wire rejects, schema accepts", name, s)
			} else {
				wantInvalid(t, err)
			}
		}
	}
	intent := examples()[MediaIntentV1]
	status := examples()[ObservedStatusV1]
	lease := examples()[LeaseV1]
	worker := examples()[WorkerStatusV1]
	check("identifier", wire.ValidIdentifier(s), func(s string) (string, string, map[string]any) {
		return MediaIntentV1, intent.ns, with(intent.doc, map[string]any{"variant_id": s})
	}, s)
	check("key", wire.ValidKey(s), func(s string) (string, string, map[string]any) {
		return ObservedStatusV1, status.ns, with(status.doc, map[string]any{"subject_key": s})
	}, s)
	check("worker key", wire.ValidKey(s), func(s string) (string, string, map[string]any) {
		return WorkerStatusV1, worker.ns, with(worker.doc, map[string]any{"leases": []any{s}})
	}, s)
	check("watch id", wire.ValidWatchID(s), func(s string) (string, string, map[string]any) {
		return LeaseV1, lease.ns, with(lease.doc, map[string]any{"holder": s})
	}, s)
	check("principal id", wire.ValidPrincipalID(s), func(s string) (string, string, map[string]any) {
		return WorkerStatusV1, worker.ns, with(worker.doc, map[string]any{"principal": s})
	}, s)
	check("service id", wire.ValidPrincipalID(s) && !oracleBadName(s), func(s string) (string, string, map[string]any) {
		return MediaIntentV1, intent.ns, with(intent.doc, map[string]any{"parameters": map[string]any{s: map[string]any{}}})
	}, s)
}

func TestSchemaErrorsDoNotEchoValues(t *testing.T) {
	r := newRegistry(t)
	secret := "hunter2-SECRET-VALUE"
	err := r.Validate(MediaIntentV1, "user/alice", mustJSON(t, map[string]any{
		"role": "publish", "desired": true, "source_id": secret + " x", "media_kind": secret, "recording_mode": secret,
	}))
	wantInvalid(t, err, "/source_id", "/media_kind", "/recording_mode")
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("message repeats a rejected value: %v", err)
	}
	// Many mismatches: the message stays bounded and says how many it left out.
	doc := map[string]any{"kind": "a"}
	for i := range 20 {
		doc[fmt.Sprintf("extra%02d", i)] = i
	}
	err = r.Validate(PreferenceV1, "user/alice", mustJSON(t, doc))
	wantInvalid(t, err, "not allowed")
	if len(err.Error()) > 1200 {
		t.Fatalf("message is %d bytes", len(err.Error()))
	}
}

func TestConcurrentValidate(t *testing.T) {
	r := newRegistry(t)
	type item struct {
		id, ns    string
		good, bad []byte
	}
	var items []item
	for id, e := range examples() {
		items = append(items, item{id, e.ns, mustJSON(t, e.doc), mustJSON(t, with(e.doc, map[string]any{"extra": true}))})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				for _, it := range items {
					if err := r.Validate(it.id, it.ns, it.good); err != nil {
						errs <- fmt.Errorf("goroutine %d, round %d, %s: %w", g, i, it.id, err)
						return
					}
					if err := r.Validate(it.id, it.ns, it.bad); !errors.Is(err, wire.ErrSchemaInvalid) {
						errs <- fmt.Errorf("goroutine %d, round %d, %s: extra property: got %v", g, i, it.id, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A document that passed is not decoded again, but the answer never changes: the namespace check runs
// each time, a document is remembered per schema, and a document that failed is never remembered.
func TestPassedDocumentsAreRemembered(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ex := examples()
	lease := mustJSON(t, ex[LeaseV1].doc)
	for range 2 {
		wantValid(t, r.Validate(LeaseV1, "service/x", lease))
	}
	if r.passed.len() != 1 {
		t.Fatalf("%d documents remembered after one passed twice", r.passed.len())
	}
	// Remembered, yet still refused where the schema may not be used, and under another schema.
	wantInvalid(t, r.Validate(LeaseV1, "user/alice", lease), "may not be used")
	wantInvalid(t, r.Validate(PreferenceV1, "user/alice", lease), PreferenceV1)
	bad := mustJSON(t, with(ex[LeaseV1].doc, map[string]any{"claimed_at_ms": "soon"}))
	for range 2 {
		wantInvalid(t, r.Validate(LeaseV1, "service/x", bad), "/claimed_at_ms")
	}
	if r.passed.len() != 1 {
		t.Fatalf("%d documents remembered: a failed one was kept", r.passed.len())
	}
	// Bounded: two generations at most, and a document validated again and again stays.
	for i := range 3 * passedGeneration {
		wantValid(t, r.Validate(LeaseV1, "service/x", mustJSON(t, with(ex[LeaseV1].doc, map[string]any{"claimed_at_ms": i + 1}))))
		if i%500 == 0 {
			wantValid(t, r.Validate(LeaseV1, "service/x", lease))
		}
	}
	if n := r.passed.len(); n > 2*passedGeneration {
		t.Fatalf("%d documents remembered, over two generations of %d", n, passedGeneration)
	}
	if !r.passed.has(passedKey{id: LeaseV1, sum: sha256.Sum256(lease)}) {
		t.Fatal("a document validated again and again aged out")
	}
}
