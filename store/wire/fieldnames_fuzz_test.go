package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// referenceFieldNames is the straightforward check (a token walk) that checkFieldNames must agree with
// on every valid JSON object.
func referenceFieldNames(obj []byte, names map[string]bool) bool {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		name, _ := tok.(string)
		if !names[name] || seen[name] {
			return false
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return false
		}
	}
	return true
}

func FuzzCheckFieldNames(f *testing.F) {
	for _, s := range []string{`{}`, `{"namespace":"a","key":"b"}`, `{"key":"a","key":"b"}`, `{"Key":"a"}`,
		`{"namespace":{"x":[1,"}",{"y":"\""}]},"key":"k"}`, `{"namespace" : "a" , "key":[ ] }`, `{"k\u0065y":"a"}`, `{"key":"a",}`} {
		f.Add([]byte(s))
	}
	typ := reflect.TypeOf(GetRequest{})
	names := map[string]bool{"request_id": true, "namespace": true, "key": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || len(bytes.TrimLeft(data, " \t\r\n")) == 0 || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			return
		}
		obj := bytes.Trim(data, " \t\r\n")
		got := checkFieldNames(obj, typ) == nil
		// Escaped names are refused by checkFieldNames even when they decode to a known name.
		if want := referenceFieldNames(obj, names); got != want && !(want && bytes.Contains(obj, []byte(`\`))) {
			t.Fatalf("checkFieldNames(%s) = %v, reference %v", obj, got, want)
		}
	})
}
