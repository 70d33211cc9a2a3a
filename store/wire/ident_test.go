package wire_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

type identCase struct {
	in   string
	want bool
}

func runIdentCases(t *testing.T, name string, f func(string) bool, cases []identCase) {
	t.Helper()
	for _, c := range cases {
		if got := f(c.in); got != c.want {
			in := c.in
			if len(in) > 40 {
				in = in[:20] + "..." + in[len(in)-17:] + " (len " + strconv.Itoa(len(c.in)) + ")"
			}
			t.Errorf("%s(%q) = %v, want %v", name, in, got, c.want)
		}
	}
}

// keyOfLen returns a valid key of exactly n bytes made of 16-byte segments.
func keyOfLen(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		seg := min(16, n-b.Len())
		b.WriteString(strings.Repeat("k", seg))
	}
	return b.String()
}

func TestValidPrincipalID(t *testing.T) {
	id63 := "a" + strings.Repeat("b", 62)
	runIdentCases(t, "ValidPrincipalID", wire.ValidPrincipalID, []identCase{
		{"a", true},
		{"0", true},
		{"coordinator", true},
		{"transcoder-a", true},
		{"a_b", true},
		{"a-b", true},
		{"a_", true},
		{"a-", true},
		{"0_-9", true},
		{id63, true},
		{"9" + strings.Repeat("_", 62), true},

		{"", false},
		{id63 + "b", false}, // 64 chars
		{id63 + "bbbb", false},
		{"_a", false},
		{"-a", false},
		{"_", false},
		{"-", false},
		{"A", false},
		{"Alice", false},
		{"aB", false},
		{"a.b", false},
		{".", false},
		{"a.", false},
		{"a b", false},
		{" a", false},
		{"a ", false},
		{"a/b", false},
		{"a*", false},
		{"a>", false},
		{"a$", false},
		{"a\x00", false},
		{"é", false},
		{"aé", false},
	})
}

func TestValidNamespace(t *testing.T) {
	id63 := "a" + strings.Repeat("b", 62)
	runIdentCases(t, "ValidNamespace", wire.ValidNamespace, []identCase{
		{"system", true},
		{"service/transcoder-a", true},
		{"service/x", true},
		{"group/ops", true},
		{"user/alice", true},
		{"user/0", true},
		{"user/a_b-c", true},
		{"service/" + id63, true},

		{"", false},
		{"system/", false},
		{"system/x", false},
		{"system/alice", false},
		{"foo/x", false},
		{"foo", false},
		{"service", false},
		{"group", false},
		{"user", false},
		{"service/", false},
		{"group/", false},
		{"user/", false},
		{"service/Bad", false},
		{"user/Alice", false},
		{"user/a/b", false},
		{"user/alice/", false},
		{"service/x/", false},
		{"group/ops/", false},
		{"/user/alice", false},
		{"user//alice", false},
		{"user/_a", false},
		{"user/-a", false},
		{"user/a.b", false},
		{"user/a b", false},
		{"user/*", false},
		{"user/>", false},
		{"service/" + id63 + "b", false},
		{"System", false},
		{"SYSTEM", false},
		{"Service/x", false},
		{"USER/alice", false},
		{" system", false},
		{"system ", false},
		{"user/alice ", false},
		{"services/x", false},
		{"users/alice", false},
		{"user\\alice", false},
		{"user.alice", false},
	})
}

func TestParseNamespace(t *testing.T) {
	for _, c := range []struct {
		ns   string
		kind wire.NamespaceKind
		id   string
	}{
		{"system", wire.KindSystem, ""},
		{"service/transcoder-a", wire.KindService, "transcoder-a"},
		{"group/ops", wire.KindGroup, "ops"},
		{"user/alice", wire.KindUser, "alice"},
	} {
		kind, id, ok := wire.ParseNamespace(c.ns)
		if !ok || kind != c.kind || id != c.id {
			t.Errorf("ParseNamespace(%q) = %q, %q, %v; want %q, %q, true", c.ns, kind, id, ok, c.kind, c.id)
		}
	}
	for _, ns := range []string{"", "system/x", "foo/x", "service/", "service/Bad", "user/a/b", "user/alice/"} {
		kind, id, ok := wire.ParseNamespace(ns)
		if ok || kind != "" || id != "" {
			t.Errorf("ParseNamespace(%q) = %q, %q, %v; want \"\", \"\", false", ns, kind, id, ok)
		}
	}
}

func TestValidKey(t *testing.T) {
	if len(keyOfLen(256)) != 256 || len(keyOfLen(257)) != 257 {
		t.Fatal("keyOfLen is broken")
	}
	runIdentCases(t, "ValidKey", wire.ValidKey, []identCase{
		{"a", true},
		{"intents/front-door", true},
		{"leases/front-door-video-browser-h264-720p", true},
		{"workers/alice/w-1", true},
		{"A-Z_a-z.0-9", true},
		{".a", true},
		{"a.", true},
		{"a..b", true},
		{"...", true},
		{"..a", true},
		{"a/.b/c", true},
		{"a/..b", true},
		{"a/b.", true},
		{"_", true},
		{"-", true},
		{strings.Repeat("a", 256), true},
		{keyOfLen(256), true},

		{"", false},
		{strings.Repeat("a", 257), false},
		{keyOfLen(257), false},
		{".", false},
		{"..", false},
		{"./a", false},
		{"../a", false},
		{"a/.", false},
		{"a/..", false},
		{"a/./b", false},
		{"a/../b", false},
		{"/", false},
		{"//", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{"a/b/", false},
		{"a b", false},
		{" a", false},
		{"a ", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a:b", false},
		{"a*b", false},
		{"a>b", false},
		{"a+b", false},
		{"a@b", false},
		{"a%2Fb", false},
		{"a\\b", false},
		{"a\x00", false},
		{"é", false},
		{"a~", false},
	})
}

func TestValidSegment(t *testing.T) {
	runIdentCases(t, "ValidSegment", wire.ValidSegment, []identCase{
		{"a", true},
		{".a", true},
		{"a..b", true},
		{"...", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a b", false},
	})
}

func TestValidKeyPrefix(t *testing.T) {
	runIdentCases(t, "ValidKeyPrefix", wire.ValidKeyPrefix, []identCase{
		{"", true},
		{"a", true},
		{"a/", true},
		{"a/b/", true},
		{"intents/", true},
		{"intents/front", true},
		{".", true},  // prefix of ".a"
		{"..", true}, // prefix of "..a"
		{"a/.", true},
		{"a/..", true},
		{"a/.x", true},
		{"a..b/", true},
		{strings.Repeat("a", 256), true},
		{keyOfLen(256), true},
		{strings.Repeat("a", 254) + "/", true},  // 255 bytes: prefix of a 256-byte key
		{strings.Repeat("a", 253) + "/.", true}, // 255 bytes: prefix of ".../.a"

		{"/", false},
		{"/a", false},
		{"//", false},
		{"a//", false},
		{"a//b", false},
		{"a/./b", false},
		{"a/../b", false},
		{"./", false},
		{"../", false},
		{"./a", false},
		{"../a", false},
		{"a/./", false},
		{"a b", false},
		{"a ", false},
		{"a*", false},
		{"a>", false},
		{"a:", false},
		{"é", false},
		{strings.Repeat("a", 257), false},
		{keyOfLen(257), false},
	})
}

// TestValidKeyPrefixAtLengthLimit: SPEC section 1 defines a key_prefix as a byte prefix of a valid key,
// and keys are at most 256 bytes. A 256-byte prefix is then a key itself, so it can neither end in "/"
// nor end in a "." or ".." segment: no valid key starts with it.
func TestValidKeyPrefixAtLengthLimit(t *testing.T) {
	runIdentCases(t, "ValidKeyPrefix", wire.ValidKeyPrefix, []identCase{
		{strings.Repeat("a", 255) + "/", false},
		{strings.Repeat("a", 254) + "/.", false},
		{strings.Repeat("a", 253) + "/..", false},
		{strings.Repeat("a", 255) + ".", true}, // control: a 256-byte key
	})
}

func TestValidWatchID(t *testing.T) {
	runIdentCases(t, "ValidWatchID", wire.ValidWatchID, []identCase{
		{"w", true},
		{"W", true},
		{"0", true},
		{"_", true},
		{"-", true},
		{"w-1_X", true},
		{"transcoder-a-1", true},
		{strings.Repeat("w", 64), true},

		{"", false},
		{strings.Repeat("w", 65), false},
		{".", false},
		{"a.b", false},
		{"a/b", false},
		{"a b", false},
		{"*", false},
		{">", false},
		{"a$", false},
		{"é", false},
		{"a\x00", false},
	})
}

func TestValidIdentifier(t *testing.T) {
	runIdentCases(t, "ValidIdentifier", wire.ValidIdentifier, []identCase{
		{"a", true},
		{"front-door", true},
		{"video.main_1", true},
		{".a", true},
		{"a..b", true},
		{strings.Repeat("i", 128), true},

		{"", false},
		{strings.Repeat("i", 129), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
	})
}

func TestPrincipalIDIsAlsoAWatchIDAndNamespaceID(t *testing.T) {
	for _, id := range []string{"a", "coordinator", "a" + strings.Repeat("_", 62)} {
		if !wire.ValidPrincipalID(id) || !wire.ValidWatchID(id) {
			t.Errorf("%q: principal %v, watch %v", id, wire.ValidPrincipalID(id), wire.ValidWatchID(id))
		}
		for _, k := range []string{"service/", "group/", "user/"} {
			if !wire.ValidNamespace(k + id) {
				t.Errorf("ValidNamespace(%q) = false", k+id)
			}
		}
	}
}
