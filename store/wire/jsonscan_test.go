package wire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzScanJSON: scanJSON agrees with json.Valid, and "compact" means json.Compact changes nothing.
func FuzzScanJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2.5e-3,true,null,"x\u00e9\n"]}`, ` {"a" : 1} `, `{"a":1,}`, `[1,]`, `01`, `-`, `1e`,
		`"\x"`, "\"\x01\"", `{"a":"\ud800"}`, "\"\xff\"", `{"a":{"b":[{}]}}`, `tru`, `nul`, `[`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		valid, compact := scanJSON(data)
		if want := json.Valid(data); valid != want {
			t.Fatalf("scanJSON(%q) valid = %v, json.Valid %v", data, valid, want)
		}
		if !valid {
			return
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			t.Fatal(err)
		}
		if compact != bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("scanJSON(%q) compact = %v, json.Compact gives %q", data, compact, buf.Bytes())
		}
	})
}
