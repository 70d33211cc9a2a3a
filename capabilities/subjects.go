package capabilities

import "strings"

// DefaultPrefix is the default subject prefix.
const DefaultPrefix = "kp"

// Command is the name of a media command, the last token of its subject.
type Command string

// The media commands of SPEC section 12.
const (
	CommandSubscribe        Command = "subscribe"
	CommandUnsubscribe      Command = "unsubscribe"
	CommandStartPublication Command = "start_publication"
	CommandStopPublication  Command = "stop_publication"
)

// AllCommands lists every media command.
func AllCommands() []Command {
	return []Command{CommandSubscribe, CommandUnsubscribe, CommandStartPublication, CommandStopPublication}
}

// Valid reports whether c is one of the four media commands.
func (c Command) Valid() bool {
	switch c {
	case CommandSubscribe, CommandUnsubscribe, CommandStartPublication, CommandStopPublication:
		return true
	}
	return false
}

// GetSubject is the capability request subject: <prefix>.caps.v1.get.
func GetSubject(prefix string) string { return prefix + ".caps.v1.get" }

// ChangedSubject is the capability change subject: <prefix>.caps.v1.changed.
func ChangedSubject(prefix string) string { return prefix + ".caps.v1.changed" }

// CommandSubject is the request subject of a media command: <prefix>.media.v1.<principal>.<command>.
func CommandSubject(prefix, principal string, cmd Command) string {
	return prefix + ".media.v1." + principal + "." + string(cmd)
}

// CommandWildcard is the subject a media server subscribes to for cmd from every principal:
// <prefix>.media.v1.*.<command>.
func CommandWildcard(prefix string, cmd Command) string {
	return prefix + ".media.v1.*." + string(cmd)
}

// ParseCommandSubject splits a media command subject under prefix into its principal and command.
// ok is false when subject is not <prefix>.media.v1.<principal>.<command> with a valid principal id
// and one of the four commands.
func ParseCommandSubject(prefix, subject string) (principal string, cmd Command, ok bool) {
	head := prefix + ".media.v1."
	rest, found := strings.CutPrefix(subject, head)
	if !found {
		return "", "", false
	}
	p, c, found := strings.Cut(rest, ".")
	if !found || !ValidPrincipal(p) || !Command(c).Valid() {
		return "", "", false
	}
	return p, Command(c), true
}

// ValidPrefix reports whether p is a usable subject prefix: one or more dot-separated tokens without
// wildcards or whitespace.
func ValidPrefix(p string) bool {
	if p == "" {
		return false
	}
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return false
		}
	}
	return true
}

// ValidPrincipal reports whether id is a principal id, [a-z0-9][a-z0-9_-]{0,62} (SPEC section 1): one
// NATS subject token.
func ValidPrincipal(id string) bool {
	if len(id) == 0 || len(id) > 63 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// MaxIdentifierBytes bounds an identifier-like string (SPEC section 13).
const MaxIdentifierBytes = 128

// ValidIdentifier reports whether s is a valid identifier-like string of SPEC section 13 (source_id,
// stream_id, variant_id, output_profile, session_id, publication_id, subscription_id): 1 to 128 bytes
// of [A-Za-z0-9._-], and not "." or "..".
func ValidIdentifier(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentifierBytes || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
