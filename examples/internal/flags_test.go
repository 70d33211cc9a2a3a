package internal

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
)

// KP_PASSWORD goes with the environment's user only: --password wins, and a --user naming another
// principal gets no password rather than the environment user's secret.
func TestPasswordBelongsToTheEnvironmentsUser(t *testing.T) {
	t.Setenv("KP_USER", "alice")
	t.Setenv("KP_PASSWORD", "alice-secret")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "alice-secret"},
		{[]string{"--user", "alice"}, "alice-secret"},
		{[]string{"--user", "bob"}, ""},
		{[]string{"--user", "bob", "--password", "bob-secret"}, "bob-secret"},
		{[]string{"--password", "other"}, "other"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		conn := ConnFlagsOn(fs, "dev")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := conn.password(); got != c.want {
			t.Errorf("%v: password %q, want %q", c.args, got, c.want)
		}
	}
	// Without KP_USER, KP_PASSWORD is the default user's.
	t.Setenv("KP_USER", "")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	conn := ConnFlagsOn(fs, "dev")
	if err := fs.Parse([]string{"--user", "dev"}); err != nil {
		t.Fatal(err)
	}
	if got := conn.password(); got != "alice-secret" {
		t.Errorf("default user: password %q", got)
	}
}

// Check refuses connection flags that cannot work (a user that is no principal id, from --user or
// KP_USER; a URL nats.go cannot dial; --nkey with --password) and takes the defaults and good ones.
func TestConnCheck(t *testing.T) {
	for _, c := range []struct {
		envUser string
		args    []string
		ok      bool
	}{
		{"", nil, true},
		{"", []string{"--nats-url", "127.0.0.1:4222,nats://h:1", "--user", "media-1"}, true},
		{"", []string{"--user", "BAD"}, false},
		{"Bad_User", nil, false},
		{"", []string{"--nats-url", "nats://127.0.0.1:0"}, false},
		{"", []string{"--nats-url", "https://127.0.0.1:4222"}, false},
		{"", []string{"--nats-url", " , "}, false},
		{"", []string{"--nkey", "f", "--password", "p"}, false},
	} {
		t.Setenv("KP_USER", c.envUser)
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		conn := ConnFlagsOn(fs, "dev")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if err := conn.Check(); (err == nil) != c.ok {
			t.Errorf("KP_USER=%q %v: Check %v, want ok %v", c.envUser, c.args, err, c.ok)
		}
	}
}

// Check's refusal of a --nats-url does not show the password the URL carries.
func TestConnCheckHidesTheURLsLogin(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	conn := ConnFlagsOn(fs, "dev")
	if err := fs.Parse([]string{"--nats-url", "nats://u:s3cret@h:99999"}); err != nil {
		t.Fatal(err)
	}
	err := conn.Check()
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "u:xxxxx@h:99999") {
		t.Fatalf("Check = %v, want a refusal naming the URL without its password", err)
	}
}

// The --tls-* flags (and KP_TLS_*) connect to a NATS server that serves TLS with a private CA, and
// to one that verifies clients; without them the connection is refused with a hint naming the flag.
// Files that cannot be used, and a certificate without its key, are refused by Check.
func TestConnTLS(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartEmbeddedTLS(t, f, true)
	url := "nats://" + ns.Addr().String()
	dial := func(args ...string) (*nats.Conn, error) {
		t.Helper()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		conn := ConnFlagsOn(fs, "dev")
		if err := fs.Parse(append([]string{"--nats-url", url}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := conn.Check(); err != nil {
			return nil, err
		}
		return conn.Dial("t", nats.NoReconnect())
	}
	nc, err := dial("--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey)
	if err != nil {
		t.Fatalf("with the TLS flags: %v", err)
	}
	if st, err := nc.TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Fatalf("the connection is not TLS (%v)", err)
	}
	nc.Close()

	t.Setenv("KP_TLS_CA", f.CA)
	t.Setenv("KP_TLS_CERT", f.ClientCert)
	t.Setenv("KP_TLS_KEY", f.ClientKey)
	nc, err = dial()
	if err != nil {
		t.Fatalf("with KP_TLS_*: %v", err)
	}
	nc.Close()
	t.Setenv("KP_TLS_CA", "")
	t.Setenv("KP_TLS_CERT", "")
	t.Setenv("KP_TLS_KEY", "")

	if _, err := dial(); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Fatalf("without --tls-ca: %v; want a refusal whose hint names --tls-ca", err)
	}
	missing := f.Dir + "/missing.pem"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-ca", f.CA, "--tls-cert", f.ClientCert}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-ca", missing}, missing},
		{[]string{"--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ServerKey}, "--tls-key"},
	} {
		if nc, err := dial(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			if nc != nil {
				nc.Close()
			}
			t.Errorf("%v: %v; want a refusal saying %q", c.args, err, c.want)
		}
	}
}
