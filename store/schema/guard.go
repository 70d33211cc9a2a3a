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

// guardValue applies the guard to a decoded value at path.
func guardValue(v any, path []string) error {
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
			if err := guardValue(child, append(path, name)); err != nil {
				return err
			}
		}
	case []any:
		for i, child := range t {
			if err := guardValue(child, append(path, strconv.Itoa(i))); err != nil {
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
// and an upper-case one. Empty words are dropped.
func nameWords(name string) []string {
	var words []string
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
	words := nameWords(name)
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
	if len(s) > blobMinBytes {
		n := 0
		for i := 0; i < len(s); i++ {
			if isBlobChar(s[i]) {
				n++
			}
		}
		if n*100 >= len(s)*blobPercent {
			return "looks like encoded binary data (" + strconv.Itoa(len(s)) + " bytes, " +
				strconv.Itoa(n*100/len(s)) + "% base64 or hex characters; such strings are limited to " +
				strconv.Itoa(blobMinBytes) + " bytes)"
		}
	}
	return ""
}

// isBlobChar reports whether c is one of A-Za-z0-9+/=_- (base64, its URL-safe form, hex).
func isBlobChar(c byte) bool {
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		c == '+' || c == '/' || c == '=' || c == '_' || c == '-'
}

// lineBreaks counts the line breaks of s: "\r\n", a lone "\r" and a lone "\n" count one each.
func lineBreaks(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\r':
			n++
			if i+1 < len(s) && s[i+1] == '\n' {
				i++
			}
		case '\n':
			n++
		}
	}
	return n
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
