package schema

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestNameWords(t *testing.T) {
	cases := map[string][]string{
		"apiKey":           {"api", "Key"},
		"api_key":          {"api", "key"},
		"x.Private.Key":    {"x", "Private", "Key"},
		"clientSecret":     {"client", "Secret"},
		"SDP":              {"SDP"},
		"sdpOffer":         {"sdp", "Offer"},
		"XMLHttpRequest":   {"XMLHttp", "Request"},
		"api__key":         {"api", "key"},
		"_-.":              nil,
		"":                 nil,
		"tokenizer":        {"tokenizer"},
		"a.b-c_d":          {"a", "b", "c", "d"},
		"éTokenÄ":          {"é", "Token", "Ä"},
		"bitrate2Max":      {"bitrate2Max"},
		"TOKEN_value":      {"TOKEN", "value"},
		"preferredGroupID": {"preferred", "Group", "ID"},
	}
	for name, want := range cases {
		if got := nameWords(nil, name); !slices.Equal(got, want) {
			t.Errorf("nameWords(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestGuardPropertyNames(t *testing.T) {
	rejected := map[string]string{
		"password":            "password",
		"Password":            "password",
		"user_password":       "password",
		"passwd":              "passwd",
		"PASSWD":              "passwd",
		"secret":              "secret",
		"clientSecret":        "secret",
		"client-SECRET":       "secret",
		"token":               "token",
		"session_token":       "token",
		"accessToken":         "token",
		"refresh.token.v2":    "token",
		"cookie":              "cookie",
		"Set-Cookie":          "cookie",
		"credential":          "credential",
		"credentials":         "credentials",
		"awsCredentials":      "credentials",
		"apikey":              "apikey",
		"APIKEY":              "apikey",
		"APIKey":              "apikey",
		"x-apikey":            "apikey",
		"authorization":       "authorization",
		"Authorization":       "authorization",
		"proxy_authorization": "authorization",
		"sdp":                 "sdp",
		"SDP":                 "sdp",
		"sdpOffer":            "sdp",
		"remote_sdp":          "sdp",
		"apiKey":              "api key",
		"api_key":             "api key",
		"API-KEY":             "api key",
		"api__key":            "api key",
		"my.api.key.id":       "api key",
		"accessKey":           "access key",
		"access_key_id":       "access key",
		"private-key":         "private key",
		"privateKey":          "private key",
		"x.Private.Key":       "private key",
	}
	for name, word := range rejected {
		doc := mustJSON(t, map[string]any{name: "x"})
		wantInvalid(t, Guard(doc), "property name", `"`+word+`"`)
	}
	allowed := []string{"tokenizer", "keyframe", "keyFrame", "secretary", "passwords", "tokens", "cookies",
		"sdpx", "apikeys", "key", "api", "apiVersion", "api_url", "keyApi", "key_access", "privateer",
		"publicKey", "public_key", "access", "accessLevel", "private", "privateKeyboard", "authorizations",
		"author", "credentialed", "bitrate", "layout", "desired", "source_id", "", "_", "..", "X-Request-Id"}
	for _, name := range allowed {
		wantValid(t, Guard(mustJSON(t, map[string]any{name: "x"})))
	}
}

func TestGuardPropertyNamesAtAnyDepth(t *testing.T) {
	docs := map[string]string{
		`{"parameters":{"svc":{"apiKey":"x"}}}`:          `"/parameters/svc"`,
		`{"a":[{"b":[{"clientSecret":1}]}]}`:             `"/a/0/b/0"`,
		`{"a":[[[{"x":{"sdp":null}}]]]}`:                 `"/a/0/0/0/x"`,
		`{"a":{"b":{"c":{"d":{"session_token":true}}}}}`: `"/a/b/c/d"`,
		`{"a/b":{"c~d":{"password":1}}}`:                 `"/a~1b/c~0d"`,
		`[{"ok":1},{"private_key":{}}]`:                  `"/1"`,
		`{"token":{}}`:                                   "at the top level",
	}
	for doc, loc := range docs {
		wantInvalid(t, Guard([]byte(doc)), "property name", loc)
	}
	r := newRegistry(t)
	intent := examples()[MediaIntentV1]
	for _, name := range []string{"apiKey", "password", "sdp", "bearerToken"} {
		doc := with(intent.doc, map[string]any{"parameters": map[string]any{
			"transcoder-a": map[string]any{"nested": []any{map[string]any{name: "v"}}},
		}})
		wantInvalid(t, r.Validate(MediaIntentV1, intent.ns, mustJSON(t, doc)), `"/parameters/transcoder-a/nested/0"`)
	}
}

// blob returns n bytes of which blobChars are base64 characters and the rest spaces.
func blob(n, blobChars int) string {
	return strings.Repeat("A", blobChars) + strings.Repeat(" ", n-blobChars)
}

func TestGuardStrings(t *testing.T) {
	cases := []struct {
		name    string
		s       string
		ok      bool
		mention string
	}{
		{"1024 base64 bytes", strings.Repeat("QUJD", 256), true, ""},
		{"1025 base64 bytes", strings.Repeat("QUJD", 256) + "=", false, "encoded binary data"},
		{"1025 url-safe bytes", strings.Repeat("a-_Z", 256) + "0", false, "encoded binary data"},
		{"1025 all base64 set", strings.Repeat("Az09+/=_-", 114) + "a0aA", false, "encoded binary data"},
		{"2048 hex bytes", strings.Repeat("0123456789abcdef", 128), false, "encoded binary data"},
		{"1024 bytes, 100%", blob(1024, 1024), true, ""},
		{"1025 bytes, 922 (89.95%)", blob(1025, 922), true, ""},
		{"1025 bytes, 923 (90.05%)", blob(1025, 923), false, "encoded binary data"},
		{"1030 bytes, 927 (exactly 90%)", blob(1030, 927), false, "encoded binary data"},
		{"1030 bytes, 926 (89.9%)", blob(1030, 926), true, ""},
		{"1025 bytes, multi-byte", strings.Repeat("A", 900) + strings.Repeat("é", 62) + "A", true, ""}, // 901 of 1025
		{"long prose", strings.Repeat("the quick brown fox ", 100), true, ""},
		{"data URI", "data:image/png;base64,iVBORw0KGgo=", false, "data URI"},
		{"data URI bare", "data:", false, "data URI"},
		{"data later", "metadata: none", true, ""},
		{"data with space", " data:x", true, ""},
		{"PEM", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", false, "PEM"},
		{"PEM inside", "key follows: -----BEGIN PRIVATE KEY-----", false, "PEM"},
		{"PEM without space", "-----BEGIN", true, ""},
		{"four dashes", "----BEGIN X", true, ""},
		{"SDP LF", "v=0\no=- 4611731400430051336 2 IN IP4 127.0.0.1\ns=-", false, "SDP"},
		{"SDP CRLF", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n", false, "SDP"},
		{"SDP CR", "v=0\ro=x", false, "SDP"},
		{"SDP minimal", "v=0\no=", false, "SDP"},
		{"not SDP: version 1", "v=1\no=x", true, ""},
		{"not SDP: no break", "v=0 o=x", true, ""},
		{"not SDP: s line", "v=0\ns=x", true, ""},
		{"not SDP: blank line", "v=0\n\no=x", true, ""},
		{"not SDP: prefix", " v=0\no=x", true, ""},
		{"not SDP: v=0 only", "v=0", true, ""},
		{"8 LF", strings.Repeat("l\n", 8), true, ""},
		{"9 LF", strings.Repeat("l\n", 9), false, "9 line breaks"},
		{"8 CRLF", strings.Repeat("l\r\n", 8), true, ""},
		{"9 CRLF", strings.Repeat("l\r\n", 9), false, "9 line breaks"},
		{"8 CR", strings.Repeat("\r", 8), true, ""},
		{"9 CR", strings.Repeat("\r", 9), false, "9 line breaks"},
		{"4 CRLF + 4 LF", strings.Repeat("\r\n", 4) + strings.Repeat("\n", 4), true, ""},
		{"CR x LF is two", strings.Repeat("\rx\n", 4) + "\r", false, "9 line breaks"},
		{"CR x LF is two, 8", strings.Repeat("\rx\n", 4), true, ""},
		{"CR CRLF is two", strings.Repeat("\r\r\n", 4), true, ""},
		{"CR CRLF is two, over", strings.Repeat("\r\r\n", 4) + "\n", false, "9 line breaks"},
		{"plain", "hello", true, ""},
		{"empty", "", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, doc := range []any{
				map[string]any{"v": c.s},
				[]any{1, c.s},
				map[string]any{"a": []any{map[string]any{"b": []any{nil, c.s}}}},
				map[string]any{"parameters": map[string]any{"svc": map[string]any{"list": []any{c.s}}}},
			} {
				err := Guard(mustJSON(t, doc))
				if c.ok {
					wantValid(t, err)
				} else {
					wantInvalid(t, err, c.mention)
				}
			}
			// The string rules hold for property names too.
			err := Guard(mustJSON(t, map[string]any{"o": map[string]any{c.s: 1}}))
			if c.ok {
				wantValid(t, err)
			} else {
				wantInvalid(t, err, "a property name", `"/o"`, c.mention)
			}
		})
	}
}

func TestGuardStringLocations(t *testing.T) {
	docs := map[string]string{
		`{"a":"data:x"}`:         `string at "/a"`,
		`["ok",["ok","data:x"]]`: `string at "/1/1"`,
		`{"parameters":{"svc":{"offer":[0,"v=0\no=x"]}}}`: `string at "/parameters/svc/offer/1"`,
		`"data:x"`: "string at the top level",
	}
	for doc, loc := range docs {
		wantInvalid(t, Guard([]byte(doc)), loc)
	}
}

func TestGuardDoesNotEchoValues(t *testing.T) {
	for _, s := range []string{
		"-----BEGIN PRIVATE KEY-----MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
		"data:text/plain;base64,c2VjcmV0LXBheWxvYWQ=",
		strings.Repeat("c2VjcmV0LXBheWxvYWQ", 80),
		strings.Repeat("log line c2VjcmV0\n", 10),
	} {
		for _, doc := range []any{map[string]any{"v": s}, map[string]any{s: 1}} {
			err := Guard(mustJSON(t, doc))
			wantInvalid(t, err)
			if strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "MIIEvQ") {
				t.Fatalf("message repeats the rejected string: %v", err)
			}
		}
	}
	// A long forbidden property name is shortened in the message.
	name := "secret_" + strings.Repeat("x", 500)
	err := Guard(mustJSON(t, map[string]any{name: 1}))
	wantInvalid(t, err, `"secret"`, "...")
	if len(err.Error()) > 400 {
		t.Fatalf("message is %d bytes: %v", len(err.Error()), err)
	}
}

func TestGuardAcceptsScalars(t *testing.T) {
	for _, doc := range []string{`{}`, `[]`, `null`, `true`, `0`, `-1.5e300`, `123456789012345678901234567890`, `"x"`,
		`{"a":[1,2.5,true,false,null,{"b":{}}]}`} {
		wantValid(t, Guard([]byte(doc)))
	}
	for _, doc := range []string{``, `{`, `{"a":}`, `[1,]`, `{} []`, `nul`, `{"a":1,"a":1}`, "\"\x01\""} {
		wantInvalid(t, Guard([]byte(doc)))
	}
}

func TestGuardDepth(t *testing.T) {
	deep := strings.Repeat(`{"a":`, maxDepth-1) + `{"token":1}` + strings.Repeat("}", maxDepth-1)
	wantInvalid(t, Guard([]byte(deep)), `"token"`)
	tooDeep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	wantInvalid(t, Guard([]byte(tooDeep)), "nests deeper")
	ok := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	wantValid(t, Guard([]byte(ok)))
}

func TestValidateRunsGuard(t *testing.T) {
	r := newRegistry(t)
	ex := examples()
	cases := []struct {
		id, prop string
		value    any
		mention  string
	}{
		{ObservedStatusV1, "message", "data:,x", "data URI"},
		{ObservedStatusV1, "message", "v=0\r\no=- 1 1 IN IP4 0.0.0.0", "SDP"},
		{ObservedStatusV1, "message", strings.Repeat("\n", 9), "line breaks"},
		{ObservedStatusV1, "error_code", "-----BEGIN X", "PEM"},
		{LeaseV1, "purpose", strings.Repeat("QUJD", 300), "encoded binary data"},
		{PreferenceV1, "layout", strings.Repeat("\r\n", 9), "line breaks"},
		{PreferenceV1, "kind", "data:x", "data URI"},
		{WorkerStatusV1, "service", "data:x", "data URI"},
		{MediaIntentV1, "parameters", map[string]any{"svc": map[string]any{"offer": "v=0\no=x"}}, "SDP"},
		{MediaIntentV1, "parameters", map[string]any{"svc": map[string]any{"a": []any{"data:x"}}}, `"/parameters/svc/a/0"`},
		{MediaIntentV1, "parameters", map[string]any{"svc": map[string]any{"sdpAnswer": "x"}}, `"sdp"`},
	}
	for _, c := range cases {
		doc := with(ex[c.id].doc, map[string]any{c.prop: c.value})
		wantInvalid(t, r.Validate(c.id, ex[c.id].ns, mustJSON(t, doc)), c.mention)
	}
	// 8 line breaks in a message are fine.
	doc := with(ex[ObservedStatusV1].doc, map[string]any{"message": strings.Repeat("x\r\n", 8)})
	wantValid(t, r.Validate(ObservedStatusV1, ex[ObservedStatusV1].ns, mustJSON(t, doc)))
}

// TestGuardMatchesValidate: for a document valid against its schema, Validate and Guard agree.
func TestGuardMatchesValidate(t *testing.T) {
	r := newRegistry(t)
	for id, ex := range examples() {
		b := mustJSON(t, ex.doc)
		if err := Guard(b); err != nil {
			t.Errorf("%s: Guard: %v", id, err)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(id, ex.ns, b); err != nil {
			t.Errorf("%s: Validate: %v", id, err)
		}
	}
}
