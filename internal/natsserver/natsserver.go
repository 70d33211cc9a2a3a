// Package natsserver runs an embedded nats-server in-process, for stated's default mode and for tests
// that need a real NATS server without a separate binary.
package natsserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// User is a NATS user of the embedded server: a password user (Password may be plain text or a bcrypt
// hash starting with "$2") or, when Nkey is set, an nkey user.
type User struct {
	Name        string
	Password    string
	Nkey        string
	Permissions *server.Permissions
}

// MaxPayload is the largest message the embedded server takes (nats-server's max_payload): 1 MiB,
// its default.
const MaxPayload = 1 << 20

// Options configure the embedded server.
type Options struct {
	// Listen is host:port; port 0 picks a free port. Default "127.0.0.1:4222".
	Listen string
	// Users, when not empty, turns authorization on: only these users can connect. When empty the
	// server takes connections without credentials.
	Users []User
	// ServerName names the server. Default "stated".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections. Default 10 s.
	ReadyTimeout time.Duration
	// MaxPending is how many bytes may wait to be written to one connection before the server cuts it
	// as a slow consumer. Default nats-server's (64 MiB).
	MaxPending int64
	// MaxSubs bounds the subscriptions of one connection; past it the server refuses a subscription
	// (the client gets an asynchronous error, and keeps its connection). 0: no bound (nats-server's
	// default). The embedded server lives in the process that embeds it: without a bound, one
	// connection could subscribe until that process runs out of memory (some 640 bytes per
	// subscription of 30 bytes sent).
	MaxSubs int
	// TLS, when set, is the server's TLS configuration: every client must then connect over TLS
	// (nats.go upgrades a nats:// URL to TLS when the server requires it), except in-process ones
	// (nats.InProcessServer), and must present a client certificate when its ClientAuth is
	// tls.RequireAndVerifyClientCert. nil: no TLS.
	TLS *tls.Config
	// Logger, when set, is told when the server cannot accept client connections (its listener's
	// Accept fails: the process is out of file descriptors, say). Meanwhile clients cannot connect
	// (their connections wait, then time out), so the first failure is logged at once, and further
	// ones at most once per AcceptLogInterval, with how many there were. The server's other reports
	// are dropped. nil: everything is dropped.
	Logger *slog.Logger
}

// tlsTimeout bounds a client's TLS handshake with a server that serves TLS.
const tlsTimeout = 5 * time.Second

// AcceptLogInterval is the least time between two logs of Options.Logger about failed accepts: the
// server tries again after 10 ms, doubling up to 1 s, for as long as the cause lasts.
const AcceptLogInterval = 10 * time.Second

// Server is a running embedded server.
type Server struct {
	*server.Server
	opts *server.Options
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	opts, err := serverOptions(o)
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts.Clone())
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if err := Launch(ns, o.Logger, o.Listen, timeout); err != nil {
		return nil, err
	}
	// Keep the port a RANDOM_PORT start picked: a reload must not ask for another.
	if addr, ok := ns.Addr().(*net.TCPAddr); ok {
		opts.Port = addr.Port
	}
	return &Server{Server: ns, opts: opts}, nil
}

// Launch starts ns and waits, at most timeout, until it accepts connections; a start that fails is
// shut down. nats-server reports a port it cannot listen on only to its logger, and then never
// becomes ready: Launch gives ns a logger that catches that report, so that a taken port fails the
// start at once, the error saying why ("Error listening on port: ..."). It passes failed accepts on
// to logger (see Options.Logger; nil: nobody), naming listen, and drops the server's other reports.
func Launch(ns *server.Server, logger *slog.Logger, listen string, timeout time.Duration) error {
	fatal := make(chan string, 1)
	ns.SetLogger(&serverLogger{fatal: fatal, logger: logger, listen: listen}, false, false)
	go ns.Start()
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			ns.Shutdown()
			ns.WaitForShutdown()
			return fmt.Errorf("natsserver: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			ns.WaitForShutdown()
			return fmt.Errorf("natsserver: not ready for connections within %s", timeout)
		}
	}
	return nil
}

// serverLogger is the embedded server's logger: it keeps the first fatal report, which nats-server
// makes instead of exiting when a logger is set, passes failed accepts on to logger (see
// Options.Logger), and drops everything else, as NoLog would.
type serverLogger struct {
	fatal  chan string
	logger *slog.Logger
	listen string

	mu     sync.Mutex
	last   time.Time // when a failed accept was last logged
	unsaid int       // failed accepts since, not logged
}

func (l *serverLogger) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

func (l *serverLogger) Errorf(format string, v ...any) {
	// nats-server: "Temporary Client Accept Error(%v), sleeping %dms" (a net.Error it retries
	// after a pause) or "Client Accept error: %v".
	if l.logger == nil || !strings.Contains(strings.ToLower(format), "accept error") {
		return
	}
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < AcceptLogInterval {
		l.unsaid++
		l.mu.Unlock()
		return
	}
	repeated := l.unsaid
	l.last, l.unsaid = now, 0
	l.mu.Unlock()
	args := []any{"listen", l.listen, "err", msg}
	if repeated > 0 {
		args = append(args, "failed_since_last_log", repeated)
	}
	if strings.Contains(msg, "too many open files") {
		args = append(args, "hint", "the process is out of file descriptors: raise its open-file limit (RLIMIT_NOFILE, "+
			"systemd's LimitNOFILE=), or have fewer clients; it accepts them again as connections close")
	}
	l.logger.Error("the embedded NATS server cannot accept client connections: new clients cannot connect (their "+
		"connections wait, then time out) until it can", args...)
}

func (*serverLogger) Noticef(string, ...any) {}
func (*serverLogger) Warnf(string, ...any)   {}
func (*serverLogger) Debugf(string, ...any)  {}
func (*serverLogger) Tracef(string, ...any)  {}

func serverOptions(o Options) (*server.Options, error) {
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("natsserver: listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("natsserver: listen %q: bad port", listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := o.ServerName
	if name == "" {
		name = "stated"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: MaxPayload,
		// The server keeps the details of recently closed connections only for its monitoring
		// endpoint, which the embedded server does not serve; its default of 10,000 would grow with
		// every worker restart.
		MaxClosedClients: 1,
		// No system account: nothing here asks for server events or statistics.
		NoSystemAccount: true,
		// A connection that stops reading must never slow down the others. By default nats-server
		// makes a publisher wait (up to milliseconds per message) while a subscriber's backlog is over
		// three quarters of MaxPending; stated publishes every watch update and every reply on one
		// connection, so one frozen watcher would hold up every writer's commit. Instead, messages to
		// such a subscriber are dropped: its watch sees a sequence gap and resyncs, or closes with
		// OVERFLOW when it acknowledges nothing.
		NoFastProducerStall: true,
		MaxPending:          o.MaxPending,
		MaxSubs:             o.MaxSubs,
	}
	if o.TLS != nil {
		opts.TLSConfig = o.TLS
		opts.TLSVerify = o.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		// nats-server's default (2 s) is short for a handshake on a busy 2-core machine; a client
		// that has not finished it by then is cut.
		opts.TLSTimeout = tlsTimeout.Seconds()
	}
	applyUsers(opts, o.Users)
	return opts, nil
}

func applyUsers(opts *server.Options, users []User) {
	opts.Users, opts.Nkeys = nil, nil
	for _, u := range users {
		if u.Nkey != "" {
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u.Nkey, Permissions: u.Permissions})
			continue
		}
		opts.Users = append(opts.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: u.Permissions})
	}
}

// Reload replaces the users of the running server: unchanged users keep their connections, a user whose
// permissions alone changed keeps them with the new permissions, and a user whose password (or nkey)
// changed is disconnected, as a removed user is: a session opened with a credential the operator
// replaced does not outlive it, and the client logs in again with the new one.
func (s *Server) Reload(users []User) error {
	if !s.Running() {
		return errors.New("natsserver: reload: the server is not running")
	}
	opts := s.opts.Clone()
	applyUsers(opts, users)
	if err := s.ReloadOptions(opts); err != nil {
		return err
	}
	s.opts = opts
	return nil
}

// HasSubscriber reports whether any client of the global account, where the users live, subscribes to
// subject (a literal subject; wildcard and queue subscriptions that match it count).
func (s *Server) HasSubscriber(subject string) bool {
	return s.GlobalAccount().SubscriptionInterest(subject)
}
