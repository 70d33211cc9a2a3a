package reconciler

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// An integer is a JSON number (SPEC: "All integers are JSON numbers"), and the store's schema takes
// 5.0, 5e0 or 1E2 as the integer it is. A worker must read such an intent as the store accepted it;
// reporting it invalid would leave a valid intent undone (a coordinator written in another language
// may well send 5.0).
func TestDecodeMediaIntentIntegerForms(t *testing.T) {
	_, c := setup(t)
	for _, tc := range []struct {
		priority string
		want     int
	}{{"5", 5}, {"5.0", 5}, {"5e0", 5}, {"1E2", 100}, {"0.0", 0}, {"1000.000", 1000}, {"-0", 0}} {
		doc := `{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video","priority":` + tc.priority +
			`,"recording_mode":"disabled"}`
		e, err := c.Put(ctxT(t), wire.PutRequest{Namespace: testNS, Key: "intents/x", Schema: MediaIntentSchema, Document: json.RawMessage(doc)})
		if err != nil {
			t.Fatalf("the store refused priority %s: %v", tc.priority, err)
		}
		mi, err := DecodeMediaIntent(e)
		if err != nil {
			t.Fatalf("DecodeMediaIntent of priority %s, which the store accepted: %v", tc.priority, err)
		}
		if mi.Priority == nil || *mi.Priority != tc.want {
			t.Fatalf("priority %s decoded as %v, want %d", tc.priority, mi.Priority, tc.want)
		}
		if err := mi.Validate(); err != nil {
			t.Fatalf("Validate of priority %s: %v", tc.priority, err)
		}
	}
	// What is not an integer stays a validation failure of the field.
	for _, p := range []string{"1.5", "1e-1", `"5"`, "true", "[]", "{}", "1e400"} {
		e := intentEntry(`{"role":"subscribe","desired":true,"source_id":"s","media_kind":"video","priority":` + p + `}`)
		var ve *ValidationError
		if _, err := DecodeMediaIntent(e); !errors.As(err, &ve) || ve.Field != "priority" {
			t.Fatalf("priority %s: %v, want a validation failure of priority", p, err)
		}
	}
	if mi, err := DecodeMediaIntent(intentEntry(`{"role":"subscribe","desired":true,"source_id":"s","media_kind":"video"}`)); err != nil || mi.Priority != nil {
		t.Fatalf("no priority: %+v, %v", mi, err)
	}
}

// A status another writer spelled observed_at_ms with an exponent (1.7644512e12, which the store's
// schema takes as an integer) did not decode into a reconciler.ObservedStatus, though it decodes into
// the wire.ObservedStatus it is defined from: the defined type had dropped wire's UnmarshalJSON.
func TestObservedStatusDecodesAsTheStoreReadsIt(t *testing.T) {
	_, c := setup(t)
	doc := json.RawMessage(`{"subject_key":"intents/a","state":"active","observed_at_ms":1.7644512e12}`)
	e, err := c.Put(ctxT(t), wire.PutRequest{Namespace: testNS, Key: "status/intents/a",
		Schema: ObservedStatusSchema, Document: doc})
	if err != nil {
		t.Fatalf("the store refused the status: %v", err)
	}
	var st ObservedStatus
	if err := json.Unmarshal(e.Document, &st); err != nil {
		t.Fatalf("decoding a status the store took: %v", err)
	}
	if st.ObservedAtMs != 1764451200000 || st.State != StateActive {
		t.Fatalf("decoded %+v", st)
	}
}
