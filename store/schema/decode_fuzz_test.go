package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode checks the single-pass decoder against encoding/json: it accepts exactly the valid JSON
// texts (less duplicate names and extreme nesting) and produces the same values.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":[1,2.5e3,-0.1,true,false,null,"x\u00e9\n"]}`, `{"a":{"b":{}}}`,
		` {"a" : "b" } `, `{"a":1,"a":2}`, `01`, `{"a":1,}`, `[1,]`, `"\ud800"`, "\"\xff\"", `1e`, `-`, `{"a":"\\"}`, `tru`, `[`,
		`1e1000000`, `-0`, `1E+2`, `{"a":1e-999999}`, `{"a":"\u0061","\u0061":1}`, `{"a":1,"\u0061":2}`, `"\ud83d\ude00"`, `0.0e0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decode(data)
		valid := json.Valid(data)
		if err == nil && !valid {
			t.Fatalf("decode accepted invalid JSON %q", data)
		}
		if err != nil {
			if valid && !strings.Contains(err.Error(), "duplicate property") && !strings.Contains(err.Error(), "nests deeper") {
				t.Fatalf("decode rejected valid JSON %q: %v", data, err)
			}
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(%q) = %#v, encoding/json gives %#v", data, got, want)
		}
	})
}
