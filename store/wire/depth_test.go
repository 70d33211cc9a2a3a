package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestNestingDepthMatchesEncodingJSON: encoding/json refuses JSON nested more than 10,000 containers
// deep. The one-pass scanner, the document check of a put and the one-pass put decoder must draw the
// line where it does: a compact document of 10,001 levels once passed check 1 while the same document
// with a space in it was INVALID_ARGUMENT, and a put whose document made the request 10,001 levels deep
// decoded though encoding/json refuses it.
func TestNestingDepthMatchesEncodingJSON(t *testing.T) {
	for _, n := range []int{9999, 10000, 10001, 10002} {
		objects := strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1)
		arrays := `{"a":` + strings.Repeat(`[`, n-1) + `1` + strings.Repeat(`]`, n-1) + `}`
		for name, doc := range map[string]string{"objects": objects, "arrays": arrays} {
			if valid, _ := scanJSON([]byte(doc)); valid != json.Valid([]byte(doc)) {
				t.Errorf("%d nested %s: scanJSON says valid %v, json.Valid %v", n, name, valid, !valid)
			}
			_, compactErr := CompactDocument(json.RawMessage(doc))
			_, spacedErr := CompactDocument(json.RawMessage(" " + strings.Replace(doc, ":", ": ", 1)))
			if (compactErr == nil) != (spacedErr == nil) {
				t.Errorf("%d nested %s: CompactDocument %v, with a space %v", n, name, compactErr, spacedErr)
			}
			if compactErr != nil && CodeOf(compactErr) != CodeInvalidArgument {
				t.Errorf("%d nested %s: CompactDocument %v, want INVALID_ARGUMENT", n, name, compactErr)
			}
			req := []byte(`{"namespace":"user/alice","key":"k","schema":"s","document":` + doc + `}`)
			var got, want PutRequest
			gerr, werr := Decode(req, &got), decodeReflect(req, &want)
			if (gerr == nil) != (werr == nil) {
				t.Errorf("put with %d nested %s: Decode error %v, encoding/json error %v", n, name, gerr, werr)
			}
		}
	}
}
