// Package natsurl hides the login a NATS URL may carry (nats://user:password@host, or
// nats://token@host), so that stated's log and statectl's errors, which CI jobs and log collectors
// keep, never show a password or a token.
package natsurl

import (
	neturl "net/url"
	"strings"
)

// Hidden is what a password or token is written as.
const Hidden = "xxxxx"

// Redact is urls, one NATS URL or a comma-separated list of them as nats.Connect takes it, with the
// password or token of each replaced by Hidden; the rest (scheme, user, host, the spaces around
// each) is kept.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

// RedactIn is msg with the logins of the URLs in urls (as Redact takes them) hidden wherever msg
// names one of those URLs, with or without the spaces around it in the list: the errors of a NATS
// connection name the URL they were given (nats.go trims it before it parses, and quotes what it
// could not parse).
func RedactIn(msg, urls string) string {
	for p := range strings.SplitSeq(urls, ",") {
		for _, q := range []string{p, strings.TrimSpace(p)} {
			if r := redactOne(q); r != q && q != "" {
				msg = strings.ReplaceAll(msg, q, r)
			}
		}
	}
	return msg
}

// redactOne is one URL of a list, with its login hidden.
func redactOne(p string) string {
	u, err := neturl.Parse(strings.TrimSpace(p))
	switch {
	case err != nil, u.User == nil && strings.Contains(p, "@"):
		// Not parsed, or not as nats.go reads it (which takes user:pw@host for nats://user:pw@host),
		// so not known to hold no login: everything before its last @ goes.
		at := strings.LastIndex(p, "@")
		if at < 0 {
			return p
		}
		scheme := ""
		if s, _, found := strings.Cut(p, "://"); found {
			scheme = s + "://"
		}
		return scheme + Hidden + p[at:]
	case u.User == nil:
		return p
	default:
		if _, ok := u.User.Password(); ok {
			u.User = neturl.UserPassword(u.User.Username(), Hidden)
		} else {
			u.User = neturl.User(Hidden) // a user without a password is a token
		}
		trimmed := strings.TrimSpace(p)
		lead := strings.Index(p, trimmed)
		return p[:lead] + u.String() + p[lead+len(trimmed):] // the spaces around it kept
	}
}
