// Package natsurl hides the login a NATS URL may carry (nats://user:password@host, or
// nats://token@host), so that stated's log and statectl's errors, which CI jobs and log collectors
// keep, never show a password or a token.
package natsurl

import (
	"errors"
	"fmt"
	neturl "net/url"
	"strconv"
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
// names one of those URLs, with or without the spaces around it in the list, as typed or as Go quotes
// it (%q): the errors of a NATS connection name the URL they were given (nats.go trims it before it
// parses, and net/url quotes what it could not parse, escaping a quote, a backslash or a control
// character of the password).
func RedactIn(msg, urls string) string {
	for p := range strings.SplitSeq(urls, ",") {
		for _, q := range []string{p, strings.TrimSpace(p)} {
			r := redactOne(q)
			if r == q || q == "" {
				continue
			}
			msg = strings.ReplaceAll(msg, q, r)
			if qq, rq := quoted(q), quoted(r); qq != q {
				msg = strings.ReplaceAll(msg, qq, rq)
			}
		}
	}
	return msg
}

// quoted is s as %q writes it, without the quotes around it.
func quoted(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
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

// Check checks urls as nats.Connect reads them (a comma-separated list; empty elements skipped; an
// element without a scheme taken as nats://), so that a command refuses a URL nats.go could never
// dial as a mistake in its configuration rather than failing (or retrying for ever) once it connects:
// a malformed URL, a scheme nats.go does not dial (nats, tls, ws and wss are), a URL naming no host
// (nats://:4222, which nats.go takes for this machine: the mark of a template variable left empty), a
// port outside 1 to 65535 (which url.Parse takes), or no URL at all. Its errors never repeat a URL,
// which may carry a login.
func Check(urls string) error {
	n := 0
	for p := range strings.SplitSeq(urls, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		n++
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		u, err := neturl.Parse(p)
		if err != nil {
			var uerr *neturl.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // without the URL it quotes
			}
			return fmt.Errorf("not a NATS URL (nats://host:port, or a comma-separated list of them): %w", err)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("a URL's scheme is %q: NATS is reached over nats, tls, ws or wss", u.Scheme)
		}
		if u.Hostname() == "" {
			return errors.New("a URL names no host (want nats://host:port, or a comma-separated list of them)")
		}
		if port := u.Port(); port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("a URL's port is %s: the port must be a number from 1 to 65535", port)
			}
		}
	}
	if n == 0 {
		return errors.New("no URL (want nats://host:port, or a comma-separated list of them)")
	}
	return nil
}
