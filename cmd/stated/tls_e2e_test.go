package main_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// tlsKeys is the [nats] lines of a TLS configuration: tls_ca, and tls_cert and tls_key when cert is set.
func tlsKeys(ca, cert, key string) string {
	return tomlLines("tls_ca", ca, "tls_cert", cert, "tls_key", key)
}

// tomlLines is a TOML line `name = "value"` for each name and value of pairs whose value is set.
func tomlLines(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			fmt.Fprintf(&b, "%s = %q\n", pairs[i], pairs[i+1])
		}
	}
	return b.String()
}

// runStatedBounded runs stated with args and returns its output and exit code; a stated still
// running after 30 s (it started, where it should have refused to) is killed and fails the test.
func runStatedBounded(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, e2e.Binary(t, "stated"), args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("stated %v still ran after 30 s; want a refusal:\n%s", args, out)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("stated %v: %v", args, err)
	return "", 0
}

// putGet writes and reads back one entry through a Go client over TLS as the dev principal.
func putGet(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	nc, err := client.Connect(url, "dev", opts...)
	if err != nil {
		t.Fatalf("client connect over TLS: %v", err)
	}
	defer nc.Close()
	c, err := client.New(nc, "dev")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero := int64(0)
	if _, err := c.Put(ctx, wire.PutRequest{Namespace: "service/tls", Key: "k", Schema: "keeppeek.media-intent.v1",
		Document:         []byte(`{"role":"publish","desired":true,"source_id":"s","media_kind":"video","recording_mode":"disabled"}`),
		ExpectedRevision: &zero}); err != nil {
		t.Fatalf("put over TLS: %v", err)
	}
	e, err := c.Get(ctx, "service/tls", "k")
	if err != nil || e.Revision < 1 {
		t.Fatalf("get over TLS: %+v, %v", e, err)
	}
}

// stated serves through an external NATS server that requires TLS with a private CA ([nats] tls_ca),
// and one that requires verified client certificates too (tls_cert, tls_key). Without tls_ca it
// refuses to start, saying that the server's certificate is not trusted and which key to set; without
// the client certificate the mutual-TLS server wants, it says that. Before, stated had no TLS keys at
// all: only a certificate the system roots trust could be used, and no client certificate.
func TestE2ETLSExternalNATS(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartTLS(t, f, false)

	t.Run("tls_ca", func(t *testing.T) {
		s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL(), NATSExtra: tlsKeys(f.CA, "", "")})
		s.Start()
		putGet(t, ns.ClientURL(), nats.RootCAs(f.CA))
		resp, err := http.Get(s.HTTP() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz %d over TLS\n%s", resp.StatusCode, s.Logs())
		}
		if code := s.Term(); code != 0 {
			t.Fatalf("exit %d\n%s", code, s.Logs())
		}
	})

	t.Run("nats:// URL", func(t *testing.T) {
		// tls_ca makes the connection TLS with a nats:// URL too (the server requires it anyway).
		s := e2e.NewStated(t, e2e.Config{NATSURL: natstest.PlainSchemeURL(ns), NATSExtra: tlsKeys(f.CA, "", "")})
		s.Start()
		putGet(t, natstest.PlainSchemeURL(ns), nats.RootCAs(f.CA))
	})

	t.Run("no tls_ca: not trusted", func(t *testing.T) {
		for _, url := range []string{ns.ClientURL(), natstest.PlainSchemeURL(ns)} {
			s := e2e.NewStated(t, e2e.Config{NATSURL: url})
			out, code := runStatedBounded(t, "--config", s.ConfigPath)
			if code != 1 || !strings.Contains(out, "not trusted") || !strings.Contains(out, "tls_ca") {
				t.Fatalf("stated on a TLS server whose CA it was not given (%s): exit %d, want 1 saying the certificate is not trusted and naming tls_ca:\n%s", url, code, out)
			}
		}
	})

	t.Run("tls_ca of another CA", func(t *testing.T) {
		s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL(), NATSExtra: tlsKeys(f.OtherCA, "", "")})
		out, code := runStatedBounded(t, "--config", s.ConfigPath)
		if code != 1 || !strings.Contains(out, "not trusted") || !strings.Contains(out, f.OtherCA) {
			t.Fatalf("stated with a tls_ca that did not sign the server's certificate: exit %d, want 1 naming the file:\n%s", code, out)
		}
	})

	mtls := natstest.StartTLS(t, f, true)
	t.Run("mutual TLS", func(t *testing.T) {
		s := e2e.NewStated(t, e2e.Config{NATSURL: natstest.PlainSchemeURL(mtls), NATSExtra: tlsKeys(f.CA, f.ClientCert, f.ClientKey)})
		s.Start()
		putGet(t, natstest.PlainSchemeURL(mtls), nats.RootCAs(f.CA), nats.ClientCert(f.ClientCert, f.ClientKey))
	})

	t.Run("mutual TLS without a client certificate", func(t *testing.T) {
		for _, extra := range []string{tlsKeys(f.CA, "", ""), tlsKeys(f.CA, f.OtherClientCert, f.OtherKey)} {
			s := e2e.NewStated(t, e2e.Config{NATSURL: mtls.ClientURL(), NATSExtra: extra})
			out, code := runStatedBounded(t, "--config", s.ConfigPath)
			if code != 1 || !strings.Contains(out, "client certificate") || !strings.Contains(out, "tls_cert") {
				t.Fatalf("stated without a client certificate the server accepts (%q): exit %d, want 1 saying so:\n%s", extra, code, out)
			}
		}
	})

	t.Run("server without TLS", func(t *testing.T) {
		plain := natstest.Start(t, natsserver.Options{})
		s := e2e.NewStated(t, e2e.Config{NATSURL: plain.ClientURL(), NATSExtra: tlsKeys(f.CA, "", "")})
		out, code := runStatedBounded(t, "--config", s.ConfigPath)
		if code != 1 || !strings.Contains(out, "offers no TLS") || !strings.Contains(out, "tls_ca") {
			t.Fatalf("stated with tls_ca on a server without TLS: exit %d, want 1 saying the server offers no TLS:\n%s", code, out)
		}
	})
}

// TLS files that cannot work fail the start with a message naming the key and the file, before
// anything is served: no data directory, no HTTP. A cert without its key (or a key without its cert),
// and tls_* keys with the embedded NATS server (whose own TLS is listen_tls_*), are configuration
// mistakes: exit 2, as every other one; a file that cannot be read or used is a runtime failure:
// exit 1. The embedded server's own TLS files are checked the same way.
func TestE2ETLSFilesCheckedAtStart(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartTLS(t, f, true)
	missing := filepath.Join(f.Dir, "missing.pem")
	for _, tc := range []struct {
		name     string
		embedded bool
		keys     string
		code     int
		want     []string
	}{
		{name: "tls_ca missing", keys: tlsKeys(missing, "", ""), code: 1, want: []string{"nats.tls_ca", missing}},
		{name: "tls_ca not PEM", keys: tlsKeys(f.NotPEM, "", ""), code: 1, want: []string{"nats.tls_ca", f.NotPEM, "PEM"}},
		{name: "tls_ca a key", keys: tlsKeys(f.ClientKey, "", ""), code: 1, want: []string{"nats.tls_ca", f.ClientKey, "certificate"}},
		{name: "tls_cert without tls_key", keys: tlsKeys(f.CA, f.ClientCert, ""), code: 2, want: []string{"tls_cert", "tls_key"}},
		{name: "tls_key without tls_cert", keys: tlsKeys(f.CA, "", f.ClientKey), code: 2, want: []string{"tls_cert", "tls_key"}},
		{name: "tls_cert missing", keys: tlsKeys(f.CA, missing, f.ClientKey), code: 1, want: []string{"nats.tls_cert", missing}},
		{name: "tls_cert not PEM", keys: tlsKeys(f.CA, f.NotPEM, f.ClientKey), code: 1, want: []string{"nats.tls_cert", f.NotPEM, "PEM"}},
		{name: "tls_key not PEM", keys: tlsKeys(f.CA, f.ClientCert, f.NotPEM), code: 1, want: []string{"nats.tls_key", f.NotPEM, "PEM"}},
		{name: "tls_key not the cert's", keys: tlsKeys(f.CA, f.ClientCert, f.ServerKey), code: 1,
			want: []string{"nats.tls_key", f.ServerKey, "nats.tls_cert", f.ClientCert, "does not match"}},
		{name: "embedded server", embedded: true, keys: tlsKeys(f.CA, f.ClientCert, f.ClientKey), code: 2,
			want: []string{"tls_ca", "tls_cert", "tls_key", "embedded", "listen_tls_cert"}},
		{name: "listen_tls_cert missing", embedded: true, keys: listenTLSKeys(missing, f.ServerKey, ""), code: 1,
			want: []string{"nats.listen_tls_cert", missing}},
		{name: "listen_tls_key not the cert's", embedded: true, keys: listenTLSKeys(f.ServerCert, f.ClientKey, ""), code: 1,
			want: []string{"nats.listen_tls_key", f.ClientKey, "does not match"}},
		{name: "listen_tls_client_ca not PEM", embedded: true, keys: listenTLSKeys(f.ServerCert, f.ServerKey, f.NotPEM), code: 1,
			want: []string{"nats.listen_tls_client_ca", f.NotPEM, "PEM"}},
		{name: "listen_tls_cert without listen_tls_key", embedded: true, keys: listenTLSKeys(f.ServerCert, "", ""), code: 2,
			want: []string{"listen_tls_cert and listen_tls_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e2e.Config{NATSURL: ns.ClientURL(), NATSExtra: tc.keys}
			if tc.embedded {
				c.NATSURL = ""
			}
			s := e2e.NewStated(t, c)
			out, code := runStatedBounded(t, "--config", s.ConfigPath)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("the refusal does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "stated ready") {
				t.Fatalf("stated served before refusing:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(s.Dir, "data")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stated created its data directory before refusing its TLS files (%v):\n%s", err, out)
			}
		})
	}
}

// A changed tls_* key waits for the next restart, and the SIGHUP says so, as for the other [nats]
// keys; the principals are reloaded meanwhile.
func TestE2ETLSKeysChangedOnSighupWaitForRestart(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartTLS(t, f, true)
	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL(), NATSExtra: tlsKeys(f.CA, f.ClientCert, f.ClientKey)})
	s.Start()
	caCopy := filepath.Join(t.TempDir(), "ca.pem")
	data, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caCopy, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s.WriteConfig(e2e.Config{NATSURL: ns.ClientURL(), NATSExtra: tlsKeys(caCopy, f.ClientCert, f.ClientKey)})
	s.Reload()
	natstest.Poll(t, 20*time.Second, "the SIGHUP's log", func() (bool, string) {
		return strings.Contains(s.Logs(), "principals reloaded"), s.Logs()
	})
	var waiting string
	for line := range strings.SplitSeq(s.Logs(), "\n") {
		if strings.Contains(line, "in effect at the next restart") {
			waiting = line
		}
	}
	if !strings.Contains(waiting, "nats.tls_ca") {
		t.Fatalf("a changed tls_ca is not named as waiting for the next restart:\n%s", s.Logs())
	}
	putGet(t, ns.ClientURL(), nats.RootCAs(f.CA), nats.ClientCert(f.ClientCert, f.ClientKey))
}

// nats.go reads the TLS files again at every reconnect: a certificate renewed in place is used from
// the next connection on, without a restart. A reconnect that fails on the files (one being
// rewritten, say) was retried without a word (nats.go reports such failures to nobody), /readyz
// saying only "reconnecting": stated logs why, naming the key and the file, and the connection comes
// back once the file can be used again.
func TestE2ETLSFilesReadAgainAtReconnect(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartTLS(t, f, true)
	dir := t.TempDir()
	cert := filepath.Join(dir, "stated.pem")
	natstest.CopyFile(t, f.ClientCert, cert)
	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL(), NATSExtra: tlsKeys(f.CA, cert, f.ClientKey)})
	s.Start()
	kick := func() {
		t.Helper()
		connz, err := ns.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range connz.Conns {
			if c.Name == "stated" {
				if err := ns.DisconnectClientByID(c.Cid); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("stated has no connection to the NATS server:\n%s", s.Logs())
	}

	natstest.CopyFile(t, f.NotPEM, cert) // the certificate file broken while stated runs
	kick()
	natstest.Poll(t, 20*time.Second, "stated's log of the failed reconnect", func() (bool, string) {
		return strings.Contains(s.Logs(), "NATS TLS files cannot be used") && strings.Contains(s.Logs(), cert), s.Logs()
	})
	back := strings.Count(s.Logs(), "NATS connection back")
	natstest.CopyFile(t, f.ClientCert, cert) // renewed
	natstest.Poll(t, 20*time.Second, "stated's NATS connection to come back", func() (bool, string) {
		return strings.Count(s.Logs(), "NATS connection back") > back, s.Logs()
	})
	putGet(t, ns.ClientURL(), nats.RootCAs(f.CA), nats.ClientCert(f.ClientCert, f.ClientKey))
}

// listenTLSKeys is the [nats] lines of the embedded server's TLS: listen_tls_cert and listen_tls_key,
// and listen_tls_client_ca when clientCA is set.
func listenTLSKeys(cert, key, clientCA string) string {
	return tomlLines("listen_tls_cert", cert, "listen_tls_key", key, "listen_tls_client_ca", clientCA)
}

// The embedded NATS server serves TLS with listen_tls_cert and listen_tls_key: a client that trusts
// its CA writes and reads over TLS (a nats:// URL is upgraded, since the server requires TLS), one
// that does not is refused, and stated announces the tls:// URL. With listen_tls_client_ca only
// clients with a certificate that CA signed connect. stated's own connection needs none of it.
func TestE2EEmbeddedNATSServesTLS(t *testing.T) {
	f := natstest.NewTLSFiles(t)

	t.Run("server certificate", func(t *testing.T) {
		s := e2e.NewStated(t, e2e.Config{NATSExtra: listenTLSKeys(f.ServerCert, f.ServerKey, "")})
		s.Start()
		putGet(t, s.URL(), nats.RootCAs(f.CA))
		tlsURL := strings.Replace(s.URL(), "nats://", "tls://", 1)
		nc, err := client.Connect(tlsURL, "dev", nats.RootCAs(f.CA))
		if err != nil {
			t.Fatalf("%s: %v", tlsURL, err)
		}
		c, err := client.New(nc, "dev")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if e, err := c.Get(ctx, "service/tls", "k"); err != nil || e.Revision != 1 {
			t.Fatalf("get over %s: %+v, %v", tlsURL, e, err)
		}
		nc.Close()
		if !strings.Contains(s.Logs(), "nats="+tlsURL) {
			t.Fatalf("stated does not announce %s:\n%s", tlsURL, s.Logs())
		}
		for name, opts := range map[string][]nats.Option{"no CA": nil, "another CA": {nats.RootCAs(f.OtherCA)}} {
			nc, err := client.Connect(s.URL(), "dev", append(opts, nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				t.Fatalf("%s: a client that does not trust the server's certificate connected", name)
			}
			if !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("%s: refused with %v; want a certificate error", name, err)
			}
		}
		if code := s.Term(); code != 0 {
			t.Fatalf("exit %d\n%s", code, s.Logs())
		}
	})

	t.Run("client certificates", func(t *testing.T) {
		s := e2e.NewStated(t, e2e.Config{NATSExtra: listenTLSKeys(f.ServerCert, f.ServerKey, f.CA)})
		s.Start()
		putGet(t, s.URL(), nats.RootCAs(f.CA), nats.ClientCert(f.ClientCert, f.ClientKey))
		for name, opts := range map[string][]nats.Option{
			"no client certificate":      {nats.RootCAs(f.CA)},
			"another CA's certificate":   {nats.RootCAs(f.CA), nats.ClientCert(f.OtherClientCert, f.OtherKey)},
			"no TLS options (plain URL)": nil,
		} {
			nc, err := client.Connect(s.URL(), "dev", append(opts, nats.NoReconnect())...)
			if err == nil {
				// A refused certificate can be seen after nats.go's handshake returned: on first use.
				err = nc.Flush()
				nc.Close()
			}
			if err == nil {
				t.Fatalf("%s: the client connected", name)
			}
		}
		resp, err := http.Get(s.HTTP() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz %d with a server that verifies clients: stated's own connection needs no certificate\n%s", resp.StatusCode, s.Logs())
		}
	})
}
