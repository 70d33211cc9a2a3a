// Package internal holds what the example commands share: connection flags.
package internal

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstls"
	"github.com/keeppeek/coordination/internal/natsurl"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Conn is the connection flags of an example command.
type Conn struct {
	URL, User, Password *string
	// Nkey is the file of the principal's nkey seed (SPEC 14: a principal may be authenticated by an
	// nkey instead of a password).
	Nkey *string
	// TLSCA, TLSCert and TLSKey are the TLS files (stated's embedded server with listen_tls_*, or an
	// external server that requires TLS): a PEM CA bundle that verifies the server, and a client
	// certificate with its private key for a server that verifies clients.
	TLSCA, TLSCert, TLSKey *string
	envUser                string // the user KP_PASSWORD and KP_NKEY belong to: KP_USER, else the default user
}

// ConnFlags registers --nats-url, --user, --password, --nkey, --tls-ca, --tls-cert and --tls-key on
// the command line (defaults from NATS_URL, KP_USER, KP_PASSWORD, KP_NKEY, KP_TLS_CA, KP_TLS_CERT,
// KP_TLS_KEY; the user defaults to defUser).
func ConnFlags(defUser string) Conn { return ConnFlagsOn(flag.CommandLine, defUser) }

// ConnFlagsOn is ConnFlags on a flag set of the caller's. The password of KP_PASSWORD is not the
// flag's default but read when Dial connects: a flag's default is printed in the usage (for -h and
// for every mistyped flag), which would show the secret on a terminal or in a log.
func ConnFlagsOn(fs *flag.FlagSet, defUser string) Conn {
	envUser := envOr("KP_USER", defUser)
	return Conn{
		URL:      fs.String("nats-url", envOr("NATS_URL", "nats://127.0.0.1:4222"), "NATS server (env NATS_URL)"),
		User:     fs.String("user", envUser, "principal (env KP_USER)"),
		Password: fs.String("password", "", "password of the principal (default $KP_PASSWORD, for the user of $KP_USER only; none for the dev principal)"),
		Nkey:     fs.String("nkey", "", "file of the principal's nkey seed, to sign in with instead of a password (default $KP_NKEY, for the user of $KP_USER only)"),
		TLSCA:    fs.String("tls-ca", os.Getenv("KP_TLS_CA"), "PEM CA bundle that verifies the NATS server's certificate, for a private CA (env KP_TLS_CA; default: the system's roots)"),
		TLSCert:  fs.String("tls-cert", os.Getenv("KP_TLS_CERT"), "PEM client certificate, with --tls-key, for a server that verifies clients (env KP_TLS_CERT)"),
		TLSKey:   fs.String("tls-key", os.Getenv("KP_TLS_KEY"), "PEM private key of --tls-cert (env KP_TLS_KEY)"),
		envUser:  envUser,
	}
}

// tlsFiles are the --tls-* flags (none when the Conn was made without them).
func (c Conn) tlsFiles() natstls.Files {
	f := natstls.Files{CAName: "--tls-ca", CertName: "--tls-cert", KeyName: "--tls-key"}
	if c.TLSCA != nil {
		f.CA, f.Cert, f.Key = *c.TLSCA, *c.TLSCert, *c.TLSKey
	}
	return f
}

// password is --password, else KP_PASSWORD when the user is the environment's: a --user naming
// another principal never gets the environment user's secret (statectl, etcdctl and the nats CLI do
// the same), so it is refused as that principal's own login would be, not sent under its name.
func (c Conn) password() string {
	if *c.Password != "" {
		return *c.Password
	}
	if *c.User != c.envUser {
		return ""
	}
	return os.Getenv("KP_PASSWORD")
}

// nkey is --nkey, else KP_NKEY when the user is the environment's (as password).
func (c Conn) nkey() string {
	if c.Nkey != nil && *c.Nkey != "" {
		return *c.Nkey
	}
	if *c.User != c.envUser {
		return ""
	}
	return os.Getenv("KP_NKEY")
}

// ParseInterspersed parses args with fs and returns the positional arguments, letting flags come
// after them as the commands' usage lines show (`coordinator publish SOURCE --variant V`): Go's flag
// package alone stops at the first positional argument and would leave the flags after it unparsed.
// Everything after a `--` is positional.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// ParseFlags parses the command line of a command that takes flags only (a worker, the demo), and
// exits 2 with its usage when a positional argument is given: Go's flag package stops at the first
// one and leaves every flag after it unparsed, so `transcoder tx-1 --service cv-a` would run
// silently as another worker of another service than the one asked for.
func ParseFlags() {
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(flag.CommandLine.Output(), "%s: unexpected argument %q: every setting is a flag (see -h)\n", filepath.Base(flag.CommandLine.Name()), flag.Arg(0))
		flag.Usage()
		os.Exit(2)
	}
}

// UsageError ends a command whose flags parsed but say something it cannot do (a value out of
// range): it names the problem, prints the usage and exits 2, as the flag package does for a flag
// it cannot parse and ParseFlags for a positional argument. Exit 1 is kept for failures at run
// time, so a script or a supervisor can tell a command line to fix from a run that went wrong.
func UsageError(format string, args ...any) {
	fmt.Fprintf(flag.CommandLine.Output(), "%s: %s\n", filepath.Base(flag.CommandLine.Name()), fmt.Sprintf(format, args...))
	flag.Usage()
	os.Exit(2)
}

// CheckWorkerFlags ends a worker command with a usage error (UsageError) when its --worker-id, or
// its --service when it has one (service non-nil), breaks its rule: the worker runtime would refuse
// it too, but only once NATS is dialled, and with exit 1, as for a failure at run time.
func CheckWorkerFlags(workerID string, service *string) {
	if !wire.ValidWatchID(workerID) {
		UsageError("--worker-id %q is not a worker id ([A-Za-z0-9_-]{1,64})", workerID)
	}
	if service != nil && !wire.ValidPrincipalID(*service) {
		UsageError("--service %q is not a service id ([a-z0-9][a-z0-9_-]{0,62})", *service)
	}
}

// Check reports a connection flag that cannot work, so that a command refuses it as bad usage before
// it connects: a --user (or KP_USER) that is no principal id was refused only by Dial (exit 1, as for
// a failure at run time), a --nats-url nats.go cannot use made a worker wait for ever for a server
// that cannot exist, and --nkey with --password was refused only by Dial. TLS files that cannot be
// used (missing, not PEM, a key that is not the certificate's) are refused too, naming flag and file.
func (c Conn) Check() error {
	if !wire.ValidPrincipalID(*c.User) {
		return fmt.Errorf("--user %q (default $KP_USER) is not a principal id ([a-z0-9][a-z0-9_-]{0,62})", *c.User)
	}
	if err := natsurl.Check(*c.URL); err != nil {
		return fmt.Errorf("--nats-url %q (default $NATS_URL): %v", natsurl.Redact(*c.URL), err)
	}
	if *c.Password != "" && c.Nkey != nil && *c.Nkey != "" {
		return errors.New("--nkey and --password are two ways to sign in: give one")
	}
	_, err := c.tlsOption()
	return err
}

// tlsOption is the nats.go option of the --tls-* flags, or nil when none is given; the files are
// read now (an error names the flag and the file, as a --tls-cert without its --tls-key) and again
// at every connect.
func (c Conn) tlsOption() (nats.Option, error) { return c.tlsFiles().Option(nil) }

// CheckConnFlags ends a command with a usage error (UsageError) when conn.Check refuses its flags.
func CheckConnFlags(conn Conn) {
	if err := conn.Check(); err != nil {
		UsageError("%v", err)
	}
}

// Dial connects as the principal with the inbox prefix its permissions allow.
func (c Conn) Dial(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name)}, extra...)
	if seed := c.nkey(); seed != "" {
		if *c.Password != "" {
			return nil, errors.New("--nkey and --password are two ways to sign in: give one")
		}
		o, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", seed, err)
		}
		opts = append(opts, o)
	} else if pw := c.password(); pw != "" {
		opts = append(opts, nats.UserInfo(*c.User, pw))
	}
	tlsOpt, err := c.tlsOption()
	if err != nil {
		return nil, err
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	nc, err := client.Connect(*c.URL, *c.User, opts...)
	if err != nil {
		if hint := c.tlsFiles().Hint(err); hint != "" {
			return nil, fmt.Errorf("%w (%s)", err, hint)
		}
		return nil, err
	}
	return nc, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// WatchID names a worker's watch after its worker id, so a restarted worker with the same id takes
// over the watch its predecessor left behind instead of leaving it to hold a watch slot. Ids longer
// than a watch id allows are shortened with a hash.
func WatchID(kind, workerID string) string {
	id := kind + "-" + workerID
	if len(id) <= 64 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return id[:47] + "-" + hex.EncodeToString(sum[:8])
}

// WaitForNATS are the connect options of a process that serves until stopped (a worker, the
// simulator): started before the NATS server is up (before stated, say), it waits for it instead of
// exiting, and says so in log. A command that does one thing and exits connects without them and
// fails at once.
func WaitForNATS(log *slog.Logger) []nats.Option {
	return []nats.Option{nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second),
		nats.ConnectHandler(func(nc *nats.Conn) { log.Info("NATS connected", "url", nc.ConnectedUrlRedacted()) }),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS not reachable; retrying", "err", err) }),
	}
}
