package stated

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// The [nats] TLS keys configure the connection to an external server: with the embedded one (whose
// own TLS is listen_tls_*) they are refused, naming them, unless --nats-url replaces the file's
// listen, when they apply to the server it names. tls_cert and tls_key go together, as do
// listen_tls_cert and listen_tls_key, and listen_tls_client_ca needs them.
func TestTLSKeysModeAndPairing(t *testing.T) {
	const tlsLines = "tls_ca = \"/etc/kp/ca.pem\"\ntls_cert = \"/etc/kp/stated.pem\"\ntls_key = \"/etc/kp/stated-key.pem\"\n"
	for _, tc := range []struct {
		name, body string
		args       []string
		want       []string // substrings of the error; none: accepted
	}{
		{name: "external", body: "[nats]\nurl = \"tls://nats.example:4222\"\n" + tlsLines},
		{name: "embedded", body: "[nats]\nlisten = \"127.0.0.1:4222\"\n" + tlsLines, want: []string{"tls_ca, tls_cert, tls_key", "embedded", "stated.toml"}},
		{name: "embedded by default", body: "[nats]\ntls_ca = \"/etc/kp/ca.pem\"\n", want: []string{"tls_ca", "embedded"}},
		{name: "embedded in the file, --nats-url", body: "[nats]\nlisten = \"127.0.0.1:4222\"\n" + tlsLines, args: []string{"--nats-url", "nats://nats.example:4222"}},
		{name: "cert without key", body: "[nats]\nurl = \"nats://nats.example:4222\"\ntls_cert = \"/etc/kp/stated.pem\"\n", want: []string{"tls_cert and tls_key"}},
		{name: "key without cert", body: "[nats]\nurl = \"nats://nats.example:4222\"\ntls_key = \"/etc/kp/stated-key.pem\"\n", want: []string{"tls_cert and tls_key"}},
		{name: "embedded server's TLS", body: "[nats]\nlisten_tls_cert = \"/etc/kp/nats.pem\"\nlisten_tls_key = \"/etc/kp/nats-key.pem\"\nlisten_tls_client_ca = \"/etc/kp/ca.pem\"\n"},
		{name: "listen cert without key", body: "[nats]\nlisten_tls_cert = \"/etc/kp/nats.pem\"\n", want: []string{"listen_tls_cert and listen_tls_key", "stated.toml"}},
		{name: "listen key without cert", body: "[nats]\nlisten_tls_key = \"/etc/kp/nats-key.pem\"\n", want: []string{"listen_tls_cert and listen_tls_key"}},
		{name: "client CA without cert", body: "[nats]\nlisten_tls_client_ca = \"/etc/kp/ca.pem\"\n", want: []string{"listen_tls_client_ca needs listen_tls_cert"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, "data_dir = \"/tmp/x\"\n"+tc.body)
			var stderr bytes.Buffer
			_, err := parseServeFlags("stated", append([]string{"--config", path}, tc.args...), &stderr)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Fatalf("the error does not say %q: %s", w, stderr.String())
				}
			}
		})
	}
}

// A SIGHUP with a file that adds TLS keys to the embedded server is refused whole, as a malformed
// file is (the next start would refuse it); one whose TLS files cannot be used reloads the principals
// and says, naming the key, that the next start would fail on them.
func TestReloadTLSKeys(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.Start(t, natsserver.Options{})
	path, write := configWriter(t)
	write("[nats]\nlisten = \"127.0.0.1:0\"\n[[principals]]\nid = \"a\"\npassword = \"pw\"\n")
	cfg, err := parseServeFlags("stated", []string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st, srv := reloadTarget(t, cfg, ns.ClientURL())
	reloadLog := func() string {
		var log bytes.Buffer
		reload(cfg, nil, srv, st, "internal-pw", slog.New(slog.NewTextHandler(&log, nil)))
		return log.String()
	}

	write(fmt.Sprintf("[nats]\nlisten = \"127.0.0.1:0\"\ntls_ca = %q\n[[principals]]\nid = \"b\"\npassword = \"pw\"\n", f.CA))
	log := reloadLog()
	if !strings.Contains(log, "configuration not reloaded") || !strings.Contains(log, "tls_ca") || strings.Contains(log, "principals reloaded") {
		t.Fatalf("a SIGHUP adding tls_ca to the embedded server, want it refused whole:\n%s", log)
	}
	if cfg.Principals[0].ID != "a" {
		t.Fatalf("the refused file's principals were applied: %+v", cfg.Principals)
	}

	// Under --nats-url, the same keys are the external server's: a file whose key does not match
	// its certificate reloads the principals, and the log says what the next start would fail on.
	cfg.natsURLFlag = ns.ClientURL()
	write(fmt.Sprintf("[nats]\nlisten = \"127.0.0.1:0\"\ntls_ca = %q\ntls_cert = %q\ntls_key = %q\n[[principals]]\nid = \"b\"\npassword = \"pw\"\n",
		f.CA, f.ClientCert, f.ServerKey))
	log = reloadLog()
	if !strings.Contains(log, "principals reloaded") || cfg.Principals[0].ID != "b" {
		t.Fatalf("the principals were not reloaded:\n%s", log)
	}
	for _, want := range []string{"nats.tls_key", f.ServerKey, "next start", "nats.tls_ca, nats.tls_cert, nats.tls_key"} {
		if !strings.Contains(log, want) {
			t.Errorf("the reload's log does not say %q:\n%s", want, log)
		}
	}
}

// The embedded server's TLS keys are ignored with an external server, and stated says so at start
// (as it does for the other keys of the other mode), naming them.
func TestListenTLSKeysIneffectiveWithAnExternalServer(t *testing.T) {
	body := "[nats]\nlisten = \"127.0.0.1:4222\"\nlisten_tls_cert = \"/etc/kp/nats.pem\"\nlisten_tls_key = \"/etc/kp/nats-key.pem\"\n"
	path := writeConfig(t, "data_dir = \"/tmp/x\"\n"+body)
	cfg, err := parseServeFlags("stated", []string{"--config", path, "--nats-url", "nats://nats.example:4222"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cfg.Ineffective(), "\n")
	if !strings.Contains(got, "nats.listen_tls_cert, nats.listen_tls_key ignored") {
		t.Fatalf("ineffective keys %q do not name the embedded server's TLS keys", got)
	}
	if conf, err := cfg.listenTLS(nil); conf != nil || err != nil {
		t.Fatalf("with an external server the embedded server's TLS is %v, %v; want none", conf, err)
	}
	cfg, err = parseServeFlags("stated", []string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Ineffective(); len(w) != 0 {
		t.Fatalf("with the embedded server, ineffective keys %q", w)
	}
}

// A SIGHUP whose embedded server's TLS files cannot be used reloads the principals (a revocation must
// not wait for a certificate) and says, naming the key and the file, that new clients cannot connect.
func TestReloadListenTLSFilesThatCannotBeUsed(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.Start(t, natsserver.Options{})
	path, write := configWriter(t)
	write(fmt.Sprintf("[nats]\nlisten = \"127.0.0.1:0\"\nlisten_tls_cert = %q\nlisten_tls_key = %q\n[[principals]]\nid = \"a\"\npassword = \"pw\"\n",
		f.ServerCert, f.ServerKey))
	cfg, err := parseServeFlags("stated", []string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st, srv := reloadTarget(t, cfg, ns.ClientURL())
	write(fmt.Sprintf("[nats]\nlisten = \"127.0.0.1:0\"\nlisten_tls_cert = %q\nlisten_tls_key = %q\n[[principals]]\nid = \"b\"\npassword = \"pw\"\n",
		f.ServerCert, f.NotPEM))
	var log bytes.Buffer
	reload(cfg, nil, srv, st, "internal-pw", slog.New(slog.NewTextHandler(&log, nil)))
	if !strings.Contains(log.String(), "principals reloaded") || cfg.Principals[0].ID != "b" {
		t.Fatalf("the principals were not reloaded:\n%s", log.String())
	}
	for _, want := range []string{"nats.listen_tls_key", f.NotPEM, "new clients cannot connect", "in effect at the next restart: nats.listen_tls_key"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the reload's log does not say %q:\n%s", want, log.String())
		}
	}
}

// configWriter returns the path of a configuration file in a temporary directory, which is also its
// data_dir, and a function that writes body (after the data_dir line) to it.
func configWriter(t *testing.T) (string, func(body string)) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	return path, func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf("data_dir = %q\n%s", dir, body)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// An embedded server that listens beyond loopback without TLS is warned about at start; on loopback,
// with TLS, or with an external server, it is not.
func TestCleartextBeyondLoopbackWarns(t *testing.T) {
	for body, warn := range map[string]bool{
		"":                                      false, // the default, 127.0.0.1:4222
		"[nats]\nlisten = \"127.0.0.1:4222\"\n": false,
		"[nats]\nlisten = \"localhost:4222\"\n": false,
		"[nats]\nlisten = \"[::1]:4222\"\n":     false,
		"[nats]\nlisten = \"0.0.0.0:4222\"\n":   true,
		"[nats]\nlisten = \":4222\"\n":          true,
		"[nats]\nlisten = \"10.1.2.3:4222\"\n":  true,
		"[nats]\nlisten = \"nats.lan:4222\"\n":  true,
		"[nats]\nlisten = \"0.0.0.0:4222\"\nlisten_tls_cert = \"/etc/kp/nats.pem\"\nlisten_tls_key = \"/etc/kp/nats-key.pem\"\n": false,
		"[nats]\nurl = \"nats://10.1.2.3:4222\"\n": false,
	} {
		c, err := LoadConfig(writeConfig(t, body))
		if err != nil {
			t.Fatal(err)
		}
		got := c.cleartextWarning()
		if (got != "") != warn || warn && !strings.Contains(got, "listen_tls_cert") {
			t.Errorf("%q: warning %q, want one: %v", body, got, warn)
		}
	}
}
