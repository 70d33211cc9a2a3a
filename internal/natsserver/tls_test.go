package natsserver_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/natstls"
)

// serverFiles are the embedded server's TLS files of f, under the setting names stated gives them.
func serverFiles(f *natstest.TLSFiles, clientCA string) natstls.ServerFiles {
	return natstls.ServerFiles{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: clientCA,
		CertName: "nats.listen_tls_cert", KeyName: "nats.listen_tls_key", ClientCAName: "nats.listen_tls_client_ca"}
}

// plainURL is the nats:// URL of ns: over it nats.go upgrades to TLS because the server requires it.
func plainURL(ns *natsserver.Server) string { return "nats://" + ns.Addr().String() }

func connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{nats.Timeout(10 * time.Second), nats.NoReconnect()}, opts...)...)
}

// roundTrip checks that nc carries a message to itself.
func roundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.SubscribeSync("tls.check")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Publish("tls.check", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no message over the connection: %v", err)
	}
}

// A server with TLS takes clients that trust its CA, over a tls:// or a nats:// URL; a client that
// does not trust it, or that will not speak TLS, is refused; an in-process client (stated's own
// connection) needs no TLS. A reload of the users keeps the TLS.
func TestEmbeddedServerServesTLS(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	conf, err := serverFiles(f, "").Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	users := []natsserver.User{{Name: "a", Password: "pa"}}
	ns := natstest.Start(t, natsserver.Options{TLS: conf, Users: users})
	if !strings.HasPrefix(ns.ClientURL(), "tls://") {
		t.Fatalf("client URL %s, want tls://", ns.ClientURL())
	}
	for _, url := range []string{ns.ClientURL(), plainURL(ns)} {
		nc, err := connect(url, nats.UserInfo("a", "pa"), nats.RootCAs(f.CA))
		if err != nil {
			t.Fatalf("%s with the CA: %v", url, err)
		}
		if st, err := nc.TLSConnectionState(); err != nil || !st.HandshakeComplete {
			t.Fatalf("%s: the connection is not TLS (%v)", url, err)
		}
		roundTrip(t, nc)
		nc.Close()
	}
	if nc, err := connect(plainURL(ns), nats.UserInfo("a", "pa")); err == nil {
		nc.Close()
		t.Fatal("a client that does not trust the server's CA connected")
	}
	if nc, err := connect(plainURL(ns), nats.UserInfo("a", "pa"), nats.RootCAs(f.OtherCA)); err == nil {
		nc.Close()
		t.Fatal("a client that trusts another CA connected")
	}
	// A client that speaks plain NATS: the server's first line asks for TLS, and it never answers
	// with a handshake. It gets no further than that line.
	raw, err := net.DialTimeout("tcp", ns.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	n, err := raw.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), `"tls_required":true`) {
		t.Fatalf("the server's INFO %q (%v) does not require TLS", buf[:n], err)
	}
	fmt.Fprintf(raw, "CONNECT {\"user\":\"a\",\"pass\":\"pa\",\"verbose\":false}\r\nPING\r\n")
	for {
		n, err := raw.Read(buf)
		if strings.Contains(string(buf[:n]), "PONG") {
			t.Fatal("a client without TLS was answered PONG")
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server neither refused nor closed a client without TLS within 20 s")
			}
			break // closed: refused
		}
	}

	inproc, err := nats.Connect(plainURL(ns), nats.InProcessServer(ns.Server), nats.UserInfo("a", "pa"))
	if err != nil {
		t.Fatalf("in-process client: %v", err)
	}
	defer inproc.Close()
	roundTrip(t, inproc)

	if err := ns.Reload([]natsserver.User{{Name: "a", Password: "pa"}, {Name: "b", Password: "pb"}}); err != nil {
		t.Fatal(err)
	}
	nc, err := connect(plainURL(ns), nats.UserInfo("b", "pb"), nats.RootCAs(f.CA))
	if err != nil {
		t.Fatalf("after a reload: %v", err)
	}
	defer nc.Close()
	if st, err := nc.TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Fatalf("after a reload the connection is not TLS (%v)", err)
	}
	roundTrip(t, nc)
}

// With a client CA the server takes only clients whose certificate that CA signed.
func TestEmbeddedServerVerifiesClients(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	conf, err := serverFiles(f, f.CA).Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.Start(t, natsserver.Options{TLS: conf})
	nc, err := connect(plainURL(ns), nats.RootCAs(f.CA), nats.ClientCert(f.ClientCert, f.ClientKey))
	if err != nil {
		t.Fatalf("a client certificate the CA signed: %v", err)
	}
	roundTrip(t, nc)
	nc.Close()
	for name, opts := range map[string][]nats.Option{
		"no client certificate":       {nats.RootCAs(f.CA)},
		"another CA's client's":       {nats.RootCAs(f.CA), nats.ClientCert(f.OtherClientCert, f.OtherKey)},
		"no client certificate (tls)": {nats.RootCAs(f.CA), nats.Secure()},
	} {
		if nc, err := connect(plainURL(ns), opts...); err == nil {
			// The refusal of a certificate can come after nats.go's handshake returned: the
			// connection then fails on first use.
			err = nc.Flush()
			nc.Close()
			if err == nil {
				t.Fatalf("%s: the connection works", name)
			}
		}
	}
}

// The files are read again at every handshake: a certificate renewed in place is served to the next
// client; one that cannot be used fails new clients only, is reported once, and the server takes
// clients again once it can be used.
func TestEmbeddedServerReadsItsTLSFilesAtEveryHandshake(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	other := natstest.NewTLSFiles(t) // another CA, and a server certificate it signed
	dir := t.TempDir()
	cert, key := dir+"/server.pem", dir+"/server-key.pem"
	natstest.CopyFile(t, f.ServerCert, cert)
	natstest.CopyFile(t, f.ServerKey, key)
	var mu sync.Mutex
	var reported []error
	files := natstls.ServerFiles{Cert: cert, Key: key, CertName: "nats.listen_tls_cert", KeyName: "nats.listen_tls_key"}
	conf, err := files.Config(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err)
	})
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.Start(t, natsserver.Options{TLS: conf})
	first, err := connect(plainURL(ns), nats.RootCAs(f.CA))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	natstest.CopyFile(t, other.ServerCert, cert) // renewed in place, by another CA
	natstest.CopyFile(t, other.ServerKey, key)
	if nc, err := connect(plainURL(ns), nats.RootCAs(f.CA)); err == nil {
		nc.Close()
		t.Fatal("after the renewal a client that trusts only the old CA still connected")
	}
	renewed, err := connect(plainURL(ns), nats.RootCAs(other.CA))
	if err != nil {
		t.Fatalf("the renewed certificate is not served: %v", err)
	}
	roundTrip(t, renewed)
	renewed.Close()
	roundTrip(t, first) // a connection made before keeps working

	natstest.CopyFile(t, f.NotPEM, cert) // broken while the server runs
	for range 2 {
		if nc, err := connect(plainURL(ns), nats.RootCAs(other.CA)); err == nil {
			nc.Close()
			t.Fatal("a client connected while the certificate file holds no certificate")
		}
	}
	mu.Lock()
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "nats.listen_tls_cert") || !strings.Contains(reported[0].Error(), cert) {
		t.Fatalf("reported %v, want one error naming nats.listen_tls_cert and %s", reported, cert)
	}
	mu.Unlock()
	natstest.CopyFile(t, other.ServerCert, cert)
	nc, err := connect(plainURL(ns), nats.RootCAs(other.CA))
	if err != nil {
		t.Fatalf("the certificate file mended: %v", err)
	}
	roundTrip(t, nc)
	nc.Close()
}

// Files that cannot be used are an error naming the setting and the path, before any server starts.
func TestServerFilesCheckedFirst(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	missing := f.Dir + "/missing.pem"
	for _, tc := range []struct {
		name  string
		files natstls.ServerFiles
		want  []string
	}{
		{"cert missing", natstls.ServerFiles{Cert: missing, Key: f.ServerKey}, []string{"nats.listen_tls_cert", missing}},
		{"cert not PEM", natstls.ServerFiles{Cert: f.NotPEM, Key: f.ServerKey}, []string{"nats.listen_tls_cert", f.NotPEM, "PEM"}},
		{"key not the cert's", natstls.ServerFiles{Cert: f.ServerCert, Key: f.ClientKey}, []string{"nats.listen_tls_key", f.ClientKey, "nats.listen_tls_cert"}},
		{"client CA not PEM", natstls.ServerFiles{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.NotPEM}, []string{"nats.listen_tls_client_ca", f.NotPEM}},
		{"client CA a key", natstls.ServerFiles{Cert: f.ServerCert, Key: f.ServerKey, ClientCA: f.ClientKey}, []string{"nats.listen_tls_client_ca", "CERTIFICATE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := tc.files
			files.CertName, files.KeyName, files.ClientCAName = "nats.listen_tls_cert", "nats.listen_tls_key", "nats.listen_tls_client_ca"
			conf, err := files.Config(nil)
			if err == nil || conf != nil {
				t.Fatalf("Config: %v, %v; want an error", conf, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%v does not say %q", err, w)
				}
			}
		})
	}
	if conf, err := (natstls.ServerFiles{}).Config(nil); conf != nil || err != nil {
		t.Fatalf("no files: %v, %v; want no TLS", conf, err)
	}
}
