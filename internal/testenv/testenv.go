// Package testenv starts a complete in-process state service for tests: an embedded NATS server on a
// free loopback port (no authentication), the store engine on bbolt in a temporary directory, and the
// state server over them. Tests of store/client and the SDK use it; end-to-end tests of the stated
// binary do not.
package testenv

import (
	"context"
	"crypto/rand"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// Options configure an Env.
type Options struct {
	// Principals the server answers. Default: admin "coordinator", users "alice" and "bob".
	Principals []policy.Principal
	// Bounds, when set, replace the default bounds.
	Bounds *wire.Bounds
	// DataDir holds state-store.db. Default: t.TempDir().
	DataDir string
	// WatchSweep, when set, has the server look this often for watches whose subscriber is gone
	// (server.Options.Interest, answered by the embedded NATS server), and gives the Env Metrics.
	WatchSweep time.Duration
	// IdleWatch, when set, is the server's bound on idle watches (server.Options.IdleWatch), and
	// gives the Env Metrics.
	IdleWatch time.Duration
	// Metrics gives the Env Metrics (as WatchSweep and IdleWatch do).
	Metrics bool
	// Logger, when set, is the server's (server.Options.Logger).
	Logger *slog.Logger
	// RequestTimeout, when set, is the server's (server.Options.RequestTimeout).
	RequestTimeout time.Duration
	// NATSMaxPending, when set, is the embedded NATS server's natsserver.Options.MaxPending.
	NATSMaxPending int64
	// NATSUsers, when set, turn the embedded NATS server's authorization on: only these users, each
	// with its permissions, and the server's own user can connect; Connect authenticates a principal
	// as the user of the same name.
	NATSUsers []natsserver.User
	// ClockOffset, when set, runs the store on a wall clock that reads this much later (earlier, when
	// negative) than the test's (store.Options.Clock): a state server on a host whose clock differs
	// from its clients' (created_at_ms, updated_at_ms and expires_at_ms are then the skewed clock's;
	// it runs at the same rate, so TTLs last as long). The state server's own stamps (a worker's
	// first_seen_ms) stay on the test's clock.
	ClockOffset time.Duration
}

// Env is a running state service.
type Env struct {
	URL    string
	Store  *store.Store
	Server *server.Server
	NATS   *natsserver.Server
	// Metrics are the server's and the store's metrics (the store's Observer), on a registry of their
	// own; nil unless Metrics, WatchSweep or IdleWatch is set.
	Metrics *server.Metrics
	conn    *nats.Conn
	users   map[string]string // user name -> password, when NATSUsers was set
}

// DefaultPrincipals are the principals of an Env started without any.
var DefaultPrincipals = []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "alice"}, {ID: "bob"}}

// Start starts the service and registers its shutdown with t.Cleanup.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	if o.Principals == nil {
		o.Principals = DefaultPrincipals
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	nopts := natsserver.Options{MaxPending: o.NATSMaxPending}
	var users map[string]string
	var auth []nats.Option
	if len(o.NATSUsers) > 0 {
		self := natsserver.User{Name: "_testenv", Password: rand.Text()}
		nopts.Users = append([]natsserver.User{self}, o.NATSUsers...)
		users = map[string]string{}
		for _, u := range o.NATSUsers {
			users[u.Name] = u.Password
		}
		auth = append(auth, nats.UserInfo(self.Name, self.Password))
	}
	ns := natstest.Start(t, nopts) // shut down at cleanup, after the server (registered later)
	sopts := server.Options{Principals: o.Principals, RequestTimeout: o.RequestTimeout, IdleWatch: o.IdleWatch, Logger: o.Logger}
	if o.Metrics || o.WatchSweep > 0 || o.IdleWatch > 0 {
		sopts.Metrics = server.NewMetrics(prometheus.NewRegistry())
	}
	if o.WatchSweep > 0 {
		sopts.Interest = ns.HasSubscriber
		sopts.SweepInterval = o.WatchSweep
	}
	opts := store.DefaultOptions()
	if sopts.Metrics != nil {
		opts.Observer = sopts.Metrics
	}
	if o.Bounds != nil {
		opts.Bounds = *o.Bounds
	}
	if offset := o.ClockOffset; offset != 0 {
		opts.Clock = func() time.Time { return time.Now().Add(offset) }
	}
	st, err := store.Open(filepath.Join(o.DataDir, "state-store.db"), opts)
	if err != nil {
		t.Fatalf("testenv: store: %v", err)
	}
	nc, err := nats.Connect(ns.ClientURL(), append(auth, nats.Name("stated"))...)
	if err != nil {
		st.Close()
		t.Fatalf("testenv: connect: %v", err)
	}
	srv, err := server.New(st, nc, sopts)
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		nc.Close()
		st.Close()
		t.Fatalf("testenv: server: %v", err)
	}
	e := &Env{URL: ns.ClientURL(), Store: st, Server: srv, NATS: ns, Metrics: sopts.Metrics, conn: nc, users: users}
	t.Cleanup(e.stop)
	return e
}

func (e *Env) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Server.Stop(ctx)
	e.conn.Close()
}

// Connect opens a connection for principal with the inbox prefix its permissions require, closed at
// cleanup.
func (e *Env) Connect(t testing.TB, principal string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.CustomInboxPrefix(wire.InboxPrefix(principal)), nats.Name(principal),
		nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	if password, ok := e.users[principal]; ok {
		opts = append(opts, nats.UserInfo(principal, password))
	}
	nc, err := nats.Connect(e.URL, opts...)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", principal, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
