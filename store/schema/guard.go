package schema

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/keeppeek/coordination/store/wire"
)

// Limits of the content guard (SPEC section 13).
const (
	// blobMinBytes: a string longer than this many bytes is checked for encoded binary content.
	blobMinBytes = 1024
	// blobPercent: the share of base64/hex characters, in percent, from which a long string is a blob.
	blobPercent = 90
	// maxLineBreaks: the most line breaks a string may hold.
	maxLineBreaks = 8
)

// forbiddenWords are the property name words that name a credential or a session description.
var forbiddenWords = []string{"password", "passwd", "secret", "token", "cookie", "credential",
	"credentials", "apikey", "authorization", "sdp"}

// forbiddenPairs are the adjacent property name words that name a key.
var forbiddenPairs = [][2]string{{"api", "key"}, {"access", "key"}, {"private", "key"}}

// Guard is the content guard of SPEC section 13. It parses document, one JSON value, and rejects it
// when, at any depth (nested objects and arrays, parameters included), a property name has a forbidden
// word (password, passwd, secret, token, cookie, credential, credentials, apikey, authorization, sdp, or
// the adjacent words api key, access key, private key), or a string is an encoded blob (over 1,024 bytes,
// 90% or more of them base64 or hex characters), a data URI, a PEM block, an SDP session description, or
// holds more than 8 line breaks. The string rules apply to property names as well as to values. It
// returns a *wire.Error with code wire.CodeSchemaInvalid, or nil. Malformed JSON and duplicate property
// names are rejected too.
func Guard(document []byte) error {
	v, err := decode(document)
	if err != nil {
		return err
	}
	return guardValue(v, nil)
}

// guardValue applies the guard to a decoded value at path. Documents almost always pass, so it first
// checks v without building paths or sorting property names (guardPasses), and only for a document
// that fails walks it again in sorted order to name the first fault.
func guardValue(v any, path []string) error {
	if guardPasses(v) {
		return nil
	}
	return guardReport(v, path)
}

// guardPasses reports whether the guard accepts a decoded value, allocating nothing when it does.
func guardPasses(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for name, child := range t {
			if forbiddenName(name) != "" || forbiddenString(name) != "" || !guardPasses(child) {
				return false
			}
		}
	case []any:
		for _, child := range t {
			if !guardPasses(child) {
				return false
			}
		}
	case string:
		return forbiddenString(t) == ""
	}
	return true
}

// guardReport returns the guard's error for the first fault of v, in sorted property order, at path.
func guardReport(v any, path []string) error {
	switch t := v.(type) {
	case map[string]any:
		for _, name := range slices.Sorted(maps.Keys(t)) {
			child := t[name]
			if word := forbiddenName(name); word != "" {
				return wire.Errorf(wire.CodeSchemaInvalid, "property name %s %s is forbidden: it has the word %q (credentials and session descriptions may not be stored)",
					quoteName(name), location(path), word)
			}
			if why := forbiddenString(name); why != "" {
				return wire.Errorf(wire.CodeSchemaInvalid, "a property name %s is forbidden: it %s", location(path), why)
			}
			if err := guardReport(child, append(path, name)); err != nil {
				return err
			}
		}
	case []any:
		for i, child := range t {
			if err := guardReport(child, append(path, strconv.Itoa(i))); err != nil {
				return err
			}
		}
	case string:
		if why := forbiddenString(t); why != "" {
			return wire.Errorf(wire.CodeSchemaInvalid, "string %s is forbidden: it %s", location(path), why)
		}
	case json.Number, bool, nil:
	}
	return nil
}

// nameWords splits a property name into its words: at '_', '-' and '.', and between a lower-case letter
// and an upper-case one. Empty words are dropped. The words are appended to dst.
func nameWords(dst []string, name string) []string {
	words := dst
	start := 0
	prevLower := false
	for i, r := range name {
		switch {
		case r == '_' || r == '-' || r == '.':
			if i > start {
				words = append(words, name[start:i])
			}
			start = i + 1
			prevLower = false
			continue
		case prevLower && unicode.IsUpper(r):
			words = append(words, name[start:i])
			start = i
		}
		prevLower = unicode.IsLower(r)
	}
	if start < len(name) {
		words = append(words, name[start:])
	}
	return words
}

// forbiddenName returns the forbidden word (or "first second" pair) of a property name, or "".
func forbiddenName(name string) string {
	var buf [8]string
	words := nameWords(buf[:0], name)
	for i, w := range words {
		for _, f := range forbiddenWords {
			if strings.EqualFold(w, f) {
				return f
			}
		}
		if i+1 < len(words) {
			for _, p := range forbiddenPairs {
				if strings.EqualFold(w, p[0]) && strings.EqualFold(words[i+1], p[1]) {
					return p[0] + " " + p[1]
				}
			}
		}
	}
	return ""
}

// forbiddenString says why s may not be stored ("is a data URI"), or returns "".
func forbiddenString(s string) string {
	if strings.HasPrefix(s, "data:") {
		return "is a data URI"
	}
	if strings.Contains(s, "-----BEGIN ") {
		return "holds a PEM block"
	}
	if isSDP(s) {
		return "is an SDP session description"
	}
	if n := lineBreaks(s); n > maxLineBreaks {
		return "has " + strconv.Itoa(n) + " line breaks, at most " + strconv.Itoa(maxLineBreaks) + " are allowed"
	}
	if len(s) > blobMinBytes && isBlob(s) {
		n := 0
		for i := 0; i < len(s); i++ {
			n += blobByte[s[i]]
		}
		return "looks like encoded binary data (" + strconv.Itoa(len(s)) + " bytes, " +
			strconv.Itoa(n*100/len(s)) + "% base64 or hex characters; such strings are limited to " +
			strconv.Itoa(blobMinBytes) + " bytes)"
	}
	return ""
}

// isBlobChar reports whether c is one of A-Za-z0-9+/=_- (base64, its URL-safe form, hex).
func isBlobChar(c byte) bool {
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		c == '+' || c == '/' || c == '=' || c == '_' || c == '-'
}

// blobByte[c] is 1 when isBlobChar(c).
var blobByte = func() (t [256]int) {
	for c := range 256 {
		if isBlobChar(byte(c)) {
			t[c] = 1
		}
	}
	return t
}()

// lineBreaks counts the line breaks of s: "\r\n", a lone "\r" and a lone "\n" count one each.
func lineBreaks(s string) int {
	n := strings.Count(s, "\n")
	if cr := strings.Count(s, "\r"); cr > 0 {
		n += cr - strings.Count(s, "\r\n")
	}
	return n
}

// isBlob reports whether blobPercent percent or more of the bytes of s are base64 or hex characters.
// It stops as soon as the other bytes are too many for that.
func isBlob(s string) bool {
	allowed := len(s) * (100 - blobPercent) / 100 // at most this many other bytes keep s a blob
	other := 0
	for i := 0; i < len(s); i++ {
		other += 1 - blobByte[s[i]]
		if other > allowed {
			return false
		}
	}
	return true
}

// isSDP reports whether s starts with "v=0", a line break and an "o=" line.
func isSDP(s string) bool {
	rest, ok := strings.CutPrefix(s, "v=0")
	if !ok {
		return false
	}
	switch {
	case strings.HasPrefix(rest, "\r\n"):
		rest = rest[2:]
	case strings.HasPrefix(rest, "\n"), strings.HasPrefix(rest, "\r"):
		rest = rest[1:]
	default:
		return false
	}
	return strings.HasPrefix(rest, "o=")
}
