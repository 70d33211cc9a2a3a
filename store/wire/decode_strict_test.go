package wire

import (
	"reflect"
	"strings"
	"testing"
)

// decodeReflect is Decode as it reads every request type other than put and ack: checkFieldNames,
// then encoding/json. The one-pass readers of put and ack must agree with it.
func decodeReflect(data []byte, v any) error {
	trimmed, err := requestObject(data, v)
	if err != nil {
		return err
	}
	return strictJSON(trimmed, v)
}

// sameDecode checks Decode against decodeReflect: both reject data, or both accept it with equal values.
func sameDecode[T any](t *testing.T, data []byte) {
	t.Helper()
	var got, want T
	gerr := Decode(data, &got)
	werr := decodeReflect(data, &want)
	switch {
	case (gerr == nil) != (werr == nil):
		t.Fatalf("%T %q: Decode error %v, encoding/json error %v", got, data, gerr, werr)
	case gerr == nil && !reflect.DeepEqual(got, want):
		t.Fatalf("%T %q:\n got %#v\nwant %#v", got, data, got, want)
	case gerr != nil && CodeOf(gerr) != CodeInvalidArgument:
		t.Fatalf("%T %q: error %v is not INVALID_ARGUMENT", got, data, gerr)
	}
}

var strictSeeds = []string{
	`{"request_id":3,"namespace":"user/alice","key":"k","schema":"keeppeek.lease.v1","document":{"a":[1,"x"]},"expected_revision":2,"ttl_ms":5000,"guard":{"key":"g","revision":2}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"expected_revision":null,"ttl_ms":null,"guard":null}`,
	`{"namespace":null,"key":"k","schema":"s","document":null}`, ` {"namespace" : "a" , "document" : { "a" : 1 } } `,
	`{"namespace":"user/alice","guard":{"KEY":"g","Revision":2}}`, `{"guard":{"key":"g","x":1}}`, `{"guard":[]}`,
	`{"expected_revision":1.5}`, `{"expected_revision":1e3}`, `{"ttl_ms":-0}`, `{"request_id":9223372036854775808}`,
	`{"namespace":"a\u00e9\ud800"}`, "{\"key\":\"\xff\"}", `{"key":5}`, `{"document":{"a":}}`, `{"document":"x"} x`,
	`{"namespace":"a","namespace":"b"}`, `{"Namespace":"a"}`, `{"owner":"a"}`, `{}`, `{`, `{"schema":"s",}`,
	`{"watch_id":"w","applied_sequence":3,"request_id":1}`, `{"watch_id":"w","applied_sequence":null}`,
	`{"watch_id":"w","applied_sequence":"3"}`, `{"watch_id":"w","applied_sequence":-1}`, `{"watch_id":["w"]}`,
	`{"guard":{"key":"g","key":"h","revision":2}}`, `{"guard":{"k\u0065y":"g","revision":2}}`, `{"guard":null}`,
	`{"guard":{"key":"g","revision":2} }`, `{"guard":{"key":"g","revision":2,}}`, `{"document":{"a":1e1000000}}`,
	`{"watch_id":"w","applied_sequence":1e0}`, `{"watch_id":"w","applied_sequence":9007199254740992}`,
	// At encoding/json's nesting bound (10,000 containers, the request's own included) and one past it.
	`{"document":` + strings.Repeat(`[`, 9999) + strings.Repeat(`]`, 9999) + `}`,
	`{"document":` + strings.Repeat(`{"a":`, 9999) + `{}` + strings.Repeat(`}`, 9999) + `}`,
	`{"guard":` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `}`,
}

func FuzzDecodeStrictMatchesJSON(f *testing.F) {
	for _, s := range strictSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameDecode[PutRequest](t, data)
		sameDecode[AckRequest](t, data)
	})
}

func TestDecodeStrictMatchesJSON(t *testing.T) {
	for _, s := range strictSeeds {
		sameDecode[PutRequest](t, []byte(s))
		sameDecode[AckRequest](t, []byte(s))
	}
	var r PutRequest
	if err := Decode([]byte(strictSeeds[0]), &r); err != nil || r.Guard == nil || r.Guard.Revision != 2 || *r.TTLMs != 5000 ||
		string(r.Document) != `{"a":[1,"x"]}` || !strings.HasPrefix(r.Namespace, "user/") {
		t.Fatalf("first seed: %+v %v", r, err)
	}
}
