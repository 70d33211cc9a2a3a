package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// statectl reaches a stated behind a NATS server that requires TLS with a private CA and verified
// client certificates: --tls-ca, --tls-cert and --tls-key (or STATECTL_TLS_CA, STATECTL_TLS_CERT,
// STATECTL_TLS_KEY). Without the CA it says that the server's certificate is not trusted, without a
// client certificate that the server wants one (exit 3, CONNECTION); files that cannot be used are
// usage errors naming the flag and the file (exit 2), as for --nkey. Before, statectl had no TLS
// flags: it could reach only a server whose certificate the system roots trust, without a client
// certificate.
func TestTLSFlags(t *testing.T) {
	t.Parallel()
	_, bin := binaries(t)
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartTLS(t, f, true)
	s := e2e.NewStated(t, e2e.Config{Principals: principals, NATSURL: ns.ClientURL(),
		NATSExtra: fmt.Sprintf("tls_ca = %q\ntls_cert = %q\ntls_key = %q\n", f.CA, f.ClientCert, f.ClientKey)})
	s.Start()
	e := &env{t: t, s: s, bin: bin, dir: t.TempDir()}
	tlsArgs := func(args ...string) []string {
		return append([]string{"--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey}, args...)
	}
	doc := e.file("pref.json", `{"kind":"display"}`)

	e.ok(tlsArgs("put", "user/alice", "p", prefSchema, doc, "--expect-revision", "0")...)
	if r := e.ok(tlsArgs("get", "user/alice", "p")...); !strings.Contains(r.stdout, `"kind": "display"`) {
		t.Fatalf("get over TLS: %s", r)
	}
	// Over a nats:// URL too: the TLS flags make the connection TLS.
	e.ok(tlsArgs("--nats-url", natstest.PlainSchemeURL(ns), "info")...)
	// From the environment.
	if r := e.runEnv([]string{"STATECTL_TLS_CA=" + f.CA, "STATECTL_TLS_CERT=" + f.ClientCert, "STATECTL_TLS_KEY=" + f.ClientKey},
		"get", "user/alice", "p"); r.code != 0 {
		t.Fatalf("STATECTL_TLS_*: %s", r)
	}

	missing := filepath.Join(e.dir, "missing.pem")
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		label string
		want  []string
	}{
		{"no --tls-ca", []string{"--tls-cert", f.ClientCert, "--tls-key", f.ClientKey}, 3, "CONNECTION", []string{"not trusted", "--tls-ca"}},
		{"--tls-ca of another CA", []string{"--tls-ca", f.OtherCA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey}, 3, "CONNECTION",
			[]string{"not trusted", f.OtherCA}},
		{"no client certificate", []string{"--tls-ca", f.CA}, 3, "CONNECTION", []string{"client certificate", "--tls-cert", "--tls-key"}},
		{"client certificate of another CA", []string{"--tls-ca", f.CA, "--tls-cert", f.OtherClientCert, "--tls-key", f.OtherKey}, 3, "CONNECTION",
			[]string{"client certificate", f.OtherClientCert}},
		{"--tls-ca missing", []string{"--tls-ca", missing}, 2, "USAGE", []string{"--tls-ca", missing}},
		{"--tls-ca not PEM", []string{"--tls-ca", f.NotPEM}, 2, "USAGE", []string{"--tls-ca", f.NotPEM, "PEM"}},
		{"--tls-cert without --tls-key", []string{"--tls-ca", f.CA, "--tls-cert", f.ClientCert}, 2, "USAGE", []string{"--tls-cert and --tls-key"}},
		{"--tls-key without --tls-cert", []string{"--tls-ca", f.CA, "--tls-key", f.ClientKey}, 2, "USAGE", []string{"--tls-cert and --tls-key"}},
		{"--tls-cert not PEM", []string{"--tls-ca", f.CA, "--tls-cert", f.NotPEM, "--tls-key", f.ClientKey}, 2, "USAGE", []string{"--tls-cert", f.NotPEM}},
		{"--tls-key not the cert's", []string{"--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ServerKey}, 2, "USAGE",
			[]string{"--tls-key", f.ServerKey, "does not match"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.fails(tc.code, tc.label, append(tc.args, "get", "user/alice", "p", "--timeout", "5s")...)
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Fatalf("stderr does not say %q: %s", w, r)
				}
			}
		})
	}

	// bench's connections take the TLS files too (a mutual TLS server refuses any without them).
	if r := e.ok(tlsArgs(tinyBench("--user", "coordinator")...)...); !strings.Contains(r.stdout, "serial-cas-p50-us") {
		t.Fatalf("bench over TLS: %s", r)
	}

	// A server without TLS: the flags ask for TLS it does not offer.
	plain := natstest.Start(t, natsserver.Options{})
	r := e.fails(3, "CONNECTION", "--nats-url", plain.ClientURL(), "--tls-ca", f.CA, "info")
	if !strings.Contains(r.stderr, "offers no TLS") {
		t.Fatalf("--tls-ca on a server without TLS: %s", r)
	}
}

// runEnv runs statectl with env added after the environment command sets.
func (e *env) runEnv(env []string, args ...string) result {
	e.t.Helper()
	return e.runWith("", env, args...)
}
