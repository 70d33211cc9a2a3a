package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstls"
)

// TLSFiles are the PEM files of a TLS test, written into a temporary directory: a CA, a server
// certificate for 127.0.0.1 and localhost and a client certificate, both signed by the CA, and a
// second CA with a client certificate of its own (a server verifying clients against CA refuses it).
// ServerKey does not match ClientCert: the pair of a key that belongs to another certificate.
type TLSFiles struct {
	Dir                       string
	CA                        string // the CA's certificate
	ServerCert, ServerKey     string
	ClientCert, ClientKey     string
	OtherCA                   string // a CA that signed neither the server's nor ClientCert
	OtherClientCert, OtherKey string // a client certificate OtherCA signed, and its key
	NotPEM                    string // a file of text that holds no PEM block
}

// NewTLSFiles generates the certificates (ECDSA P-256, valid for an hour) and writes them.
func NewTLSFiles(t testing.TB) *TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := &TLSFiles{Dir: dir}
	write := func(name string, blocks ...*pem.Block) string {
		t.Helper()
		var data []byte
		for _, b := range blocks {
			data = append(data, pem.EncodeToMemory(b)...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caCert, caKey := newCert(t, "keeppeek test CA", nil, nil, nil)
	f.CA = write("ca.pem", certBlock(caCert))
	srvCert, srvKey := newCert(t, "127.0.0.1", caCert, caKey, func(c *x509.Certificate) {
		c.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		c.DNSNames = []string{"localhost"}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	f.ServerCert, f.ServerKey = write("server.pem", certBlock(srvCert)), write("server-key.pem", keyBlock(t, srvKey))
	client := func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }
	cliCert, cliKey := newCert(t, "stated", caCert, caKey, client)
	f.ClientCert, f.ClientKey = write("client.pem", certBlock(cliCert)), write("client-key.pem", keyBlock(t, cliKey))
	otherCA, otherCAKey := newCert(t, "another CA", nil, nil, nil)
	f.OtherCA = write("other-ca.pem", certBlock(otherCA))
	otherCert, otherKey := newCert(t, "stranger", otherCA, otherCAKey, client)
	f.OtherClientCert, f.OtherKey = write("other-client.pem", certBlock(otherCert)), write("other-client-key.pem", keyBlock(t, otherKey))
	f.NotPEM = filepath.Join(dir, "not-pem.txt")
	if err := os.WriteFile(f.NotPEM, []byte("this is not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

var serial int64

// newCert makes a certificate for name, signed by parent with parentKey (self-signed, a CA, when
// parent is nil), edited by edit.
func newCert(t testing.TB, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, edit func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	if edit != nil {
		edit(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func certBlock(c *x509.Certificate) *pem.Block { return &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw} }

func keyBlock(t testing.TB, k *ecdsa.PrivateKey) *pem.Block {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return &pem.Block{Type: "PRIVATE KEY", Bytes: der}
}

// StartTLS starts a nats-server (no authorization) on a free loopback port that requires TLS with
// f's server certificate and, with verifyClients, a client certificate that f.CA signed. It is shut
// down at the test's cleanup. Its ClientURL is tls://127.0.0.1:PORT; PlainSchemeURL gives the
// nats:// one, over which nats.go upgrades to TLS too, since the server requires it.
func StartTLS(t testing.TB, f *TLSFiles, verifyClients bool) *server.Server {
	t.Helper()
	tc := &server.TLSConfigOpts{CertFile: f.ServerCert, KeyFile: f.ServerKey, Verify: verifyClients}
	if verifyClients {
		tc.CaFile = f.CA
	}
	tlsConf, err := server.GenTLSConfig(tc)
	if err != nil {
		t.Fatalf("natstest: TLS configuration: %v", err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, NoSystemAccount: true,
		TLSConfig: tlsConf, TLSVerify: verifyClients, TLSTimeout: 5, MaxClosedClients: 1}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: nats server: %v", err)
	}
	go ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: the TLS nats server is not ready for connections within 10 s")
	}
	return ns
}

// PlainSchemeURL is the nats:// URL of a server StartTLS started (its ClientURL is tls://).
func PlainSchemeURL(ns *server.Server) string {
	return fmt.Sprintf("nats://%s", ns.Addr().String())
}

// CopyFile writes the contents of from to to (a TLS file renewed, or broken, in place), failing the
// test when it cannot.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// StartEmbeddedTLS starts the embedded NATS server (natsserver, as stated runs it with [nats]
// listen_tls_*) on a free loopback port, requiring TLS with f's server certificate and, with
// verifyClients, a client certificate that f.CA signed. It is shut down at the test's cleanup.
func StartEmbeddedTLS(t testing.TB, f *TLSFiles, verifyClients bool) *natsserver.Server {
	t.Helper()
	files := natstls.ServerFiles{Cert: f.ServerCert, Key: f.ServerKey}
	if verifyClients {
		files.ClientCA = f.CA
	}
	conf, err := files.Config(nil)
	if err != nil {
		t.Fatalf("natstest: TLS configuration: %v", err)
	}
	return Start(t, natsserver.Options{TLS: conf})
}
