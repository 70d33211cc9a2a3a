package main

import (
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstls"
)

// tlsOption returns the nats.go option of --tls-ca, --tls-cert and --tls-key, or nil when none is
// given. The files are read now (a usage error names the flag and file) and again at every connect.
func (g *globals) tlsOption() (nats.Option, error) {
	opt, err := g.tlsFiles().Option(nil)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return opt, nil
}

// tlsFiles are the --tls-* flags.
func (g *globals) tlsFiles() natstls.Files {
	return natstls.Files{CA: g.tlsCA, Cert: g.tlsCert, Key: g.tlsKey, CAName: "--tls-ca", CertName: "--tls-cert", KeyName: "--tls-key"}
}
