package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/bench"
	"github.com/keeppeek/coordination/internal/natsurl"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1 // an error the server answered (a SPEC code), or a local failure
	exitUsage       = 2
	exitConnection  = 3 // no connection, wrong credentials, no reply in time
	exitInterrupted = 130
	exitOutputGone  = 141 // 128 + SIGPIPE: what a write to the gone reader would have ended with
)

// errOutputGone ends a watch whose output pipe lost its reader. statectl then exits
// exitOutputGone without a word, as a process killed by SIGPIPE does: there is nobody to tell.
var errOutputGone = errors.New("the reader of the output went away")

// Defaults of the global flags.
const (
	defaultNATSURL = "nats://127.0.0.1:4222"
	defaultUser    = "dev"
	defaultTimeout = 5 * time.Second
)

// globals are the flags every command takes, before or after its name, each also from the
// environment.
type globals struct {
	natsURL  string
	user     string
	password string
	// nkey is the file of the principal's nkey seed (SPEC 14: a principal may be authenticated by
	// an nkey instead of a password); "" for none.
	nkey string
	// tlsCA, tlsCert and tlsKey are the TLS files (SPEC 14 is silent; stated's [nats] tls_* keys):
	// the CA bundle that verifies the server, and the client certificate and its key; "" for none.
	tlsCA, tlsCert, tlsKey string
	prefix                 string
	timeout                time.Duration
	json                   bool
	// timeoutSet is true when --timeout was given on the command line (watch then stops after it).
	timeoutSet bool
	// envUser is the user the environment names (STATECTL_USER, or the default), the one
	// STATECTL_PASSWORD belongs to; passwordSet is true when --password was given on the command line.
	envUser     string
	passwordSet bool
	nkeySet     bool
	jsonSet     bool
	// envTimeoutErr and envJSONErr are the usage errors of an unreadable STATECTL_TIMEOUT or
	// STATECTL_JSON: a command fails with them unless its flag replaces the variable, while help is
	// shown whatever the environment says.
	envTimeoutErr, envJSONErr error
	// envPasswordDropped is true when STATECTL_PASSWORD was not sent because --user named another
	// principal (a connection error then says so).
	envPasswordDropped bool
}

// register adds the global flags to fs with the current values as defaults, so a FlagSet parsed
// later keeps what an earlier one (or the environment) set.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.natsURL, "nats-url", g.natsURL, "NATS server URL")
	fs.StringVar(&g.user, "user", g.user, "principal")
	fs.StringVar(&g.password, "password", g.password, "password")
	fs.StringVar(&g.nkey, "nkey", g.nkey, "file of the principal's nkey seed")
	fs.StringVar(&g.tlsCA, "tls-ca", g.tlsCA, "PEM CA bundle that verifies the NATS server's certificate")
	fs.StringVar(&g.tlsCert, "tls-cert", g.tlsCert, "PEM client certificate")
	fs.StringVar(&g.tlsKey, "tls-key", g.tlsKey, "PEM private key of --tls-cert")
	fs.StringVar(&g.prefix, "prefix", g.prefix, "subject prefix")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "request timeout")
	fs.BoolVar(&g.json, "json", g.json, "print wire JSON")
}

// fromEnv reads the globals' environment variables over the defaults.
func (g *globals) fromEnv(getenv func(string) string) {
	*g = globals{natsURL: defaultNATSURL, user: defaultUser, prefix: wire.DefaultPrefix, timeout: defaultTimeout}
	if v := getenv("STATECTL_NATS_URL"); v != "" {
		g.natsURL = v
	}
	if v := getenv("STATECTL_USER"); v != "" {
		g.user = v
	}
	g.envUser = g.user
	g.password = getenv("STATECTL_PASSWORD")
	g.nkey = getenv("STATECTL_NKEY")
	g.tlsCA, g.tlsCert, g.tlsKey = getenv("STATECTL_TLS_CA"), getenv("STATECTL_TLS_CERT"), getenv("STATECTL_TLS_KEY")
	if v := getenv("STATECTL_PREFIX"); v != "" {
		g.prefix = v
	}
	if v := getenv("STATECTL_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			g.envTimeoutErr = usageErrorf("STATECTL_TIMEOUT=%q: %v", v, err)
		}
		g.timeout = d
	}
	if v := getenv("STATECTL_JSON"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			g.envJSONErr = usageErrorf("STATECTL_JSON=%q: %v", v, err)
		}
		g.json = b
	}
}

// seen records which globals a parsed FlagSet was given on the command line.
func (g *globals) seen(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		g.timeoutSet = g.timeoutSet || f.Name == "timeout"
		g.passwordSet = g.passwordSet || f.Name == "password"
		g.nkeySet = g.nkeySet || f.Name == "nkey"
		g.jsonSet = g.jsonSet || f.Name == "json"
	})
}

// resolveCredentials keeps STATECTL_PASSWORD only for the user it belongs to: a --user on the
// command line that names another principal does not get that principal's secret (give --password
// for it), as etcdctl and the nats CLI never pair one user's password with another user.
func (g *globals) resolveCredentials() {
	if !g.passwordSet && g.user != g.envUser && g.password != "" {
		g.password, g.envPasswordDropped = "", true
	}
	if !g.nkeySet && g.user != g.envUser && g.nkey != "" {
		g.nkey, g.envPasswordDropped = "", true // STATECTL_NKEY is the environment's user's too
	}
}

func (g *globals) validate() error {
	g.resolveCredentials()
	switch {
	case g.envTimeoutErr != nil && !g.timeoutSet:
		return g.envTimeoutErr
	case g.envJSONErr != nil && !g.jsonSet:
		return g.envJSONErr
	case g.natsURL == "":
		return usageErrorf("--nats-url is empty")
	case !wire.ValidPrincipalID(g.user):
		return usageErrorf("--user %q is not a principal id ([a-z0-9][a-z0-9_-]{0,62})", g.user)
	case !wire.ValidPrefix(g.prefix):
		return usageErrorf("--prefix %q is not a subject prefix", g.prefix)
	case g.timeout <= 0:
		return usageErrorf("--timeout must be positive, got %v", g.timeout)
	case g.nkey != "" && g.passwordSet:
		return usageErrorf("--nkey and --password are two ways to authenticate: give one")
	}
	if g.nkey != "" {
		// Read now, so that a wrong path is a usage error naming the file, not a refused login.
		if _, err := nats.NkeyOptionFromSeed(g.nkey); err != nil {
			return usageErrorf("--nkey %s: %v", g.nkey, err)
		}
	}
	// Read now too: a file that cannot be used is a usage error naming the flag and the file.
	if _, err := g.tlsOption(); err != nil {
		return err
	}
	return nil
}

// app is one statectl invocation.
type app struct {
	g globals
	// requestTimeout, when set, replaces g.timeout as the bound of each request (watch uses
	// --timeout for its own duration).
	requestTimeout time.Duration
	stdin          io.Reader
	stdout         io.Writer
	stderr         io.Writer
	// stdoutFile is the file behind stdout when there is one (the process's), so that watch can
	// notice that the reader of a pipe went away; nil otherwise.
	stdoutFile *os.File

	// left says what the command leaves behind if a second interrupt abandons it (see
	// runInterruptible); "" for nothing worth saying.
	leftMu sync.Mutex
	left   string
}

// setLeftBehind records what an abandoned command would leave behind.
func (a *app) setLeftBehind(s string) {
	a.leftMu.Lock()
	defer a.leftMu.Unlock()
	a.left = s
}

func (a *app) leftBehind() string {
	a.leftMu.Lock()
	defer a.leftMu.Unlock()
	return a.left
}

// command is a subcommand: run parses its own flags (after the globals) and arguments.
type command struct {
	name  string
	usage string
	run   func(a *app, ctx context.Context, cmd *command, args []string) error
}

func commands() []*command {
	return []*command{
		{name: "get", usage: usageGet, run: (*app).cmdGet},
		{name: "put", usage: usagePut, run: (*app).cmdPut},
		{name: "delete", usage: usageDelete, run: (*app).cmdDelete},
		{name: "ls", usage: usageLs, run: (*app).cmdLs},
		{name: "watch", usage: usageWatch, run: (*app).cmdWatch},
		{name: "info", usage: usageInfo, run: (*app).cmdInfo},
		{name: "workers", usage: usageWorkers, run: (*app).cmdWorkers},
		{name: "backup", usage: usageBackup, run: (*app).cmdBackup},
		{name: "audit", usage: usageAudit, run: (*app).cmdAudit},
		{name: "bench", usage: usageBench, run: (*app).cmdBench},
	}
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run is statectl: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	return a.report(a.main(ctx, args))
}

func (a *app) main(ctx context.Context, args []string) error {
	a.g.fromEnv(os.Getenv)
	fs := a.flagSet("statectl")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(a.stdout, usageMain)
			return nil
		}
		return usageErrorf("%v", err)
	}
	a.g.seen(fs)
	if fs.NArg() == 0 {
		fmt.Fprint(a.stderr, usageMain)
		return &cliError{code: exitUsage, label: "USAGE", err: errors.New("name a command")}
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		return a.help(rest)
	}
	cmd := lookup(name)
	if cmd == nil {
		return usageErrorf("unknown command %q (see statectl help)", name)
	}
	return cmd.run(a, ctx, cmd, rest)
}

func (a *app) help(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(a.stdout, usageMain)
		return nil
	}
	if args[0] == "help" {
		fmt.Fprint(a.stdout, usageMain)
		return nil
	}
	cmd := lookup(args[0])
	if cmd == nil {
		return usageErrorf("unknown command %q (see statectl help)", args[0])
	}
	fmt.Fprint(a.stdout, cmd.usage)
	return nil
}

// flagSet returns a silent FlagSet with the global flags registered.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	a.g.register(fs)
	return fs
}

// errHelp is returned by parse after it printed a command's usage for --help.
var errHelp = errors.New("help shown")

// parse parses a command's flags, which may come before, between or after its arguments (a "--"
// ends the flags), validates the globals and checks the number of arguments.
func (a *app) parse(cmd *command, fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(a.stdout, cmd.usage)
				return nil, errHelp
			}
			return nil, usageErrorf("%s: %v (see statectl help %s)", cmd.name, err, cmd.name)
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	a.g.seen(fs)
	if err := a.g.validate(); err != nil {
		return nil, err
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		return nil, usageErrorf("%s takes %s (see statectl help %s)", cmd.name, argCount(minArgs, maxArgs), cmd.name)
	}
	return pos, nil
}

func argCount(lo, hi int) string {
	plural := func(n int) string {
		if n == 1 {
			return "1 argument"
		}
		return fmt.Sprintf("%d arguments", n)
	}
	switch {
	case lo == hi:
		return plural(lo)
	case hi == lo+1:
		return fmt.Sprintf("%d or %s", lo, plural(hi))
	default:
		return fmt.Sprintf("%d to %s", lo, plural(hi))
	}
}

// conn is a connection to the state server as the --user principal.
type conn struct {
	c *client.Client
	// violations receives NATS permission violations: a request on a subject the principal may not
	// publish to gets no reply, only this.
	violations chan error
}

// do runs one request, fn, with a context that a NATS permission violation ends at once with
// PERMISSION_DENIED: a request on a subject the principal may not publish to gets no reply, and would
// otherwise wait for --timeout. refused says what was refused.
func (cn *conn) do(ctx context.Context, refused func(violation error) error, fn func(context.Context) error) error {
	// A violation already reported belongs to an earlier publish (a watch's ack, say), not to fn's.
	for len(cn.violations) > 0 {
		<-cn.violations
	}
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case v := <-cn.violations:
			stop(refused(v))
		case <-rctx.Done():
		}
	}()
	err := fn(rctx)
	if err != nil {
		if cause := context.Cause(rctx); cause != nil && wire.CodeOf(cause) != "" {
			return cause
		}
	}
	return err
}

// state runs one state request (see do).
func (cn *conn) state(ctx context.Context, fn func(context.Context) error) error {
	return cn.do(ctx, func(v error) error {
		return wire.Errorf(wire.CodePermissionDenied, "NATS refused the request (%v): check --user, --password and --prefix", v)
	}, fn)
}

func (a *app) connect() (*conn, error) {
	timeout := a.g.timeout
	if a.requestTimeout > 0 {
		timeout = a.requestTimeout
	}
	cn := &conn{violations: make(chan error, 8)}
	opts := []nats.Option{
		nats.Timeout(timeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case cn.violations <- err:
				default:
				}
			}
		}),
	}
	if a.g.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(a.g.nkey)
		if err != nil {
			return nil, usageErrorf("--nkey %s: %v", a.g.nkey, err)
		}
		opts = append(opts, o)
	} else {
		// The user goes with or without a password: a server without authorization ignores it, and
		// one with a password-less user needs it.
		opts = append(opts, nats.UserInfo(a.g.user, a.g.password))
	}
	tlsOpt, err := a.g.tlsOption()
	if err != nil {
		return nil, err
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	nc, err := client.Connect(a.g.natsURL, a.g.user, opts...)
	if err != nil {
		if hint := a.g.tlsFiles().Hint(err); hint != "" {
			err = fmt.Errorf("%w (%s)", err, hint)
		}
		if a.g.envPasswordDropped {
			err = fmt.Errorf("%w (STATECTL_PASSWORD or STATECTL_NKEY was not sent: it belongs to %s, the environment's user; give --password or --nkey for %s)", err, a.g.envUser, a.g.user)
		}
		return nil, &cliError{code: exitConnection, label: "CONNECTION", err: err}
	}
	c, err := client.New(nc, a.g.user, client.WithPrefix(a.g.prefix), client.WithRequestTimeout(timeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	cn.c = c
	return cn, nil
}

func (cn *conn) close() { cn.c.Conn().Close() }

// cliError is an error with its exit code and the label printed before it.
type cliError struct {
	code  int
	label string
	err   error
	// answered is true when stdout already holds the command's JSON answer, which tells what went
	// wrong (audit verify's report of a broken chain): --json then prints no error document after it.
	answered bool
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &cliError{code: exitUsage, label: "USAGE", err: fmt.Errorf(format, args...)}
}

// report prints err as `statectl: <CODE>: <message>` and returns the exit code.
func (a *app) report(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	if errors.Is(err, errOutputGone) {
		return exitOutputGone
	}
	code, label, msg := classify(err)
	// A connection error names the --nats-url it was given, login included: not on stderr, which
	// a CI job's log keeps.
	msg = natsurl.RedactIn(msg, a.g.natsURL)
	fmt.Fprintf(a.stderr, "statectl: %s: %s\n", label, msg)
	var ce *cliError
	if a.g.json && !(errors.As(err, &ce) && ce.answered) {
		// With --json a failure is a JSON document on stdout too, as a success is: a script reads
		// the code (and a CONFLICT's current_revision) without parsing the line on stderr.
		_ = writeJSON(a.stdout, wire.Result{OK: false, Error: jsonError(err, label, msg)})
	}
	return code
}

// jsonError is the error object --json prints for err, which classify labelled label with the
// message msg: for a server's answer, its current_revision goes in the field, not in the message.
func jsonError(err error, label, msg string) *wire.Error {
	out := &wire.Error{Code: wire.Code(label), Message: msg}
	var we *wire.Error
	if errors.As(err, &we) && string(we.Code) == label && we.CurrentRevision != nil {
		out.CurrentRevision = we.CurrentRevision
		out.Message = strings.TrimSuffix(msg, fmt.Sprintf(" (current_revision %d)", *we.CurrentRevision))
	}
	return out
}

// classify maps an error to its exit code, its label (the SPEC code for a server's answer) and its
// message.
func classify(err error) (code int, label, msg string) {
	msg = err.Error()
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.code, ce.label, msg
	}
	var we *wire.Error
	if errors.As(err, &we) {
		if err == error(we) {
			msg = we.Message
			if we.CurrentRevision != nil {
				msg = fmt.Sprintf("%s (current_revision %d)", we.Message, *we.CurrentRevision)
			}
		}
		return exitFailure, string(we.Code), msg
	}
	var oe *net.OpError
	switch {
	case errors.Is(err, bench.ErrConnect):
		return exitConnection, "CONNECTION", msg
	case errors.Is(err, context.Canceled):
		return exitInterrupted, "INTERRUPTED", msg
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return exitConnection, "TIMEOUT", msg
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrReconnectBufExceeded), errors.As(err, &oe):
		// ErrReconnectBufExceeded: a request made while the connection reconnects (Connect turns
		// the reconnect buffer off, so nothing waits to be sent later).
		return exitConnection, "CONNECTION", msg
	}
	return exitFailure, "ERROR", strings.TrimPrefix(msg, "statectl: ")
}
