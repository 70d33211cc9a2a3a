// Package splittest runs a state server on one node of a two-node NATS cluster whose route a test can
// part and mend, for tests of what a client on the other node sees. A client on the far node keeps a
// healthy connection through a partition (its pings to its own node succeed) and reaches nothing of
// the state server: requests fail at once with no responders (a cut route) or time out (a frozen
// one), and no status change tells it.
package splittest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// Nodes of the cluster.
const (
	Far  = 0 // the side of the route without the state server
	Near = 1 // the state server's node
)

// Options configure Start.
type Options struct {
	// Principals are the state server's principals; the first is used to tell when the far node
	// forgot the state server. Required.
	Principals []policy.Principal
	// Bounds, when set, replace the store's default bounds.
	Bounds *wire.Bounds
}

// Env is a state server on the near node of a two-node cluster with a route that parts.
type Env struct {
	Cluster *natstest.Cluster
	Store   *store.Store
	o       Options
}

// Start starts the cluster and the state server on its near node; both stop at the test's end.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	if len(o.Principals) == 0 {
		t.Fatal("splittest: no principals")
	}
	cl := natstest.StartCluster(t, natstest.ClusterOptions{Nodes: 2, LinkedRoute: true})
	so := store.DefaultOptions()
	if o.Bounds != nil {
		so.Bounds = *o.Bounds
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), so)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(cl.URL(Near), nats.Name("stated"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	srv, err := server.New(st, nc, server.Options{Principals: o.Principals, PeerCheckInterval: -1})
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		nc.Close()
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
		nc.Close()
	})
	e := &Env{Cluster: cl, Store: st, o: o}
	e.awaitFarInterest(t)
	return e
}

// awaitFarInterest waits until the far node knows of the state server's subscriptions, which cross
// the route a moment after Start: a request from the far node before that finds no responder.
func (e *Env) awaitFarInterest(t testing.TB) {
	t.Helper()
	subj := wire.StateSubject(wire.DefaultPrefix, e.o.Principals[0].ID, wire.OpInfo)
	natstest.Poll(t, 30*time.Second, "the far node learns of the state server", func() (bool, string) {
		return e.Cluster.Server(Far).GlobalAccount().SubscriptionInterest(subj), "interest in " + subj
	})
}

// URL is node's client URL.
func (e *Env) URL(node int) string { return e.Cluster.URL(node) }

// Dial connects to a NATS URL as a principal (store/client.Connect, which this package cannot name:
// the client's own tests use it).
type Dial func(url, principal string, opts ...nats.Option) (*nats.Conn, error)

// Connect dials principal to node only (no other node learnt of), reconnecting quickly, and closes
// the connection at the test's end.
func (e *Env) Connect(t testing.TB, node int, principal string, dial Dial) *nats.Conn {
	t.Helper()
	nc, err := dial(e.URL(node), principal, nats.IgnoreDiscoveredServers(), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Cut cuts the route and waits until the far node knows of no state server any more.
func (e *Env) Cut(t testing.TB) {
	t.Helper()
	e.Cluster.RouteLink().Cut()
	subj := wire.StateSubject(wire.DefaultPrefix, e.o.Principals[0].ID, wire.OpInfo)
	natstest.Poll(t, 30*time.Second, "the far node forgets the state server", func() (bool, string) {
		// nats-server signals no event for a route's interest going
		return !e.Cluster.Server(Far).GlobalAccount().SubscriptionInterest(subj), "interest in " + subj
	})
}

// Freeze freezes the route: bytes are dropped both ways, every connection stays up, and the far node
// still believes in the state server's subscriptions (requests time out instead of failing at once).
func (e *Env) Freeze(testing.TB) { e.Cluster.RouteLink().Freeze() }

// Mend mends the route (after a cut or a freeze) and waits until the cluster routes again. A frozen
// route dropped bytes of its stream, so it is connected afresh: its connections are cut while still
// frozen, and only then is the link thawed. Thawed first, the old connections would pass what the
// nodes send until the cut (a worker's heartbeat, say), and the cut would then part the nodes again
// until the route reconnects (nats-server's route reconnect delay, 1 s): a state server would take
// that one message and then hear nothing, longer than a worker entry's 1 s TTL.
func (e *Env) Mend(t testing.TB) {
	t.Helper()
	link := e.Cluster.RouteLink()
	link.Cut() // no-op after a cut; drops the frozen connections before any byte passes again
	link.Thaw()
	link.Mend()
	e.Cluster.WaitFormed()
}

// Partition is one way a route parts.
type Partition struct {
	Name  string
	Apart func(*Env, testing.TB)
}

// Partitions are the two ways a route parts: cut (interest gone at once) and frozen (silence).
var Partitions = []Partition{{"cut", (*Env).Cut}, {"frozen", (*Env).Freeze}}

// RetryLog is a slog.Handler that signals, without blocking, the records a client Cache logs when it
// gives up its watch to snapshot again (on Resyncs) and when a re-watch attempt failed and it will try
// again (on Retries). Make it with NewRetryLog.
type RetryLog struct{ Resyncs, Retries chan struct{} }

// NewRetryLog makes a RetryLog whose channels hold up to 64 signals each not yet received.
func NewRetryLog() RetryLog {
	return RetryLog{Resyncs: make(chan struct{}, 64), Retries: make(chan struct{}, 64)}
}

// Enabled is true: every record is looked at.
func (h RetryLog) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns h.
func (h RetryLog) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h.
func (h RetryLog) WithGroup(string) slog.Handler { return h }

// Handle signals a resync's and a failed re-watch's records.
func (h RetryLog) Handle(_ context.Context, r slog.Record) error {
	var ch chan struct{}
	switch r.Message {
	case "state cache resyncing":
		ch = h.Resyncs
	case "state cache watch failed; retrying":
		ch = h.Retries
	default:
		return nil
	}
	select {
	case ch <- struct{}{}:
	default:
	}
	return nil
}

// Side is a node of the cluster, named.
type Side struct {
	Name string
	Node int
}

// Sides are both nodes: a test that places a party (the media server, say) on either runs once per
// side.
var Sides = []Side{{"far", Far}, {"near", Near}}
