package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// checkErr fails unless err is nil or a *wire.Error with code SCHEMA_INVALID.
func checkErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeSchemaInvalid || !errors.Is(err, wire.ErrSchemaInvalid) {
		t.Fatalf("got %T %v, want a *wire.Error with %s", err, err, wire.CodeSchemaInvalid)
	}
	if we.Message == "" {
		t.Fatal("SCHEMA_INVALID without a message")
	}
}

func FuzzGuard(f *testing.F) {
	for _, seed := range []string{
		`{}`, `[]`, `null`, `"x"`, `{"a":1}`, `{"apiKey":"x"}`, `{"tokenizer":"x"}`, `{"a":[{"clientSecret":1}]}`,
		`{"a":"data:x"}`, `{"a":"-----BEGIN X"}`, `{"a":"v=0\r\no=x"}`, `{"a":"v=0\no="}`,
		`{"a":"` + strings.Repeat(`\n`, 9) + `"}`, `{"a":"` + strings.Repeat(`\r\n`, 8) + `"}`,
		`{"a":"` + strings.Repeat("A", 1025) + `"}`, `{"a":"` + strings.Repeat("A", 1024) + `"}`,
		`{"a":1,"a":2}`, `{"a":`, `{"a":"\u00e9"}`, `{"x.Private.Key":{}}`, "{\"a\":\"\xff\"}",
		`[[[[[[[[{"sdp":1}]]]]]]]]`, `{"parameters":{"svc":{"nested":["v=0\no=x"]}}}`,
		`{"pass\u0077ord":1}`, `{"api\u005fkey":1}`, `{"\u0073dp":{}}`, `{"a":"\u0064ata:x"}`, `{"a":"v=0\u000d\u000ao=x"}`,
		`{"a":"-----BEGIN\u0020X"}`, `{"aToken":1}`, `{"ApiKey":1}`, `{"APIToken":1}`, `{"x":"` + strings.Repeat("\r\n", 9) + `"}`,
		`{"a":"` + strings.Repeat("A", 922) + strings.Repeat(" ", 103) + `"}`, `{"a":1e1000000}`, `{"data:x":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Guard(data)
		checkErr(t, err)
		// The allocation-free pass and the reporting walk judge every document alike.
		if v, derr := decode(data); derr == nil && guardPasses(v) != (guardReport(v, nil) == nil) {
			t.Fatalf("guardPasses %v but guardReport %v for %q", guardPasses(v), guardReport(v, nil), data)
		}
		if err == nil && !json.Valid(data) {
			t.Fatalf("Guard accepted invalid JSON %q", data)
		}
		if err == nil {
			// Whatever Guard accepts, its re-encoding is accepted too (nothing hides in escapes).
			var v any
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if derr := dec.Decode(&v); derr != nil {
				t.Fatal(derr)
			}
			again, merr := json.Marshal(v)
			if merr != nil {
				t.Fatal(merr)
			}
			if gerr := Guard(again); gerr != nil {
				t.Fatalf("Guard accepted %q but rejects its re-encoding %q: %v", data, again, gerr)
			}
		}
	})
}

func FuzzValidate(f *testing.F) {
	r, err := New()
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct{ ns, doc string }{
		{"user/alice", `{"role":"publish","desired":true,"source_id":"cam","media_kind":"video","recording_mode":"inherit"}`},
		{"service/x", `{"role":"subscribe","desired":false,"source_id":"a.b","media_kind":"audio","priority":1000}`},
		{"user/alice", `{"role":"publish","desired":true,"source_id":"cam","media_kind":"video"}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"..","media_kind":"video"}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","priority":1.5}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","parameters":{"svc":{"apiKey":"x"}}}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","parameters":{"Svc":{}}}`},
		{"user/alice", `{"role":"subscribe","role":"publish","desired":true,"source_id":"a","media_kind":"video"}`},
		{"group/g", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video"}`},
		{"system", `{}`},
		{"foo/x", `[]`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","extra":1}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","priority":1e1000000}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","priority":1.0e3}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a","media_kind":"video","priority":-0.0}`},
		{"user/alice", `{"role":"publish","desired":true,"source_id":"a","media_kind":"video","recording_mode":"required","parameters":{"svc":{"apiKey":"x"}}}`},
		{"service/x", `{"role":"subscribe","desired":true,"source_id":"` + strings.Repeat("a", 129) + `","media_kind":"video"}`},
		{"user/alice", `{"role":"subscribe","desired":true,"source_id":"a\n","media_kind":"video"}`},
	} {
		f.Add(seed.ns, []byte(seed.doc))
	}
	f.Fuzz(func(t *testing.T, ns string, doc []byte) {
		err := r.Validate(MediaIntentV1, ns, doc)
		checkErr(t, err)
		if err != nil {
			return
		}
		// Accepted: the namespace is a service or user one, the document is valid JSON, passes the guard
		// and has the required properties with allowed values.
		kind, _, ok := wire.ParseNamespace(ns)
		if !ok || (kind != wire.KindService && kind != wire.KindUser) {
			t.Fatalf("accepted in namespace %q", ns)
		}
		if gerr := Guard(doc); gerr != nil {
			t.Fatalf("accepted a document the guard rejects: %v", gerr)
		}
		var d struct {
			Role          *string `json:"role"`
			Desired       *bool   `json:"desired"`
			SourceID      *string `json:"source_id"`
			MediaKind     *string `json:"media_kind"`
			RecordingMode *string `json:"recording_mode"`
		}
		if uerr := json.Unmarshal(doc, &d); uerr != nil {
			t.Fatalf("accepted %q: %v", doc, uerr)
		}
		if d.Role == nil || (*d.Role != "publish" && *d.Role != "subscribe") || d.Desired == nil ||
			d.SourceID == nil || !wire.ValidIdentifier(*d.SourceID) ||
			d.MediaKind == nil || (*d.MediaKind != "video" && *d.MediaKind != "audio") {
			t.Fatalf("accepted %q", doc)
		}
		if *d.Role == "publish" && d.RecordingMode == nil {
			t.Fatalf("accepted a publish intent without recording_mode: %q", doc)
		}
	})
}
