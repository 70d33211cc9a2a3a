package wire

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the default subject prefix.
const DefaultPrefix = "kp"

// StateSubject is the request subject of op for principal: <prefix>.state.v1.<principal>.<op>.
func StateSubject(prefix, principal string, op Op) string {
	return prefix + ".state.v1." + principal + "." + string(op)
}

// WatchSubject is the delivery subject of a watch: <prefix>.watch.v1.<principal>.<watch_id>.
func WatchSubject(prefix, principal, watchID string) string {
	return prefix + ".watch.v1." + principal + "." + watchID
}

// HeartbeatSubject is a worker's heartbeat subject: <prefix>.heartbeat.v1.<principal>.<worker_id>.
func HeartbeatSubject(prefix, principal, workerID string) string {
	return prefix + ".heartbeat.v1." + principal + "." + workerID
}

// CapsGetSubject and CapsChangedSubject are the capability subjects of SPEC section 12.
func CapsGetSubject(prefix string) string     { return prefix + ".caps.v1.get" }
func CapsChangedSubject(prefix string) string { return prefix + ".caps.v1.changed" }

// MediaSubject is a media command subject: <prefix>.media.v1.<principal>.<command>.
func MediaSubject(prefix, principal, command string) string {
	return prefix + ".media.v1." + principal + "." + command
}

// InboxPrefix is the inbox prefix a principal's connection must use: _INBOX.<principal>.
func InboxPrefix(principal string) string { return "_INBOX." + principal }

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

// SubjectTokens splits subject after prefix into exactly n tokens: for
// "kp.state.v1.alice.get" with prefix "kp" and kind "state.v1", it returns ["alice", "get"].
func SubjectTokens(subject, prefix, kind string, n int) ([]string, error) {
	head := prefix + "." + kind + "."
	if !strings.HasPrefix(subject, head) {
		return nil, fmt.Errorf("subject %q is not under %q", subject, head)
	}
	toks := strings.Split(subject[len(head):], ".")
	if len(toks) != n {
		return nil, fmt.Errorf("subject %q has %d tokens after %q, want %d", subject, len(toks), head, n)
	}
	return toks, nil
}
