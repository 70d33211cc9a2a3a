package wire_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// The identifier rules of SPEC section 1, written again as regular expressions (rather than from
// ident.go), so that the fuzz targets compare two readings of them.
var (
	rePrincipal = regexp.MustCompile(`\A[a-z0-9][a-z0-9_-]{0,62}\z`)
	reWatchID   = regexp.MustCompile(`\A[A-Za-z0-9_-]{1,64}\z`)
	reNamespace = regexp.MustCompile(`\A(system|(service|group|user)/[a-z0-9][a-z0-9_-]{0,62})\z`)
	reKeyChars  = regexp.MustCompile(`\A[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*\z`)
	reDotSeg    = regexp.MustCompile(`(\A|/)\.\.?(/|\z)`)
	reSegment   = regexp.MustCompile(`\A[A-Za-z0-9._-]+\z`)
)

// oracleKey is SPEC's key rule: 1 to 256 bytes, segments of [A-Za-z0-9._-]+ joined by "/", none "."
// or "..".
func oracleKey(s string) bool {
	return len(s) >= 1 && len(s) <= wire.MaxKeyLen && reKeyChars.MatchString(s) && !reDotSeg.MatchString(s)
}

// oracleSegment is a key segment: [A-Za-z0-9._-]+, not "." or "..".
func oracleSegment(s string) bool { return reSegment.MatchString(s) && s != "." && s != ".." }

// oracleKeyPrefix is SPEC's key_prefix rule: empty, or a byte prefix of a valid key. The shortest
// valid key s is a prefix of is s itself, or s with one more character when s ends in "/", "/." or
// "/.." (or is "." or ".."): any other extension is longer or keeps the same fault.
func oracleKeyPrefix(s string) bool {
	if s == "" || oracleKey(s) {
		return true
	}
	return oracleKey(s + "a")
}

// topLevel decodes a JSON object's members (numbers as json.Number).
func topLevel(t *testing.T, data []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	return m
}

// normalize makes a decoded JSON value comparable across spellings: every number that is an integer of
// the contract's range becomes that int64 (so -0 and 0 compare equal); other numbers stay as spelled.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, c := range t {
			out[k] = normalize(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = normalize(c)
		}
		return out
	case json.Number:
		if n, ok := wire.Integer(json.RawMessage(t)); ok {
			return n
		}
	}
	return v
}

// zeroMember reports whether a top-level member's value is what an absent member decodes to: null, "",
// 0 or false. encoding/json leaves such a field as absent, and omitempty drops it again.
func zeroMember(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	case bool:
		return !t
	case int64:
		return t == 0
	}
	return false
}

// sameAsBytes checks that v, decoded from data and accepted, holds exactly what data says: encoded
// again, it has the same members with the same values (less those that read as absent), so no member
// was dropped, moved to another field, or read with another value.
func sameAsBytes(t *testing.T, data []byte, v any) {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%+v): %v", v, err)
	}
	members := func(b []byte) map[string]any {
		m := normalize(topLevel(t, b)).(map[string]any)
		for k, c := range m {
			if zeroMember(c) {
				delete(m, k)
			}
		}
		return m
	}
	if got, want := members(out), members(data); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q was accepted as %+v, which encodes as %s:\n got %#v\nwant %#v", data, v, out, got, want)
	}
}

// TestOracles checks the oracles themselves on the boundaries of each rule.
func TestOracles(t *testing.T) {
	for _, c := range []struct {
		f    func(string) bool
		name string
		in   string
		want bool
	}{
		{oracleKey, "key", keyOfLen(256), true}, {oracleKey, "key", keyOfLen(257), false},
		{oracleKey, "key", "a/.b", true}, {oracleKey, "key", "a/./b", false}, {oracleKey, "key", "..", false},
		{oracleKey, "key", "a/", false}, {oracleKey, "key", "a\n", false},
		{oracleKeyPrefix, "prefix", "a/", true}, {oracleKeyPrefix, "prefix", "a/.", true}, {oracleKeyPrefix, "prefix", "a/./", false},
		{oracleKeyPrefix, "prefix", strings.Repeat("a", 255) + "/", false}, {oracleKeyPrefix, "prefix", strings.Repeat("a", 254) + "/", true},
		{oracleKeyPrefix, "prefix", "/a", false}, {oracleKeyPrefix, "prefix", "", true},
		{oracleSegment, "segment", "...", true}, {oracleSegment, "segment", "..", false},
		{rePrincipal.MatchString, "principal", "a\n", false}, {reWatchID.MatchString, "watch id", strings.Repeat("w", 64), true},
		{reNamespace.MatchString, "namespace", "system/", false}, {reNamespace.MatchString, "namespace", "user/a", true},
	} {
		if got := c.f(c.in); got != c.want {
			t.Errorf("oracle %s(%q) = %v, want %v", c.name, c.in, got, c.want)
		}
	}
}
