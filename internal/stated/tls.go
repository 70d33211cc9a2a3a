package stated

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstls"
)

// tlsKeysSet names the [nats] TLS keys the configuration sets.
func (c *Config) tlsKeysSet() []string {
	return keysSet("tls_ca", c.NATS.TLSCA, "tls_cert", c.NATS.TLSCert, "tls_key", c.NATS.TLSKey)
}

// keysSet returns, of the names and values of pairs, the names whose value is set, in order.
func keysSet(pairs ...string) []string {
	var set []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			set = append(set, pairs[i])
		}
	}
	return set
}

// checkTLSMode refuses TLS keys with the embedded NATS server: they configure stated's connection to
// an external one (url, or --nats-url, which overrides the file's listen); the embedded server's own
// TLS is listen_tls_cert, listen_tls_key and listen_tls_client_ca. Checked once the command line has
// chosen the mode, not by Validate: a file with listen and tls_ca is right for a stated started with
// --nats-url.
func (c *Config) checkTLSMode() error {
	if c.NATS.URL != "" {
		return nil
	}
	if set := c.tlsKeysSet(); len(set) > 0 {
		return fmt.Errorf("nats: %s set with the embedded NATS server (listen): "+
			"they are for stated's connection to an external server (url, or --nats-url); remove them, or set url "+
			"(the embedded server's own TLS is listen_tls_cert, listen_tls_key and listen_tls_client_ca)",
			strings.Join(set, ", "))
	}
	return nil
}

// natsTLS returns the nats.go option of stated's TLS connection to an external server, or nil when
// no TLS key is set: see natstls.Files.Option, whose failed it takes.
func (c *Config) natsTLS(failed func(error)) (nats.Option, error) {
	if c.NATS.URL == "" {
		return nil, nil
	}
	return c.tlsFiles().Option(failed)
}

// tlsFiles are the [nats] TLS keys.
func (c *Config) tlsFiles() natstls.Files {
	return natstls.Files{CA: c.NATS.TLSCA, Cert: c.NATS.TLSCert, Key: c.NATS.TLSKey,
		CAName: "nats.tls_ca", CertName: "nats.tls_cert", KeyName: "nats.tls_key"}
}

// listenTLSKeysSet names the [nats] keys of the embedded server's TLS the configuration sets.
func (c *Config) listenTLSKeysSet() []string {
	return keysSet("nats.listen_tls_cert", c.NATS.ListenTLSCert, "nats.listen_tls_key", c.NATS.ListenTLSKey,
		"nats.listen_tls_client_ca", c.NATS.ListenTLSClientCA)
}

// listenTLS returns the embedded server's TLS configuration, or nil when it serves none (no key set,
// or an external server): see natstls.ServerFiles.Config, whose failed it takes.
func (c *Config) listenTLS(failed func(error)) (*tls.Config, error) {
	if c.NATS.URL != "" {
		return nil, nil
	}
	return natstls.ServerFiles{Cert: c.NATS.ListenTLSCert, Key: c.NATS.ListenTLSKey, ClientCA: c.NATS.ListenTLSClientCA,
		CertName: "nats.listen_tls_cert", KeyName: "nats.listen_tls_key", ClientCAName: "nats.listen_tls_client_ca"}.Config(failed)
}

// cleartextWarning says, when the embedded server listens beyond loopback without TLS, that what its
// clients send (the principals' passwords in their CONNECT, every document) crosses the network in
// clear. A host name other than localhost counts as beyond loopback: it is not resolved here.
func (c *Config) cleartextWarning() string {
	if c.NATS.URL != "" || c.NATS.ListenTLSCert != "" {
		return ""
	}
	host, _, err := net.SplitHostPort(c.NATS.Listen)
	if err != nil {
		return "" // Validate refuses it
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return ""
	}
	return fmt.Sprintf("the embedded NATS server listens on %s, beyond loopback, without TLS: the principals' passwords and "+
		"every document cross the network in clear; set [nats] listen_tls_cert and listen_tls_key", c.NATS.Listen)
}
