package schema

import (
	"strings"
	"testing"
)

// TestValidateDoesNotEchoForbiddenNames: the guard never repeats a property name it refuses as a
// string (a PEM block, a data URI, an encoded blob, a log), and neither may the checks that run before
// it on the same document: an unknown top-level property, a parameters key that is not a service id,
// a path through such a key and a duplicate all name the property without quoting its content.
func TestValidateDoesNotEchoForbiddenNames(t *testing.T) {
	r := newRegistry(t)
	const leak = "MIIEvQIBADANBgkq"
	names := []string{
		"-----BEGIN PRIVATE KEY-----" + leak + "hkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
		"data:text/plain;base64," + leak,
		strings.Repeat(leak, 80),
		strings.Repeat(leak+"\n", 10),
	}
	intent := `"role":"subscribe","desired":true,"source_id":"s","media_kind":"video"`
	for _, name := range names {
		q := mustJSON(t, name)
		for _, c := range []struct{ id, ns, doc, where string }{
			{MediaIntentV1, "service/a", `{` + intent + `,` + string(q) + `:1}`, "top level"},
			{PreferenceV1, "user/a", `{"kind":"k",` + string(q) + `:"x"}`, "top level"},
			{MediaIntentV1, "service/a", `{` + intent + `,"parameters":{` + string(q) + `:{}}}`, "/parameters"},
			{MediaIntentV1, "service/a", `{` + intent + `,"parameters":{` + string(q) + `:"x"}}`, "/parameters"},
			{MediaIntentV1, "service/a", `{` + intent + `,"parameters":{"svc":{` + string(q) + `:1,` + string(q) + `:2}}}`, "/parameters/svc"},
			{MediaIntentV1, "service/a", `{` + intent + `,"parameters":{` + string(q) + `:{"a":1,"a":2}}}`, "/parameters/"},
		} {
			err := r.Validate(c.id, c.ns, []byte(c.doc))
			wantInvalid(t, err, c.where)
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: message repeats a refused property name: %v", c.doc[:min(len(c.doc), 120)], err)
			}
		}
	}
	// An ordinary unknown name is still named in full.
	wantInvalid(t, r.Validate(PreferenceV1, "user/a", []byte(`{"kind":"k","colour":"red"}`)), `"colour"`)
}
