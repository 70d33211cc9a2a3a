package stated

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natsurl"
	"github.com/keeppeek/coordination/internal/settingsfile"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// Version is stated's version as the build records it.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "0.1.0-dev"
}

// serverVersion is Version as info reports it: without a leading "v".
func serverVersion() string { return strings.TrimPrefix(Version(), "v") }

const usage = `stated: the keeppeek coordination plane's state server.

Usage:
  stated [--config FILE] [--data-dir DIR] [--nats-url URL]   serve (no flags: embedded defaults)
  stated nats-permissions --config FILE                        print the NATS authorization for an external server
  stated restore [--config FILE] [--data-dir DIR] BACKUP       restore a backup (server stopped)
  stated version (or --version)                                print the version
  stated help (or --help)                                      print this

The configuration file's keys are SPEC section 14's. On an external NATS server or cluster
([nats] url, or --nats-url), [nats] user and password, or creds (a credentials file), are stated's
login, and for TLS: tls_ca = "FILE" (PEM CA bundle that verifies the server; default: the system's
roots), tls_cert = "FILE" and tls_key = "FILE" (stated's client certificate and key, PEM, both or
neither, for a server that verifies clients); tls_* with the embedded server are refused. The
embedded server serves TLS with listen_tls_cert = "FILE" and listen_tls_key = "FILE" (its
certificate and key, PEM, both or neither): every client must then use TLS; listen_tls_client_ca =
"FILE" (PEM CA bundle) has it take only clients with a certificate one of those CAs signed. The
files are checked at start and read again at every reconnect (tls_*) or client's handshake
(listen_tls_*).
`

// Main runs the stated command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "nats-permissions":
			return natsPermissions(args[1:], stdout, stderr)
		case "restore":
			return restore(args[1:], stdout, stderr)
		case "version":
			fmt.Fprintln(stdout, Version())
			return 0
		case "help", "-h", "--help":
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	cfg, err := parseServeFlags("stated", args, stderr)
	if code, done := flagsDone(err, stdout); done {
		return code
	}
	if err := cfg.checkEmbeddedPayload(); err != nil {
		if cfg.Path() != "" {
			err = fmt.Errorf("config %s: %w", cfg.Path(), err)
		}
		fmt.Fprintf(stderr, "stated: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := Serve(ctx, cfg, hup, stderr); err != nil {
		fmt.Fprintf(stderr, "stated: %v\n", err)
		return 1
	}
	return 0
}

// errVersion is parseServeFlags' answer to --version: the version is printed instead.
var errVersion = errors.New("version asked for")

// flagsDone says what a command does after parseServeFlags returned err: nothing more (done) when it
// failed, exiting with code 2 (a usage error, already reported on stderr), or when --help or
// --version asked for the usage or the version, which it prints on stdout, exiting with code 0.
func flagsDone(err error, stdout io.Writer) (code int, done bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0, true
	case errors.Is(err, errVersion):
		fmt.Fprintln(stdout, Version())
		return 0, true
	}
	return 2, true
}

// parseServeFlags reads --config, --data-dir and --nats-url into a Config. It reports a usage error on
// stderr; --help and --version are returned as flag.ErrHelp and errVersion (see flagsDone), before the
// configuration is read.
func parseServeFlags(name string, args []string, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // a usage error prints the usage below; --help prints it on stdout
	configPath := fs.String("config", "", "TOML configuration file (SPEC section 14)")
	dataDir := fs.String("data-dir", "", "directory of state-store.db (overrides data_dir)")
	natsURL := fs.String("nats-url", "", "use this external NATS server or cluster instead of the embedded one")
	version := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, usage)
		}
		return nil, err
	}
	if *version {
		return nil, errVersion
	}
	if fs.NArg() > 0 && name == "stated" {
		fmt.Fprintf(stderr, "stated: unexpected argument %q\n", fs.Arg(0))
		return nil, errors.New("usage")
	}
	cfg := DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = LoadConfig(*configPath); err != nil {
			fmt.Fprintf(stderr, "stated: %v\n", err)
			return nil, err
		}
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
		cfg.dataDirFlag = *dataDir
	}
	if *natsURL != "" {
		cfg.NATS.URL, cfg.NATS.Listen = *natsURL, ""
		cfg.natsURLFlag = *natsURL
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "stated: %v\n", err)
		return nil, err
	}
	if err := cfg.checkTLSMode(); err != nil {
		if cfg.Path() != "" {
			err = fmt.Errorf("config %s: %w", cfg.Path(), err)
		}
		fmt.Fprintf(stderr, "stated: %v\n", err)
		return nil, err
	}
	cfg.restArgs = fs.Args()
	return cfg, nil
}

func natsPermissions(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseServeFlags("stated nats-permissions", args, stderr)
	if code, done := flagsDone(err, stdout); done {
		return code
	}
	if cfg.Path() == "" || len(cfg.Principals) == 0 {
		fmt.Fprintln(stderr, "stated nats-permissions: --config FILE with [[principals]] is required")
		return 2
	}
	fmt.Fprint(stdout, PermissionsConfig(cfg))
	return 0
}

func restore(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseServeFlags("stated restore", args, stderr)
	if code, done := flagsDone(err, stdout); done {
		return code
	}
	if len(cfg.restArgs) != 1 {
		fmt.Fprintln(stderr, "stated restore: name exactly one backup file")
		return 2
	}
	f, err := os.Open(cfg.restArgs[0])
	if err != nil {
		fmt.Fprintf(stderr, "stated restore: %v\n", err)
		return 1
	}
	defer f.Close()
	// A directory opens, and was copied until its read failed, the error naming the restore's own copy
	// in the data directory ("write .../.restore-N.db: is a directory") rather than the path given. (A
	// pipe is read as a file is: `stated restore /dev/stdin < FILE` works.)
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		fmt.Fprintf(stderr, "stated restore: %s is a directory: name the backup file that statectl backup wrote\n", cfg.restArgs[0])
		return 1
	}
	opts, err := storeOptions(cfg, nil)
	if err != nil {
		fmt.Fprintf(stderr, "stated restore: %v\n", err)
		return 1
	}
	if err := cfg.EnsureDataDir(); err != nil {
		fmt.Fprintf(stderr, "stated restore: data_dir %s: %v\n", cfg.DataDir, err)
		return 1
	}
	epoch, err := store.Restore(cfg.DatabasePath(), f, opts)
	if err != nil {
		// store.Restore's errors begin "restore: ", as this line does already.
		fmt.Fprintf(stderr, "stated restore: %s\n", strings.TrimPrefix(err.Error(), "restore: "))
		return 1
	}
	fmt.Fprintf(stdout, "restored %s into %s: new epoch %s\n", cfg.restArgs[0], cfg.DatabasePath(), epoch)
	return 0
}

func storeOptions(cfg *Config, logger *slog.Logger) (store.Options, error) {
	opts := store.DefaultOptions()
	b, err := cfg.BoundsValue()
	if err != nil {
		return opts, err
	}
	opts.Bounds = b
	opts.Version = Version()
	opts.Logger = logger
	if cfg.Path() != "" && len(cfg.StateStore.Settings) > 0 {
		settings, err := store.TOMLSettingsNamespaces(cfg.Path())
		if err != nil {
			return opts, err
		}
		opts.Settings = settings
	}
	return opts, nil
}

// Serve runs stated until ctx ends (SIGTERM), reloading principals on every value of hup (SIGHUP).
func Serve(ctx context.Context, cfg *Config, hup <-chan os.Signal, logOut io.Writer) error {
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// TLS files that cannot be used fail the start before anything is served, naming key and file.
	tlsOpt, err := cfg.natsTLS(func(err error) {
		logger.Error("NATS TLS files cannot be used: stated's NATS reconnects fail until they can (no request reaches stated meanwhile)", "err", err)
	})
	if err != nil {
		return err
	}
	listenTLS, err := cfg.listenTLS(func(err error) {
		logger.Error("the embedded NATS server's TLS files cannot be used: new clients cannot connect until they can "+
			"(connected ones stay)", "err", err)
	})
	if err != nil {
		return err
	}
	// The HTTP address is taken first: one in use fails the start before the store is opened and
	// NATS takes clients, rather than after stated served them (and committed their writes).
	ln, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("http listen %s: %w", cfg.HTTPListen, err)
	}
	// HTTP is served from here on, through the start: /healthz answers 200 while the process runs
	// (SPEC section 14), and /readyz 503 "starting" until stated serves. Opening a large store (every
	// page checked, every document validated) or reaching an external NATS server takes a while, and
	// an address that takes connections but answers nothing looks, to a liveness probe, like a process
	// that hangs.
	reg := prometheus.NewRegistry()
	metrics := server.NewMetrics(reg)
	var ready readiness
	reg.MustRegister(ready.gauge(), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "state_build_info", Help: "1, labelled with stated's version (the version info reports) and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": serverVersion(), "goversion": runtime.Version()},
	}, func() float64 { return 1 }))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", ready.serveHTTP)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{DisableCompression: true}))
	// The HTTP server's own errors (a connection it cannot accept: out of file descriptors) go to
	// stated's log as its other lines do.
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.With("http", cfg.HTTPListen).Handler(), slog.LevelWarn)}
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		_ = httpSrv.Serve(ln)
	}()
	defer func() {
		// Every return: an early one (a failed start) closes the HTTP server here; after a stop,
		// whatever Shutdown left open once its deadline passed.
		_ = httpSrv.Close()
		<-httpDone
	}()
	if err := cfg.EnsureDataDir(); err != nil {
		return fmt.Errorf("data_dir %s: %w", cfg.DataDir, err)
	}
	if cfg.Path() != "" {
		// A stated killed while it wrote a settings-backed namespace left its temporary file, a copy
		// of the configuration, beside the configuration file.
		removed, err := settingsfile.RemoveStaleTemps(cfg.Path())
		for _, p := range removed {
			logger.Info("removed a stale temporary file of an interrupted configuration write", "file", p)
		}
		if err != nil {
			logger.Warn("stale temporary files of interrupted configuration writes not removed", "err", err)
		}
	}
	opts, err := storeOptions(cfg, logger)
	if err != nil {
		return err
	}
	opts.Observer = metrics
	st, err := store.Open(cfg.DatabasePath(), opts)
	if err != nil {
		return err
	}
	if reason := st.Unavailable(); reason != nil {
		logger.Error("THE STATE STORE IS NOT SERVED: every operation answers UNAVAILABLE", "reason", reason)
	}
	// runCtx ends when stated stops: at SIGTERM, or when the store stops serving (see below).
	runCtx, stopRunning := context.WithCancel(ctx)
	defer stopRunning()
	for _, w := range cfg.Ineffective() {
		logger.Warn("configuration: " + w)
	}
	if w := cfg.watchIdleWarning(); w != "" {
		logger.Warn("configuration: " + w)
	}
	if w := cfg.cleartextWarning(); w != "" {
		logger.Warn("configuration: " + w)
	}

	internalPassword := randomPassword()
	var ns *natsserver.Server
	url := cfg.NATS.URL
	connURL := url
	// stated reconnects for ever, through refused logins too: nats.go gives up for good on a second
	// refusal of the same login (an external server reloaded without stated's own user, which the
	// operator adds to `stated nats-permissions`' output by hand), and stated would then run deaf for
	// ever, its process up, every client's request unanswered. It reconnects once the server takes
	// its login again; /readyz says 503 meanwhile.
	connOpts := []nats.Option{nats.Name("stated"), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.IgnoreAuthErrorAbort()}
	// fits tells whether the NATS server stated is connected to carries its bounds (set once the
	// server is made): checked at start, and again at every reconnect, which may land on a cluster
	// node with a smaller max_payload.
	var fits atomic.Pointer[func() error]
	connOpts = append(connOpts, natsLogging(logger, &fits)...)
	if url == "" {
		var users []natsserver.User
		if len(cfg.Principals) > 0 {
			users = natsUsers(cfg, internalPassword)
			connOpts = append(connOpts, nats.UserInfo(internalUser, internalPassword))
		}
		nsOpts := embeddedNATSOptions(cfg, users)
		nsOpts.Logger = logger // a client connection it cannot accept (out of file descriptors) is logged
		nsOpts.TLS = listenTLS
		ns, err = natsserver.Start(nsOpts)
		if err != nil {
			st.Close()
			return fmt.Errorf("nats.listen %s: %w", cfg.NATS.Listen, err)
		}
		// The URL clients use: tls:// when the server serves TLS. stated's own connection to its
		// embedded server is an in-memory pipe, not a loopback socket, and speaks no TLS: its URL
		// names no TLS.
		url = ns.ClientURL()
		connURL = "nats://" + ns.Addr().String()
		connOpts = append(connOpts, nats.InProcessServer(ns.Server))
	} else {
		// An external server (a cluster node) that stops answering without closing the connection (its
		// host powered off, a partition) is noticed by pings only: as often as clients ping theirs (5 s,
		// not nats.go's 2 minutes), so that stated gives it up within about 15 s and reconnects to
		// another node, instead of serving nobody for minutes.
		connOpts = append(connOpts, nats.PingInterval(client.PingInterval))
		if cfg.NATS.User != "" {
			connOpts = append(connOpts, nats.UserInfo(cfg.NATS.User, cfg.NATS.Password))
		}
		if cfg.NATS.Creds != "" {
			connOpts = append(connOpts, nats.UserCredentials(cfg.NATS.Creds))
		}
		if tlsOpt != nil {
			connOpts = append(connOpts, tlsOpt)
		}
	}
	shutdownNATS := func() {
		if ns != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}
	nc, err := nats.Connect(connURL, connOpts...)
	if err != nil {
		st.Close()
		shutdownNATS()
		if hint := cfg.tlsFiles().Hint(err); hint != "" && ns == nil {
			return fmt.Errorf("connect to NATS at %s: %w (%s)", natsurl.Redact(url), err, hint)
		}
		return fmt.Errorf("connect to NATS at %s: %w", natsurl.Redact(url), err)
	}
	sopts := server.Options{Prefix: cfg.SubjectPrefix, Principals: cfg.PolicyPrincipals(), BackupDir: cfg.BackupDir(),
		Version: serverVersion(), Logger: logger, Metrics: metrics, SweepInterval: time.Duration(cfg.NATS.WatchSweepMs) * time.Millisecond,
		IdleWatch: cfg.watchIdle()}
	if ns != nil {
		// Only the embedded server can say whether a watch's subscriber is still there.
		sopts.Interest = ns.HasSubscriber
		// Nobody else can serve stated's subjects on its embedded server (no principal may subscribe
		// to them): Start's look for another server is enough, and an idle stated stays still.
		sopts.PeerCheckInterval = -1
	}
	srv, err := server.New(st, nc, sopts)
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		nc.Close()
		st.Close()
		shutdownNATS()
		return err
	}
	if err := metrics.RegisterStore(reg, st, "bbolt"); err != nil {
		logger.Error("metrics", "err", err)
	}
	fit := func() error { return srv.CheckBounds(st.Bounds()) }
	fits.Store(&fit)
	ready.started(st, nc.Status, fit, srv.Conflict)

	if len(cfg.Principals) == 0 {
		logger.Warn("NO PRINCIPALS CONFIGURED: running one admin principal \"dev\" that connects WITHOUT credentials. " +
			"Fine on a laptop; configure [[principals]] before anyone else can reach this NATS server.")
	}
	logger.Info("stated ready", "nats", natsurl.Redact(url), "http", "http://"+ln.Addr().String(), "data", cfg.DatabasePath(),
		"principals", len(cfg.PolicyPrincipals()), "epoch", st.Info().Epoch, "version", Version())

	activity := srv.Activity
	if ns != nil {
		// Clients coming and going change what the embedded server holds: trim after that too.
		activity = func() uint64 { return srv.Activity() + uint64(ns.NumClients())<<32 }
	}
	trim := func() {
		if ns != nil {
			// nats-server keeps, per publishing connection, the subscriptions its recent subjects
			// matched until that connection next publishes. stated's connection published to the
			// clients that left, so it publishes once (to an inbox nobody has), or their connections'
			// state would stay reachable while stated is idle.
			if nc.Publish(nats.NewInbox(), nil) == nil {
				_ = nc.FlushTimeout(time.Second)
			}
		}
		st.TrimMemory()
		// Two collections: the first moves what sync.Pools hold to their victim caches, the second
		// (FreeOSMemory's) frees it, and then the freed pages go back.
		runtime.GC()
		debug.FreeOSMemory()
	}
	trimmed := make(chan struct{})
	go func() {
		defer close(trimmed)
		trimWhenIdle(runCtx, 500*time.Millisecond, activity, trim)
	}()
	var stoppedErr error
	for {
		select {
		case <-hup:
			reload(cfg, ns, srv, st, internalPassword, logger)
			continue
		case <-st.Halted():
			// A store served at start that stopped serving (a commit of unknown outcome) is served
			// again only by a restart: stated exits for it, non-zero, so that its supervisor restarts
			// it. A store that did not load never gets here: a restart would not load it either.
			stoppedErr = st.Unavailable()
			logger.Error("THE STATE STORE STOPPED SERVING: stated exits (status 1) so that a restart reloads the database; "+
				"restart it if no supervisor does", "reason", stoppedErr)
		case <-ctx.Done():
		}
		break
	}
	stopRunning()
	ready.stopping.Store(true)
	<-trimmed // a trim under way ends before the server and its connection stop
	logger.Info("stopping: finishing in-flight commits and closing watches with SHUTDOWN")
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = srv.Stop(stopCtx)
	nc.Close()
	_ = httpSrv.Shutdown(stopCtx)
	shutdownNATS()
	if err != nil {
		logger.Error("stop", "err", err)
	}
	logger.Info("stopped")
	if stoppedErr != nil {
		return fmt.Errorf("the state store stopped serving, a restart reloads it: %w", stoppedErr)
	}
	return nil
}

// embeddedNATSOptions are the options of the embedded NATS server for cfg, with users (none: no
// authorization, the dev principal).
func embeddedNATSOptions(cfg *Config, users []natsserver.User) natsserver.Options {
	b, _ := cfg.BoundsValue() // valid: Validate checked them
	return natsserver.Options{Listen: cfg.NATS.Listen, Users: users, MaxSubs: maxSubsPerConnection(b)}
}

// maxSubsPerConnection bounds the subscriptions of one connection to the embedded server, which runs
// in stated's process: without a bound, any principal could have stated hold hundreds of MiB for a
// few MiB of SUB lines on one connection. A client subscribes once per watch (a principal holds at
// most max_watches_per_principal, and a re-watch may briefly hold two) besides its inbox and the
// capability subjects; the bound leaves room for all of them on one connection.
func maxSubsPerConnection(b wire.Bounds) int {
	return int(min(2*b.MaxWatchesPerPrincipal, 1<<30) + 256)
}

// readiness answers /readyz: 200 while stated serves the store; 503 with the reason while it does
// not: while it starts, when the store never loaded, stopped after a storage error or was closed,
// while its NATS connection is down (no request can reach it: an external server went away, or
// refuses stated's login, and stated is reconnecting), and from the moment stated begins to stop,
// when it takes no more requests.
type readiness struct {
	stopping atomic.Bool
	serving  atomic.Pointer[servingParts] // nil while stated starts
}

// servingParts are what a started stated serves with.
type servingParts struct {
	st   *store.Store
	nats func() nats.Status // the status of stated's NATS connection
	fits func() error       // whether the NATS server it is connected to carries the bounds
	peer func() error       // another server serving the same subjects (server.Server.Conflict)
}

// started records that stated serves st over a NATS connection whose status status reports, to a
// NATS server that carries its bounds unless fits says otherwise, alone on its subjects unless peer
// says otherwise.
func (r *readiness) started(st *store.Store, status func() nats.Status, fits, peer func() error) {
	r.serving.Store(&servingParts{st: st, nats: status, fits: fits, peer: peer})
}

// gauge is state_ready: 1 while /readyz answers 200, 0 while it answers 503, read at each scrape,
// so that an alert on the metrics alone sees a stated that serves nothing (its store not served, its
// NATS connection down, another stated on its subjects, ...); /readyz says why.
func (r *readiness) gauge() prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "state_ready",
		Help: "1 while stated serves the store (/readyz answers 200); 0 while it does not (/readyz answers 503 with the reason): starting, store not served or closed, NATS connection down, a NATS server that cannot carry the bounds, another stated serving the same subjects, stopping.",
	}, func() float64 {
		if r.reason() == "" {
			return 1
		}
		return 0
	})
}

func (r *readiness) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	if reason := r.reason(); reason != "" {
		http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// reason says why stated is not ready, or "" when it is.
func (r *readiness) reason() string {
	if r.stopping.Load() {
		return "stated is stopping"
	}
	p := r.serving.Load()
	if p == nil {
		return "stated is starting"
	}
	if reason := p.st.Unavailable(); reason != nil {
		return "the state store is not served: " + reason.Error()
	}
	if p.st.Serving() != nil {
		return "the state store is closed"
	}
	if status := p.nats(); status != nats.CONNECTED {
		return fmt.Sprintf("stated's NATS connection is %s: no request reaches it", strings.ToLower(status.String()))
	}
	if err := p.fits(); err != nil {
		// stated reconnected to a server (a cluster node) with a smaller max_payload than the one it
		// started on: a reply or update over it is never delivered, though its write committed.
		return "the NATS server stated is connected to cannot carry its bounds: " + err.Error()
	}
	if err := p.peer(); err != nil {
		// Requests are split between the two servers' stores: neither can be trusted alone.
		return err.Error() + ": requests are split between two stores; stop one of them"
	}
	return ""
}

// natsLogging logs what happens to stated's NATS connection: lost, back (and, once fits is set, on a
// server that cannot carry the bounds), closed, and the errors the server reports (a refused login, a
// permission violation, a slow consumer). An error that repeats (a login refused at every reconnect
// attempt) is logged once until another comes or the connection is back.
func natsLogging(logger *slog.Logger, fits *atomic.Pointer[func() error]) []nats.Option {
	var mu sync.Mutex
	last := ""
	fresh := func(err error) bool {
		mu.Lock()
		defer mu.Unlock()
		if err.Error() == last {
			return false
		}
		last = err.Error()
		return true
	}
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // stated closes it: it is stopping
			}
			if err == nil {
				err = errors.New("disconnected")
			}
			logger.Warn("NATS connection lost: reconnecting; no request reaches stated meanwhile", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			mu.Lock()
			last = ""
			mu.Unlock()
			logger.Info("NATS connection back", "server", nc.ConnectedUrlRedacted())
			if f := fits.Load(); f != nil {
				if err := (*f)(); err != nil {
					logger.Error("the NATS server stated reconnected to cannot carry its bounds: replies and updates over its max_payload are lost, though their writes commit; /readyz says 503 until stated is on a server that can",
						"server", nc.ConnectedUrlRedacted(), "err", err)
				}
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if err == nil || !fresh(err) {
				return
			}
			if sub != nil {
				logger.Error("NATS", "subject", sub.Subject, "err", err)
				return
			}
			logger.Error("NATS", "err", err)
		}),
	}
}

// reload rereads the configuration file and applies its settings-backed namespaces' entries (the
// store serves what changed in their sections: see store.ReloadSettings) and its principals: NATS
// users and permissions on the embedded server, and the server's principals (closing watches that
// lost permission). A file LoadConfig refuses, whose bounds the NATS server could not carry (the next
// start would fail on them) or the store already holds more than (the next start would not serve it:
// store.LowerQuotas, which applies lowered quota bounds to writes at once), or whose settings
// sections the store refuses (an entry that fails its schema, a bound passed) is refused whole:
// nothing is applied.
func reload(cfg *Config, ns *natsserver.Server, srv *server.Server, st *store.Store, internalPassword string, logger *slog.Logger) {
	if cfg.Path() == "" {
		logger.Info("SIGHUP: no configuration file to reload")
		return
	}
	next, err := LoadConfig(cfg.Path())
	if err != nil {
		logger.Error("SIGHUP: configuration not reloaded", "err", err)
		return
	}
	// The file as the next start with the same command line would read it: --nats-url replaces its
	// [nats] url or listen.
	mode := *next
	if cfg.natsURLFlag != "" {
		mode.NATS.URL, mode.NATS.Listen = cfg.natsURLFlag, ""
	}
	if err := mode.checkTLSMode(); err != nil {
		// A file on which stated could not start again is refused, as a malformed one is.
		logger.Error("SIGHUP: configuration not reloaded", "err", fmt.Errorf("config %s: %w", cfg.Path(), err))
		return
	}
	if (len(next.Principals) == 0) != (len(cfg.Principals) == 0) {
		logger.Error("SIGHUP: switching between the dev principal and configured principals needs a restart")
		return
	}
	cb, _ := cfg.BoundsValue()    // the bounds in force: valid, stated started on them
	nb, err := next.BoundsValue() // valid: LoadConfig checked them
	if err == nil {
		// A file on which stated could not start again is refused, as a malformed one is: the
		// bounds wait for the next restart, which would fail on them.
		err = srv.CheckBounds(nb)
	}
	if err != nil {
		logger.Error("SIGHUP: configuration not reloaded", "err", fmt.Errorf("config %s: bounds: %w", cfg.Path(), err))
		return
	}
	// Only principals are reloaded. The NATS permissions are made for the prefix the server serves:
	// made for a prefix changed in the file, they would lock every principal out of the running
	// server's subjects.
	if next.SubjectPrefix != cfg.SubjectPrefix {
		logger.Warn("SIGHUP: subject_prefix changed in the file; it takes effect at the next restart",
			"serving", cfg.SubjectPrefix, "file", next.SubjectPrefix)
		next.SubjectPrefix = cfg.SubjectPrefix
	}
	if changed := changedBounds(cb, nb); len(changed) > 0 {
		logger.Warn("SIGHUP: bounds changed in the file, in effect at the next restart (a lowered max_document_bytes, " +
			"max_entries_per_namespace, max_namespaces or max_total_value_bytes applies to writes at once): " + strings.Join(changed, ", "))
	}
	// A key the command line overrides is not promised for the next restart: one with the same
	// command line keeps the flag's value.
	var waiting, overridden []string
	for _, k := range cfg.file.changedOnRestart(next.file) {
		if f := cfg.overriddenBy(k); f != "" {
			overridden = append(overridden, k+" ("+f+")")
		} else {
			waiting = append(waiting, k)
		}
	}
	if len(waiting) > 0 {
		logger.Warn("SIGHUP: changed in the file, in effect at the next restart: " + strings.Join(waiting, ", "))
	}
	if len(overridden) > 0 {
		logger.Warn("SIGHUP: changed in the file, but overridden on the command line (a restart with the same flags keeps them): " +
			strings.Join(overridden, ", "))
	}
	// A key that will have no effect at the next restart either (nats.user with the embedded server)
	// is named as at start: "in effect at the next restart" alone would promise it.
	for _, w := range mode.Ineffective() {
		logger.Warn("SIGHUP: configuration: " + w)
	}
	// TLS files that cannot be used are named now rather than at the next start, which would fail on
	// them. The principals are reloaded all the same: a revocation must not wait for a certificate.
	if _, err := mode.natsTLS(nil); err != nil {
		logger.Error("SIGHUP: the NATS TLS files cannot be used: the next start would fail on them", "err", err)
	}
	if _, err := mode.listenTLS(nil); err != nil {
		logger.Error("SIGHUP: the embedded NATS server's TLS files cannot be used: new clients cannot connect, "+
			"and the next start would fail on them", "err", err)
	}
	if err := checkNewSettings(cfg, next, st); err != nil {
		// The sections added wait for the next start, which would not serve the store with them.
		logger.Error("SIGHUP: configuration not reloaded", "err", fmt.Errorf("config %s: %w: the next start would not serve the store (every operation UNAVAILABLE)", cfg.Path(), err))
		return
	}
	// Nor would the next start serve a store that holds more than the bounds allow: lowered quota
	// bounds apply to writes from now on, so that the store never grows past them; a store that
	// already holds more is refused.
	if err := st.LowerQuotas(nb); err != nil {
		logger.Error("SIGHUP: configuration not reloaded", "err", fmt.Errorf("config %s: bounds: %w: the next start would not serve the store "+
			"(every operation UNAVAILABLE); remove entries first, or keep the bound", cfg.Path(), err))
		return
	}
	if !reloadSettings(cfg, st, logger) {
		return
	}
	if ns != nil && len(next.Principals) > 0 {
		if err := ns.Reload(natsUsers(next, internalPassword)); err != nil {
			logger.Error("SIGHUP: NATS users not reloaded", "err", err)
			return
		}
	}
	if err := srv.SetPrincipals(next.PolicyPrincipals()); err != nil {
		logger.Error("SIGHUP: principals not reloaded", "err", err)
		return
	}
	cfg.Principals = next.Principals
	logger.Info("SIGHUP: principals reloaded", "principals", len(next.PolicyPrincipals()))
}

// checkNewSettings checks the settings-backed namespaces next declares and cfg (the file at start) did
// not, which wait for the next start, as that start would (store.CheckSettings): a section whose entry
// the store would refuse, or a namespace holding database entries, would have it serve nothing.
func checkNewSettings(cfg, next *Config, st *store.Store) error {
	var added []string
	for ns := range next.StateStore.Settings {
		if _, ok := cfg.StateStore.Settings[ns]; !ok {
			added = append(added, ns)
		}
	}
	if len(added) == 0 {
		return nil
	}
	slices.Sort(added)
	backends, err := store.TOMLSettingsNamespaces(next.Path())
	if err != nil {
		return err
	}
	for _, ns := range added {
		if err := st.CheckSettings(ns, backends[ns]); err != nil {
			return err
		}
	}
	return nil
}

// settingsReloadTimeout bounds a SIGHUP's wait for the store to reload the settings files.
const settingsReloadTimeout = 30 * time.Second

// reloadSettings has the store serve what changed in the sections of the settings-backed namespaces it
// serves (those of the file at start; a namespace added or removed since waits for a restart, and
// reload says so) and logs each change. It reports false, having logged why, when the store refused
// the files: the SIGHUP is then refused whole. A store that is not served has nothing to reload.
func reloadSettings(cfg *Config, st *store.Store, logger *slog.Logger) bool {
	if len(cfg.StateStore.Settings) == 0 {
		return true
	}
	if err := st.Serving(); err != nil {
		logger.Warn("SIGHUP: settings not reloaded: the state store is not served", "err", err)
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), settingsReloadTimeout)
	defer cancel()
	changes, err := st.ReloadSettings(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Queued in the store, it may still be applied: the principals wait for the next SIGHUP.
		logger.Error("SIGHUP: the settings reload did not finish in time (the store may still apply it); principals not reloaded",
			"timeout", settingsReloadTimeout)
		return false
	}
	if err != nil {
		logger.Error("SIGHUP: configuration not reloaded", "err", fmt.Errorf("config %s: settings: %w", cfg.Path(), err))
		return false
	}
	for _, c := range changes {
		logger.Info("SIGHUP: settings entry changed in the file", "namespace", c.Namespace, "key", c.Key,
			"kind", string(c.Kind), "revision", c.Revision)
	}
	logger.Info("SIGHUP: settings reloaded", "changes", len(changes))
	return true
}

// trimWhenIdle calls trim, which returns freed memory to the operating system, once activity has not
// changed for a whole period after it last did (a burst of requests, clients coming or going): the Go
// runtime gives memory back only gradually, and an idle daemon should not keep the resident size of
// its busiest moment. It trims once per quiet spell.
func trimWhenIdle(ctx context.Context, period time.Duration, activity func() uint64, trim func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	last, trimmed := activity(), true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := activity()
		switch {
		case now != last:
			trimmed = false
		case !trimmed:
			trim()
			trimmed = true
		}
		last = now
	}
}

func randomPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
