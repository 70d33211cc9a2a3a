package schema

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The content guard of SPEC section 13, written again from its text (regular expressions, runes)
// rather than from guard.go, so that FuzzGuardMatchesSpec compares two readings of it.
var (
	oracleSep = regexp.MustCompile(`[_.\-]+`)
	oracleSDP = regexp.MustCompile(`\Av=0(\r\n|\r|\n)o=`)
	oracleLB  = regexp.MustCompile(`\r\n|\r|\n`)
)

// oracleWords splits a property name into words at '_', '-' and '.' and where a lower-case letter is
// followed by an upper-case one.
func oracleWords(name string) []string {
	var out []string
	for _, part := range oracleSep.Split(name, -1) {
		rs := []rune(part)
		start := 0
		for i := 1; i < len(rs); i++ {
			if unicode.IsLower(rs[i-1]) && unicode.IsUpper(rs[i]) {
				out = append(out, string(rs[start:i]))
				start = i
			}
		}
		if start < len(rs) {
			out = append(out, string(rs[start:]))
		}
	}
	return out
}

// oracleBadName reports whether a word of name, compared without regard to case, is a forbidden word,
// or two adjacent words a forbidden pair.
func oracleBadName(name string) bool {
	ws := oracleWords(name)
	for i, w := range ws {
		for _, f := range []string{"password", "passwd", "secret", "token", "cookie", "credential", "credentials", "apikey", "authorization", "sdp"} {
			if strings.EqualFold(w, f) {
				return true
			}
		}
		if i+1 < len(ws) {
			for _, p := range [][2]string{{"api", "key"}, {"access", "key"}, {"private", "key"}} {
				if strings.EqualFold(w, p[0]) && strings.EqualFold(ws[i+1], p[1]) {
					return true
				}
			}
		}
	}
	return false
}

// oracleBadString reports whether s is a blob (over 1,024 bytes, 90% or more of them base64 or hex
// characters), a data URI, a PEM block, SDP or a log (more than 8 line breaks, "\r\n" counting one).
func oracleBadString(s string) bool {
	if len(s) > 1024 {
		n := 0
		for i := 0; i < len(s); i++ {
			c := s[i]
			if (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strings.IndexByte("+/=_-", c) >= 0 {
				n++
			}
		}
		if n*100 >= 90*len(s) {
			return true
		}
	}
	return strings.HasPrefix(s, "data:") || strings.Contains(s, "-----BEGIN ") || oracleSDP.MatchString(s) ||
		len(oracleLB.FindAllStringIndex(s, -1)) > 8
}

// oracleBad applies the rules at any depth. Like Guard, it applies the string rules to property names
// too.
func oracleBad(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if oracleBadName(k) || oracleBadString(k) || oracleBad(c) {
				return true
			}
		}
	case []any:
		for _, c := range t {
			if oracleBad(c) {
				return true
			}
		}
	case string:
		return oracleBadString(t)
	}
	return false
}

// FuzzGuardMatchesSpec checks Guard against the independent reading of SPEC section 13 above, on every
// document Guard can decode (FuzzGuard checks Guard against itself: its two walks, its re-encoding).
func FuzzGuardMatchesSpec(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"apiKey":1}`, `{"api":{"key":1}}`, `{"apiXKey":1}`, `{"xTOKEN":1}`, `{"aPassWord":1}`, `{"ſecret":1}`,
		`{"a":"v=0\r\no="}`, `{"a":"v=0\n\ro="}`, `{"a":" v=0\no="}`, `{"a":"DATA:x"}`, `{"a":["-----BEGIN "]}`,
		`{"a":"` + strings.Repeat(`\r\n`, 8) + `\r"}`, `{"a":"` + strings.Repeat(`\n\r`, 4) + `"}`,
		`{"a":"` + strings.Repeat("A", 1025) + `"}`, `{"a":"` + strings.Repeat("A", 923) + strings.Repeat("~", 102) + `"}`,
		`{"a":"` + strings.Repeat("A", 922) + strings.Repeat("é", 52) + `"}`, `{"` + strings.Repeat("A", 1025) + `":1}`,
		`{"x_private-KEY":1}`, `{"Access.Key":1}`, `{"aB_cD":[{"e":{"Cookie2":"data"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := decode(data); err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		got := Guard(data) != nil
		if want := oracleBad(v); got != want {
			t.Fatalf("Guard(%q) rejects=%v, oracle %v", data, got, want)
		}
	})
}
