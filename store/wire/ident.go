package wire

import "strings"

// NamespaceKind is the form of a namespace (SPEC section 1).
type NamespaceKind string

// The four namespace forms.
const (
	KindSystem  NamespaceKind = "system"
	KindService NamespaceKind = "service"
	KindGroup   NamespaceKind = "group"
	KindUser    NamespaceKind = "user"
)

// Namespace limits of SPEC section 1.
const (
	MaxPrincipalIDLen = 63
	MaxKeyLen         = 256
	MaxWatchIDLen     = 64
	// MaxIdentifierLen bounds identifier-like document strings (source_id, variant_id, ...).
	MaxIdentifierLen = 128
)

func isLowerAlnum(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// ValidPrincipalID reports whether s matches [a-z0-9][a-z0-9_-]{0,62}.
func ValidPrincipalID(s string) bool {
	if len(s) == 0 || len(s) > MaxPrincipalIDLen || !isLowerAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLowerAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidWatchID reports whether s matches [A-Za-z0-9_-]{1,64}. Worker ids follow the same rule.
func ValidWatchID(s string) bool {
	if len(s) == 0 || len(s) > MaxWatchIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isWordChar(s[i]) {
			return false
		}
	}
	return true
}

func isWordChar(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'
}

func isSegmentChar(c byte) bool { return isWordChar(c) || c == '.' }

// ParseNamespace splits a namespace into its kind and id. It reports false for anything that is not
// `system`, `service/<id>`, `group/<id>` or `user/<id>` with <id> a valid principal id.
func ParseNamespace(ns string) (NamespaceKind, string, bool) {
	if ns == string(KindSystem) {
		return KindSystem, "", true
	}
	kind, id, ok := strings.Cut(ns, "/")
	if !ok || !ValidPrincipalID(id) {
		return "", "", false
	}
	switch NamespaceKind(kind) {
	case KindService, KindGroup, KindUser:
		return NamespaceKind(kind), id, true
	}
	return "", "", false
}

// ValidNamespace reports whether ns is a valid namespace.
func ValidNamespace(ns string) bool {
	_, _, ok := ParseNamespace(ns)
	return ok
}

// ValidSegment reports whether s is a key segment: [A-Za-z0-9._-]+ and not "." or "..".
func ValidSegment(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isSegmentChar(s[i]) {
			return false
		}
	}
	return true
}

// ValidKey reports whether k is a valid key: 1 to 256 bytes of valid segments joined by "/".
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for seg := range strings.SplitSeq(k, "/") {
		if !ValidSegment(seg) {
			return false
		}
	}
	return true
}

// ValidKeyPrefix reports whether p is a valid key_prefix: empty, or a byte prefix of some valid key
// (same characters, no leading or double "/", may end in "/").
func ValidKeyPrefix(p string) bool {
	if p == "" {
		return true
	}
	if len(p) > MaxKeyLen || p[0] == '/' {
		return false
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		if last && seg == "" { // trailing "/"
			continue
		}
		if seg == "" {
			return false
		}
		for j := 0; j < len(seg); j++ {
			if !isSegmentChar(seg[j]) {
				return false
			}
		}
		// A complete segment may not be "." or ".."; the last one may still grow ("." -> ".a").
		if !last && (seg == "." || seg == "..") {
			return false
		}
	}
	// A prefix that must still grow to become a key (it ends in "/", "/." or "/..") needs room to.
	last := segs[len(segs)-1]
	if (last == "" || last == "." || last == "..") && len(p) >= MaxKeyLen {
		return false
	}
	return true
}

// ValidIdentifier reports whether s is an identifier-like document string: a key segment of at most
// 128 bytes (source_id, stream_id, variant_id, output_profile, publication_id, subscription_id).
func ValidIdentifier(s string) bool {
	return len(s) <= MaxIdentifierLen && ValidSegment(s)
}
