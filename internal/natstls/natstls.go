// Package natstls gives a client connection to a NATS server its TLS files (a CA bundle to verify
// the server, a client certificate and key for mutual TLS) and explains a failed TLS connection in
// terms of the settings that name those files: stated's [nats] tls_ca, tls_cert and tls_key keys and
// statectl's --tls-ca, --tls-cert and --tls-key flags. ServerFiles are the other side: the TLS of
// stated's embedded NATS server ([nats] listen_tls_cert, listen_tls_key, listen_tls_client_ca).
package natstls

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// Files are the TLS files of a connection ("" when not set) and the names of the settings that give
// them, which errors and hints use.
type Files struct {
	CA, Cert, Key             string
	CAName, CertName, KeyName string
}

// Set reports whether any file is set.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Option returns the nats.go option of the files, or nil when none is set; Cert and Key go together
// (one without the other is an error naming both settings). The files are read now, so that one
// that cannot be used is an error naming its setting and path; nats.go reads them again at every
// connect, so a certificate renewed in place is used from the next connection on. A reconnect that
// fails on them is retried, and nats.go reports it to nobody: failed, when not nil, is told of each
// such error (once until the files load again).
func (f Files) Option(failed func(error)) (nats.Option, error) {
	if !f.Set() {
		return nil, nil
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%s and %s go together: give both (the client certificate and its private key) or neither", f.CertName, f.KeyName)
	}
	report := reporter(failed)
	var certCB nats.TLSCertHandler
	var rootCB nats.RootCAsHandler
	if f.CA != "" {
		if _, err := loadCAFile(f.CAName, f.CA); err != nil {
			return nil, err
		}
		rootCB = func() (*x509.CertPool, error) {
			pool, err := loadCAFile(f.CAName, f.CA)
			return pool, report(err)
		}
	}
	if f.Cert != "" {
		if _, err := loadKeyPair(f.CertName, f.Cert, f.KeyName, f.Key); err != nil {
			return nil, err
		}
		certCB = func() (tls.Certificate, error) {
			pair, err := loadKeyPair(f.CertName, f.Cert, f.KeyName, f.Key)
			return pair, report(err)
		}
	}
	return nats.ClientTLSConfig(certCB, rootCB), nil
}

// Hint explains a failed connection to a NATS server in terms of the files' settings, or returns ""
// when err is no TLS failure it knows.
func (f Files) Hint(err error) string {
	return hint(err, f.CAName, f.CA, f.CertName, f.KeyName, f.Cert)
}

// loadCAFile reads a PEM bundle of CA certificates: every block must be a certificate, and there
// must be one. key names the setting in errors.
func loadCAFile(key, path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s %s: holds a PEM %q block: want the CA's certificates (CERTIFICATE blocks)", key, path, b.Type)
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s %s: certificate %d: %w", key, path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it (want the CA's certificates, -----BEGIN CERTIFICATE-----)", key, path)
	}
	return pool, nil
}

// loadKeyPair reads a client certificate (PEM, its chain may follow) and its private key (PEM).
// certKey and keyKey name the settings in errors.
func loadKeyPair(certKey, certPath, keyKey, keyPath string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", certKey, err)
	}
	if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
		return tls.Certificate{}, fmt.Errorf("%s %s: no PEM certificate in it (want -----BEGIN CERTIFICATE-----)", certKey, certPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", keyKey, err)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
		return tls.Certificate{}, fmt.Errorf("%s %s: no PEM private key in it (want -----BEGIN PRIVATE KEY----- or EC/RSA PRIVATE KEY)", keyKey, keyPath)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s %s and %s %s: %w", keyKey, keyPath, certKey, certPath, err)
	}
	return pair, nil
}

// hint explains err in terms of the settings: ca, cert and key name them, caPath and certPath are
// their values ("" when not set).
func hint(err error, ca, caPath, cert, key, certPath string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	msg := err.Error()
	switch {
	case errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Sprintf("the NATS server offers no TLS, but %s/%s ask for it: use the server's TLS address, or remove them", ca, cert)
	case errors.As(err, &unknown):
		if caPath == "" {
			return fmt.Sprintf("the NATS server's certificate is not trusted: set %s to the PEM bundle of the CA that signed it", ca)
		}
		return fmt.Sprintf("the NATS server's certificate is not trusted: no CA in %s %s signed it", ca, caPath)
	case errors.As(err, &host):
		return fmt.Sprintf("the NATS server's certificate is not valid for the host of the URL (%s): use a host it names", host.Host)
	case errors.As(err, &invalid):
		return "the NATS server's certificate is not valid (expired, not yet valid, or not for a server)"
	case isRemoteTLSAlert(err, "certificate required") && certPath == "":
		return fmt.Sprintf("the NATS server requires a client certificate: set %s and %s", cert, key)
	case isRemoteTLSAlert(err, "certificate required"):
		// A client sends only a certificate whose issuer is one the server asked for.
		return fmt.Sprintf("the NATS server requires a client certificate signed by a CA it trusts, and %s %s is not: it was not sent", cert, certPath)
	case isRemoteTLSAlert(err, "bad certificate", "unknown certificate authority", "certificate unknown", "certificate expired"):
		return fmt.Sprintf("the NATS server refused the client certificate %s %s", cert, certPath)
	case errors.Is(err, nats.ErrTLS) && strings.Contains(msg, "closed by remote after TLS handshake"):
		// The server's alert was not read before the connection closed: the same refusal, seen late.
		if certPath == "" {
			return fmt.Sprintf("the NATS server closed the connection right after the TLS handshake, as one that requires a client certificate does: set %s and %s", cert, key)
		}
		return fmt.Sprintf("the NATS server closed the connection right after the TLS handshake, as one that refuses the client certificate does: check that a CA it trusts signed %s %s", cert, certPath)
	case strings.Contains(msg, "tls:") || errors.Is(err, nats.ErrTLS):
		return fmt.Sprintf("a TLS failure: check %s, %s and %s", ca, cert, key)
	}
	return ""
}

// isRemoteTLSAlert reports whether err is a TLS alert the server sent ("remote error: tls: ...") of
// one of the descriptions: Go exports no type for a received alert.
func isRemoteTLSAlert(err error, descriptions ...string) bool {
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "remote error" || oe.Err == nil {
		return false
	}
	for _, d := range descriptions {
		if oe.Err.Error() == "tls: "+d {
			return true
		}
	}
	return false
}

// ServerFiles are the TLS files of a NATS server that serves TLS ("" when not set): its certificate
// (PEM, its chain may follow) and private key, and, for mutual TLS, a PEM bundle of the CAs whose
// client certificates it accepts; and the names of the settings that give them, which errors use.
type ServerFiles struct {
	Cert, Key, ClientCA             string
	CertName, KeyName, ClientCAName string
}

// Set reports whether any file is set.
func (f ServerFiles) Set() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Config returns the server's TLS configuration, or nil when no file is set; Cert and Key go
// together, and ClientCA needs them (the caller checks that first, with its own kind of error). The
// files are read now, so that one that cannot be used is an error naming its setting and path, and
// again at every client's handshake, as a client reads its own at every connect: a certificate (or
// CA bundle) renewed in place is served from the next connection on, and connections already made
// keep theirs. A handshake that fails on the files fails that client's connection only (it
// retries); failed, when not nil, is told of each such error (once until the files load again).
// With ClientCA, a client must present a certificate one of its CAs signed.
func (f ServerFiles) Config(failed func(error)) (*tls.Config, error) {
	if !f.Set() {
		return nil, nil
	}
	load := func() (*tls.Config, error) {
		pair, err := loadKeyPair(f.CertName, f.Cert, f.KeyName, f.Key)
		if err != nil {
			return nil, err
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
		if f.ClientCA != "" {
			if c.ClientCAs, err = loadCAFile(f.ClientCAName, f.ClientCA); err != nil {
				return nil, err
			}
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	first, err := load()
	if err != nil {
		return nil, err
	}
	report := reporter(failed)
	first.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := load()
		return c, report(err)
	}
	return first, nil
}

// reporter returns a function that tells failed of an error it is given (nil: the files loaded),
// once until the files load again, and returns that error.
func reporter(failed func(error)) func(error) error {
	var mu sync.Mutex
	last := ""
	return func(err error) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			last = ""
		case err.Error() != last && failed != nil:
			last = err.Error()
			failed(err)
		}
		return err
	}
}
