package reconciler

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

func intentEntry(doc string) wire.Entry {
	return wire.Entry{Namespace: "service/transcoder-a", Key: "intents/front-door", Schema: MediaIntentSchema,
		Revision: 7, Document: json.RawMessage(doc)}
}

func TestDecodeMediaIntent(t *testing.T) {
	// The seed's example.
	e := intentEntry(`{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video",
		"variant_id":"browser-h264-720p","output_profile":"browser-h264-720p","priority":100,"recording_mode":"disabled",
		"stream_id":"video","parameters":{"cv-worker":{"model":"yolo","fps":5}}}`)
	got, err := DecodeMediaIntent(e)
	if err != nil {
		t.Fatalf("DecodeMediaIntent: %v", err)
	}
	want := MediaIntent{Role: "publish", Desired: true, SourceID: "front-door", MediaKind: "video", StreamID: "video",
		VariantID: "browser-h264-720p", OutputProfile: "browser-h264-720p", Priority: new(100), RecordingMode: "disabled",
		Parameters: map[string]json.RawMessage{"cv-worker": json.RawMessage(`{"model":"yolo","fps":5}`)}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}

	// It encodes back to the same JSON names.
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeMediaIntent(intentEntry(string(b)))
	if err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip through %s: %+v, %v", b, again, err)
	}

	off, err := DecodeMediaIntent(intentEntry(`{"role":"subscribe","desired":false,"source_id":"s","media_kind":"audio"}`))
	if err != nil || off.Desired || off.Role != RoleSubscribe {
		t.Fatalf("desired false: %+v, %v", off, err)
	}
}

func TestDecodeMediaIntentErrors(t *testing.T) {
	for _, tc := range []struct {
		name, schema, doc, field string
	}{
		{"other schema", "keeppeek.lease.v1", `{"holder":"w","claimed_at_ms":1}`, "schema"},
		{"no schema", "", `{}`, "schema"},
		{"array", MediaIntentSchema, `[]`, "document"},
		{"not json", MediaIntentSchema, `{"role":`, "document"},
		{"empty", MediaIntentSchema, ``, "document"},
		{"desired missing", MediaIntentSchema, `{"role":"publish","source_id":"s","media_kind":"video","recording_mode":"inherit"}`, "desired"},
		{"null document", MediaIntentSchema, `null`, "desired"},
		{"desired string", MediaIntentSchema, `{"role":"publish","desired":"yes","source_id":"s","media_kind":"video"}`, "desired"},
		{"role number", MediaIntentSchema, `{"role":5,"desired":true,"source_id":"s","media_kind":"video"}`, "role"},
		{"priority fraction", MediaIntentSchema, `{"role":"subscribe","desired":true,"source_id":"s","media_kind":"video","priority":1.5}`, "priority"},
		{"parameter not an object", MediaIntentSchema, `{"role":"subscribe","desired":true,"source_id":"s","media_kind":"video","parameters":{"cv":3}}`, "parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := intentEntry(tc.doc)
			e.Schema = tc.schema
			mi, err := DecodeMediaIntent(e)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("DecodeMediaIntent = %+v, %v; want a *ValidationError", mi, err)
			}
			if ve.Field != tc.field {
				t.Fatalf("error %q names field %q, want %q", err, ve.Field, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestMediaIntentValidate(t *testing.T) {
	valid := func(role, mode string) MediaIntent {
		return MediaIntent{Role: role, Desired: true, SourceID: "front-door", MediaKind: "video", RecordingMode: mode}
	}
	with := func(m MediaIntent, f func(*MediaIntent)) MediaIntent { f(&m); return m }
	pub := valid(RolePublish, "inherit")
	for _, tc := range []struct {
		name  string
		m     MediaIntent
		field string // "" for valid
	}{
		{"publish inherit", pub, ""},
		{"publish disabled", valid(RolePublish, "disabled"), ""},
		{"publish required", valid(RolePublish, "required"), ""},
		{"publish not desired still needs a mode", with(valid(RolePublish, ""), func(m *MediaIntent) { m.Desired = false }), "recording_mode"},
		{"publish without recording_mode", valid(RolePublish, ""), "recording_mode"},
		{"publish unknown recording_mode", valid(RolePublish, "always"), "recording_mode"},
		{"publish recording_mode in capitals", valid(RolePublish, "Inherit"), "recording_mode"},
		{"subscribe without recording_mode", valid(RoleSubscribe, ""), ""},
		{"subscribe with recording_mode", valid(RoleSubscribe, "disabled"), ""},
		{"subscribe unknown recording_mode", valid(RoleSubscribe, "sometimes"), "recording_mode"},
		{"subscribe audio with variant", with(valid(RoleSubscribe, ""), func(m *MediaIntent) { m.MediaKind = "audio"; m.VariantID = "opus-48k" }), ""},
		{"role missing", valid("", "inherit"), "role"},
		{"role unknown", valid("record", "inherit"), "role"},
		{"source_id empty", with(pub, func(m *MediaIntent) { m.SourceID = "" }), "source_id"},
		{"source_id with slash", with(pub, func(m *MediaIntent) { m.SourceID = "front/door" }), "source_id"},
		{"source_id dotdot", with(pub, func(m *MediaIntent) { m.SourceID = ".." }), "source_id"},
		{"source_id too long", with(pub, func(m *MediaIntent) { m.SourceID = strings.Repeat("a", 129) }), "source_id"},
		{"media_kind missing", with(pub, func(m *MediaIntent) { m.MediaKind = "" }), "media_kind"},
		{"media_kind data", with(pub, func(m *MediaIntent) { m.MediaKind = "data" }), "media_kind"},
		{"stream_id invalid", with(pub, func(m *MediaIntent) { m.StreamID = "a b" }), "stream_id"},
		{"variant_id invalid", with(pub, func(m *MediaIntent) { m.VariantID = "." }), "variant_id"},
		{"output_profile invalid", with(pub, func(m *MediaIntent) { m.OutputProfile = "h264/720p" }), "output_profile"},
		{"priority 0", with(pub, func(m *MediaIntent) { m.Priority = new(0) }), ""},
		{"priority 1000", with(pub, func(m *MediaIntent) { m.Priority = new(1000) }), ""},
		{"priority 1001", with(pub, func(m *MediaIntent) { m.Priority = new(1001) }), "priority"},
		{"priority negative", with(pub, func(m *MediaIntent) { m.Priority = new(-1) }), "priority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tc.m, err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate(%+v) = %v, want a *ValidationError", tc.m, err)
			}
			if ve.Field != tc.field {
				t.Fatalf("Validate(%+v) = %v: field %q, want %q", tc.m, err, ve.Field, tc.field)
			}
		})
	}
}

// TestPublishIntentWithoutRecordingModeFromDocument decodes the seed's failure case from JSON: it
// decodes (the document is well-formed) but never validates.
func TestPublishIntentWithoutRecordingModeFromDocument(t *testing.T) {
	mi, err := DecodeMediaIntent(intentEntry(`{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video","variant_id":"browser-h264-720p","output_profile":"browser-h264-720p"}`))
	if err != nil {
		t.Fatalf("DecodeMediaIntent: %v", err)
	}
	err = mi.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "recording_mode" {
		t.Fatalf("Validate = %v, want a *ValidationError on recording_mode", err)
	}
	for _, m := range []string{"inherit", "disabled", "required"} {
		if !strings.Contains(ve.Message, m) {
			t.Errorf("message %q does not list %q", ve.Message, m)
		}
	}
	st := InvalidStatus("intents/front-door", err, time.UnixMilli(1764451200000))
	var doc map[string]any
	if err := json.Unmarshal(st.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"subject_key": "intents/front-door", "state": "invalid", "observed_at_ms": float64(1764451200000),
		"message": err.Error()}
	if !reflect.DeepEqual(doc, want) {
		t.Fatalf("invalid status document %v, want %v", doc, want)
	}
}

func TestObservedStatusDocument(t *testing.T) {
	registry, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	full := ObservedStatus{SubjectKey: "intents/a", State: StateActive, ObservedAtMs: 42, Message: "ok",
		PublicationID: "pub-1", SubscriptionID: "sub-1", VariantID: "browser-h264-720p",
		ErrorCode: "PUBLICATION_ERROR_CODE_CONFLICT", Holder: "transcoder-a-1"}
	want := `{"subject_key":"intents/a","state":"active","observed_at_ms":42,"message":"ok","publication_id":"pub-1",` +
		`"subscription_id":"sub-1","variant_id":"browser-h264-720p","error_code":"PUBLICATION_ERROR_CODE_CONFLICT","holder":"transcoder-a-1"}`
	if got := string(full.Document()); got != want {
		t.Fatalf("Document\n%s\nwant\n%s", got, want)
	}
	minimal := ObservedStatus{SubjectKey: "intents/a", State: StatePending}
	if got, want := string(minimal.Document()), `{"subject_key":"intents/a","state":"pending","observed_at_ms":0}`; got != want {
		t.Fatalf("Document %s, want %s", got, want)
	}

	for _, tc := range []struct {
		name, in, want string
	}{
		{"short", "source unavailable", "source unavailable"},
		{"exactly 256", strings.Repeat("a", 256), strings.Repeat("a", 256)},
		{"ascii 300", strings.Repeat("a", 300), strings.Repeat("a", 256)},
		{"2-byte runes", strings.Repeat("é", 200), strings.Repeat("é", 128)},
		{"3-byte runes", strings.Repeat("€", 100), strings.Repeat("€", 85)},
		{"4-byte rune straddling", strings.Repeat("a", 254) + "😀", strings.Repeat("a", 254)},
		{"line breaks", "one\ntwo\r\nthree\rfour", "one two three four"},
		{"invalid utf-8", "bad\xff\xfebyte", "bad\uFFFDbyte"},
		{"invalid utf-8 long", strings.Repeat("\xff", 300), strings.Repeat("\uFFFD", 1)},
		{"data uri", "data:text/plain;base64,aGk= refused", "data text/plain;base64,aGk= refused"},
		{"pem block", "bad cert: -----BEGIN CERTIFICATE----- MIIB", "bad cert: -----begin CERTIFICATE----- MIIB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ObservedStatus{SubjectKey: "intents/a", State: StateFailed, ObservedAtMs: 1, Message: tc.in}
			var back ObservedStatus
			if err := json.Unmarshal(s.Document(), &back); err != nil {
				t.Fatal(err)
			}
			if back.Message != tc.want {
				t.Fatalf("message %q (%d bytes), want %q", back.Message, len(back.Message), tc.want)
			}
			if len(back.Message) > MaxStatusMessageBytes || !utf8.ValidString(back.Message) {
				t.Fatalf("message of %d bytes, valid UTF-8 %v", len(back.Message), utf8.ValidString(back.Message))
			}
			if s.Message != tc.in {
				t.Fatal("Document changed its receiver")
			}
			// The store takes it: the content guard finds nothing to refuse.
			if err := registry.Validate(wire.SchemaObservedStatus, "service/tx", s.Document()); err != nil {
				t.Fatalf("the store refuses the status: %v", err)
			}
		})
	}
}
