package natsurl

import (
	"strings"
	"testing"
)

// A NATS URL's login (user and password, or a token) is hidden; the rest of it is kept.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "",
		"nats://127.0.0.1:4222":           "nats://127.0.0.1:4222",
		"nats://stated:pw@127.0.0.1:4222": "nats://stated:xxxxx@127.0.0.1:4222",
		"nats://s3cr3t-token@nats:4222":   "nats://xxxxx@nats:4222",
		"nats://a:pw@n1:4222,nats://b:pw2@n2:4222":       "nats://a:xxxxx@n1:4222,nats://b:xxxxx@n2:4222",
		"nats://u:p%zz@n1:4222":                          "nats://xxxxx@n1:4222",
		"tls://stated:pw@nats.example:4443, nats://n2:1": "tls://stated:xxxxx@nats.example:4443, nats://n2:1",
		"nats://n1:1, nats://b:pw@n2:2":                  "nats://n1:1, nats://b:xxxxx@n2:2",
		"nats://h:%zz":                                   "nats://h:%zz", // not parsed, and no login
		"u:pw@h:1":                                       "xxxxx@h:1",    // no scheme: nats.go still reads a login
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// An error that names the URLs it was given names them without their logins.
func TestRedactIn(t *testing.T) {
	for _, c := range []struct{ urls, msg, want string }{
		{"nats://u:pw@h:1", "connect nats://u:pw@h:1 as u: x", "connect nats://u:xxxxx@h:1 as u: x"},
		{"nats://tok@h:1", "connect nats://tok@h:1: x", "connect nats://xxxxx@h:1: x"},
		{"u:pw@h:1", "connect u:pw@h:1: x", "connect xxxxx@h:1: x"},
		{"nats://a:p1@h:1, nats://b:p2@h:2", "connect nats://a:p1@h:1, nats://b:p2@h:2: x", "connect nats://a:xxxxx@h:1, nats://b:xxxxx@h:2: x"},
		{"nats://u:p%zz@h:1", "connect nats://u:p%zz@h:1: x", "connect nats://xxxxx@h:1: x"},
		{"nats://h:1", "connect nats://h:1: x", "connect nats://h:1: x"},
		{"nats://a:p1@h:1, nats://b:p%zz@h:2", `parse "nats://b:p%zz@h:2": x`, `parse "nats://xxxxx@h:2": x`}, // trimmed by nats.go
		// Quoted by net/url's parse error: a quote, a backslash or a control character is escaped.
		{`nats://u:s3"cr3t@h:1`, `connect nats://u:s3"cr3t@h:1: parse "nats://u:s3\"cr3t@h:1": invalid userinfo`,
			`connect nats://xxxxx@h:1: parse "nats://xxxxx@h:1": invalid userinfo`},
		{`nats://u:s3\cr3t@h:1`, `parse "nats://u:s3\\cr3t@h:1": invalid userinfo`, `parse "nats://xxxxx@h:1": invalid userinfo`},
		{"nats://u:s3\x01cr3t@h:1", `parse "nats://u:s3\x01cr3t@h:1": invalid control character in URL`, `parse "nats://xxxxx@h:1": invalid control character in URL`},
	} {
		if got := RedactIn(c.msg, c.urls); got != c.want {
			t.Errorf("RedactIn(%q, %q) = %q, want %q", c.msg, c.urls, got, c.want)
		}
	}
}

// Check takes what nats.go dials and refuses, without repeating the URL (its login), what it never
// could.
func TestCheck(t *testing.T) {
	for _, ok := range []string{"nats://h:4222", "h:4222", "h", "tls://u:s3cret@h:1, ws://h:2,wss://h:3", "nats://h:1,,", "nats://[::1]:4222"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                               "no URL",
		" , ":                            "no URL",
		"nats://:4222":                   "no host",
		"https://u:s3cret@h:4222":        `scheme is "https"`,
		"nats://h:4222,nats://h:99999":   "port is 99999",
		"nats://u:s3cret@h:0":            "port is 0",
		"nats://u:s3cret@bad host:4222":  "not a NATS URL",
		"nats://u:s3cret@h:4222/%zz/..x": "not a NATS URL",
	} {
		err := Check(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want an error saying %q", in, err, want)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Check(%q) = %v: it shows the password", in, err)
		}
	}
}
