package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// TestDocumentsDecodeWhatTheStoreTakes: the document types are how the SDK reads stored documents
// (lease claims and offsets, worker status), and the store's schemas take an integer however JSON
// spells it (1.7644512e12, 5000.0, 1E3: JSON Schema's "integer" is a number without a fraction), as a
// writer in another language may. What the store took must decode, with the same integers.
func TestDocumentsDecodeWhatTheStoreTakes(t *testing.T) {
	reg, err := schema.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema, ns, doc string
		into            any
		want            any
	}{
		{wire.SchemaLease, "service/x", `{"holder":"w-1","claimed_at_ms":1.7644512e12,"renewed_at_ms":1764451260000.0,"purpose":"p"}`,
			&wire.LeaseDocument{}, &wire.LeaseDocument{Holder: "w-1", ClaimedAtMs: 1764451200000, RenewedAtMs: 1764451260000, Purpose: "p"}},
		{wire.SchemaLease, "service/x", `{"holder":"w-1","claimed_at_ms":0e5}`,
			&wire.LeaseDocument{}, &wire.LeaseDocument{Holder: "w-1"}},
		{wire.SchemaObservedStatus, "user/alice", `{"subject_key":"a/b","state":"active","observed_at_ms":17644512E5,"message":"42"}`,
			&wire.ObservedStatus{}, &wire.ObservedStatus{SubjectKey: "a/b", State: wire.StateActive, ObservedAtMs: 1764451200000, Message: "42"}},
		{wire.SchemaWorkerStatus, "system", `{"worker_id":"w","service":"s","principal":"p","status":"ready","interval_ms":1e3,"leases":["l/a"],"first_seen_ms":5.0}`,
			&wire.WorkerStatus{}, &wire.WorkerStatus{WorkerID: "w", Service: "s", Principal: "p", Status: "ready", IntervalMs: 1000, Leases: []string{"l/a"}, FirstSeenMs: 5}},
	} {
		if err := reg.Validate(c.schema, c.ns, []byte(c.doc)); err != nil {
			t.Fatalf("the store refuses %s: %v", c.doc, err)
		}
		if err := json.Unmarshal([]byte(c.doc), c.into); err != nil {
			t.Errorf("%s: %v", c.doc, err)
			continue
		}
		if !reflect.DeepEqual(c.into, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.doc, c.into, c.want)
		}
	}
	// What the store refuses as an integer is still an error, and null leaves a field as it was.
	for _, doc := range []string{`{"claimed_at_ms":1.5}`, `{"claimed_at_ms":"5"}`, `{"claimed_at_ms":true}`,
		`{"renewed_at_ms":9007199254740992}`, `{"claimed_at_ms":1e400}`} {
		var d wire.LeaseDocument
		if err := json.Unmarshal([]byte(doc), &d); err == nil {
			t.Errorf("%s decoded as %+v", doc, d)
		}
	}
	d := wire.LeaseDocument{ClaimedAtMs: 7}
	if err := json.Unmarshal([]byte(`{"claimed_at_ms":null,"holder":"h"}`), &d); err != nil || d.ClaimedAtMs != 7 || d.Holder != "h" {
		t.Errorf("null: %+v, %v", d, err)
	}
	// Encoding is unchanged.
	b, _ := json.Marshal(wire.LeaseDocument{Holder: "w", ClaimedAtMs: 5})
	if string(b) != `{"holder":"w","claimed_at_ms":5}` {
		t.Errorf("encoded %s", b)
	}
}

// FuzzDocumentsReadWhatTheStoreTakes: a stored document is untrusted input for whoever reads it (another
// writer chose its bytes). Every lease, observed-status and worker-status document the store's schema
// takes, however its writer spelled it, decodes into its wire type without error and holds exactly
// what its bytes say (integers by value, as Integer reads them).
func FuzzDocumentsReadWhatTheStoreTakes(f *testing.F) {
	reg, err := schema.New()
	if err != nil {
		f.Fatal(err)
	}
	kinds := []struct {
		schema, ns string
		new        func() any
	}{
		{wire.SchemaLease, "service/x", func() any { return &wire.LeaseDocument{} }},
		{wire.SchemaObservedStatus, "user/alice", func() any { return &wire.ObservedStatus{} }},
		{wire.SchemaWorkerStatus, "system", func() any { return &wire.WorkerStatus{} }},
	}
	for _, s := range []struct {
		kind uint8
		doc  string
	}{
		{0, `{"holder":"w-1","claimed_at_ms":1.7644512e12,"renewed_at_ms":1764451260000.0,"purpose":"p"}`},
		{0, `{"holder":"w-1","claimed_at_ms":-0,"purpose":"\u00e9\ud800"}`},
		{0, `{"holder":"w","claimed_at_ms":9007199254740991,"renewed_at_ms":0e5}`},
		{1, `{"subject_key":"a/b","state":"active","observed_at_ms":17644512E5,"message":"42","holder":"w"}`},
		{1, `{"subject_key":"a/.b","state":"invalid","observed_at_ms":0.0,"error_code":"","publication_id":"p.1"}`},
		{2, `{"worker_id":"w","service":"s","principal":"p","status":"ready","interval_ms":1e3,"leases":["l/a"],"first_seen_ms":5.0}`},
		{2, `{"worker_id":"w","service":"","principal":"p","status":"stopping","interval_ms":60000,"leases":[],"first_seen_ms":0}`},
	} {
		f.Add(s.kind, []byte(s.doc))
	}
	f.Fuzz(func(t *testing.T, kind uint8, doc []byte) {
		k := kinds[int(kind)%len(kinds)]
		if reg.Validate(k.schema, k.ns, doc) != nil {
			return
		}
		v := k.new()
		if err := json.Unmarshal(doc, v); err != nil {
			t.Fatalf("the store takes %s %s, which does not decode: %v", k.schema, doc, err)
		}
		sameAsBytes(t, doc, v)
	})
}
