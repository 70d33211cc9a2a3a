package stated

import "testing"

// A NATS URL's login (user and password, or a token) never reaches the log; the rest of it does.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                          "nats://127.0.0.1:4222",
		"nats://stated:pw@127.0.0.1:4222":                "nats://stated:xxxxx@127.0.0.1:4222",
		"nats://s3cr3t-token@nats:4222":                  "nats://xxxxx@nats:4222",
		"nats://a:pw@n1:4222,nats://b:pw2@n2:4222":       "nats://a:xxxxx@n1:4222,nats://b:xxxxx@n2:4222",
		"nats://u:p%zz@n1:4222":                          "nats://xxxxx@n1:4222",
		"tls://stated:pw@nats.example:4443, nats://n2:1": "tls://stated:xxxxx@nats.example:4443, nats://n2:1",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
