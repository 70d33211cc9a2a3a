package natstest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Nodes is the number of nats-servers (default 3). They form a full mesh: every node names every
	// other in its routes.
	Nodes int
	// ConfigFile, when set, is a nats-server configuration file every node loads first (the
	// authorization `stated nats-permissions` prints, say); the cluster's own settings (ports,
	// routes, names) override what it says of them.
	ConfigFile string
	// LinkedRoute, for a cluster of two nodes only, makes node 0 the only one that solicits the route,
	// and through a CutLink (Cluster.RouteLink): a test can cut the route between the two nodes while
	// both keep their clients, and mend it. Node 1 names no route; it takes node 0's.
	LinkedRoute bool

	freePort func(testing.TB) int // FreePort unless a test of this package sets it
}

// Cluster is a cluster of real nats-servers in this process, each on loopback ports of its own that
// it keeps across a Shutdown and Restart of the node, so its clients and the other nodes find it again.
// Every node is shut down at the test's cleanup.
type Cluster struct {
	t     testing.TB
	o     ClusterOptions
	base  *server.Options // from ConfigFile, or empty
	nodes []*clusterNode
	link  *CutLink // the route of a LinkedRoute cluster
}

type clusterNode struct {
	name        string
	clientPort  int
	clusterPort int
	mu          sync.Mutex
	srv         *server.Server // nil while shut down
}

// StartCluster starts the cluster and waits until every node routes messages to every other.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.freePort == nil {
		o.freePort = FreePort
	}
	if o.LinkedRoute && o.Nodes != 2 {
		t.Fatalf("natstest: a LinkedRoute cluster has two nodes, not %d", o.Nodes)
	}
	c := &Cluster{t: t, o: o, base: &server.Options{}}
	if o.ConfigFile != "" {
		base, err := server.ProcessConfigFile(o.ConfigFile)
		if err != nil {
			t.Fatalf("natstest: cluster configuration %s: %v", o.ConfigFile, err)
		}
		c.base = base
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Shutdown(i)
		}
	})
	// The ports FreePort chose were free a moment before the nodes bind them, and another process (a
	// test package running beside this one, or any outgoing connection, whose local port comes from
	// the same range) can take one meanwhile: a first start that fails on a port in use shuts the
	// nodes it started down and starts them all again on new ports (the routes name them), a few
	// times at most. A Restart keeps a node's ports: its clients and the other nodes reconnect to them.
	for attempt := 1; ; attempt++ {
		c.nodes = nil
		for i := range o.Nodes {
			c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("node-%d", i), clientPort: o.freePort(t), clusterPort: o.freePort(t)})
		}
		if o.LinkedRoute {
			c.link = NewCutLink(t, fmt.Sprintf("127.0.0.1:%d", c.nodes[1].clusterPort))
		}
		var err error
		for i := range c.nodes {
			if err = c.launch(i); err != nil {
				break
			}
		}
		if err == nil {
			break
		}
		for i := range c.nodes {
			c.Shutdown(i)
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatalf("natstest: %v", err)
		}
		t.Logf("natstest: %v; new ports", err)
	}
	c.WaitFormed()
	return c
}

// errPortTaken marks a node that could not listen on one of its ports.
var errPortTaken = errors.New("a port is taken")

// options are node i's server options.
func (c *Cluster) options(i int) *server.Options {
	n := c.nodes[i]
	o := c.base.Clone()
	o.ServerName = n.name
	o.Host, o.Port = "127.0.0.1", n.clientPort
	o.NoLog, o.NoSigs = true, true
	o.MaxPayload = 1 << 20
	o.NoFastProducerStall = true // as `stated nats-permissions` tells an operator to set
	o.Cluster.Name = "keeppeek-test"
	o.Cluster.Host, o.Cluster.Port = "127.0.0.1", n.clusterPort
	o.Routes = nil
	switch {
	case c.o.LinkedRoute && i == 0:
		o.Routes = []*url.URL{{Scheme: "nats", Host: strings.TrimPrefix(c.link.URL(), "nats://")}}
	case c.o.LinkedRoute:
	default:
		for j, m := range c.nodes {
			if j != i {
				o.Routes = append(o.Routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", m.clusterPort)})
			}
		}
	}
	return o
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	if err := c.launch(i); err != nil {
		c.t.Fatalf("natstest: %v", err)
	}
}

// launch starts node i, unless it runs, and waits (at most 10 s) until it takes connections; a port
// it cannot listen on is an error that wraps errPortTaken.
func (c *Cluster) launch(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		return nil
	}
	s, err := server.NewServer(c.options(i))
	if err != nil {
		return fmt.Errorf("cluster %s: %w", n.name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", n.clientPort)
	if err := natsserver.Launch(s, nil, addr, 10*time.Second); err != nil {
		if strings.Contains(err.Error(), "listening on") {
			return fmt.Errorf("cluster %s (client port %d, cluster port %d): %w: %w", n.name, n.clientPort, n.clusterPort, err, errPortTaken)
		}
		return fmt.Errorf("cluster %s: %w", n.name, err)
	}
	n.srv = s
	return nil
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].clientPort) }

// URLs is the comma-separated list of the client URLs of nodes (every node when none is named), in
// that order, as nats.Connect and stated's [nats] url take it.
func (c *Cluster) URLs(nodes ...int) string {
	if len(nodes) == 0 {
		for i := range c.nodes {
			nodes = append(nodes, i)
		}
	}
	urls := make([]string, len(nodes))
	for k, i := range nodes {
		urls[k] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// Server is node i's nats-server, nil while it is shut down.
func (c *Cluster) Server(i int) *server.Server {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Shutdown stops node i (every connection to it drops, its routes too) and waits until it is down.
func (c *Cluster) Shutdown(i int) {
	n := c.nodes[i]
	n.mu.Lock()
	s := n.srv
	n.srv = nil
	n.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again on its ports and waits until the cluster is formed again.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.start(i)
	c.WaitFormed()
}

// Start starts node i again on its ports and returns once it takes client connections, which may be
// before its routes are up: a client may then reach it and no other node, as when a node of a real
// cluster restarts.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.start(i)
}

// RouteLink is the link of a LinkedRoute cluster's route (nil otherwise): Cut it to part the two nodes,
// Mend it to let node 0 route to node 1 again (WaitFormed then waits for it).
func (c *Cluster) RouteLink() *CutLink { return c.link }

// WaitFormed waits (at most 20 s, or the test fails) until a message published on any running node
// reaches a subscriber on any other running node.
func (c *Cluster) WaitFormed() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var running []int
	for i := range c.nodes {
		if c.Server(i) != nil {
			running = append(running, i)
		}
	}
	conns := map[int]*nats.Conn{}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for _, i := range running {
		nc, err := nats.Connect(c.URL(i), c.probeOptions()...)
		if err != nil {
			c.t.Fatalf("natstest: cluster: connect to node %d: %v", i, err)
		}
		conns[i] = nc
	}
	for _, to := range running {
		subj := nats.NewInbox()
		sub, err := conns[to].SubscribeSync(subj)
		if err != nil {
			c.t.Fatalf("natstest: cluster: subscribe on node %d: %v", to, err)
		}
		if err := conns[to].Flush(); err != nil {
			c.t.Fatalf("natstest: cluster: flush on node %d: %v", to, err)
		}
		for _, from := range running {
			if from == to {
				continue
			}
			for {
				_ = conns[from].Publish(subj, []byte(conns[from].ConnectedServerName()))
				_ = conns[from].Flush()
				m, err := sub.NextMsg(50 * time.Millisecond)
				if err == nil && string(m.Data) == c.nodes[from].name {
					break
				}
				if ctx.Err() != nil {
					c.t.Fatalf("natstest: cluster: node %d does not route to node %d within 20 s", from, to)
				}
			}
		}
		_ = sub.Unsubscribe()
	}
}

// probeOptions are the options of WaitFormed's own connections: a configuration file's first user,
// when it has users, whose permissions must then allow subscribing to and publishing on _INBOX.>.
func (c *Cluster) probeOptions() []nats.Option {
	if len(c.base.Users) > 0 {
		u := c.base.Users[0]
		return []nats.Option{nats.UserInfo(u.Username, u.Password)}
	}
	return nil
}
