package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// The tests of this file run stated against an external NATS cluster of real nats-servers (SPEC
// section 9: "With an external NATS cluster the operator installs the same permissions"), with the
// authorization `stated nats-permissions` prints installed on every node, stated connected to one
// node and its clients to others, and then take nodes and routes away.

const (
	clusterStatedUser     = "stated"
	clusterStatedPassword = "stated-cluster-pw"
)

// startAuthCluster starts a NATS cluster (o) whose nodes carry the authorization `stated
// nats-permissions` prints for principals, plus stated's own unrestricted user, which the operator adds.
func startAuthCluster(t *testing.T, o natstest.ClusterOptions) *natstest.Cluster {
	t.Helper()
	probe := e2e.NewStated(t, e2e.Config{Principals: principals})
	out, err := runStated(t, "nats-permissions", "--config", probe.ConfigPath)
	if err != nil {
		t.Fatalf("nats-permissions: %v\n%s", err, out)
	}
	const users = "  users = [\n"
	if !strings.Contains(out, users) {
		t.Fatalf("nats-permissions output has no users list:\n%s", out)
	}
	conf := strings.Replace(out, users, users+fmt.Sprintf("    { user: %q, password: %q }\n", clusterStatedUser, clusterStatedPassword), 1)
	o.ConfigFile = filepath.Join(t.TempDir(), "nats-cluster.conf")
	if err := os.WriteFile(o.ConfigFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return natstest.StartCluster(t, o)
}

// startStatedOn starts stated with [nats] url = urls and its own login; extra is appended to its
// configuration.
func startStatedOn(t *testing.T, urls, extra string) *e2e.Stated {
	t.Helper()
	s := e2e.NewStated(t, e2e.Config{Principals: principals, NATSURL: urls, Extra: extra})
	conf, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	login := fmt.Sprintf("[nats]\nuser = %q\npassword = %q\n", clusterStatedUser, clusterStatedPassword)
	conf = []byte(strings.Replace(string(conf), "[nats]\n", login, 1))
	if err := os.WriteFile(s.ConfigPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()
	return s
}

// clusterClient connects principal to the cluster's nodes, trying them in the order given (and the
// others it learns of after them), and returns its client.
func clusterClient(t *testing.T, c *natstest.Cluster, principal string, nodes ...int) *client.Client {
	t.Helper()
	nc, err := client.Connect(c.URLs(nodes...), principal, nats.UserInfo(principal, password(principal)), nats.DontRandomize(),
		nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.New(nc, principal, client.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// connectedNode is the index of the node nc is connected to.
func connectedNode(t *testing.T, c *natstest.Cluster, nc *nats.Conn) int {
	t.Helper()
	url := nc.ConnectedUrl()
	for i := range c.Len() {
		if c.URL(i) == url {
			return i
		}
	}
	t.Fatalf("connected to %q, not a node of the cluster", url)
	return -1
}

// mirror rebuilds, from a Cache's handlers alone, the entries it holds, and fails the test on an
// update applied twice or out of order.
type mirror struct {
	t       *testing.T
	mu      sync.Mutex
	entries map[string]wire.Entry
	resyncs int
}

func newMirror(t *testing.T) *mirror { return &mirror{t: t, entries: map[string]wire.Entry{}} }

func (m *mirror) handlers() client.Handlers {
	return client.Handlers{
		OnPut: func(e wire.Entry) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if prev, ok := m.entries[e.Key]; ok && prev.Revision >= e.Revision {
				m.t.Errorf("PUT %s at %d applied after %d: doubled or out of order", e.Key, e.Revision, prev.Revision)
			}
			m.entries[e.Key] = e
		},
		OnDelete: func(key string, _ uint64) { m.mu.Lock(); delete(m.entries, key); m.mu.Unlock() },
		OnExpire: func(key string, _ uint64) { m.mu.Lock(); delete(m.entries, key); m.mu.Unlock() },
		OnResync: func(snapshot []wire.Entry, _ uint64) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.resyncs++
			clear(m.entries)
			for _, e := range snapshot {
				m.entries[e.Key] = e
			}
		},
	}
}

// matches fails the test unless the cache and its handlers' mirror both hold exactly the entries the
// store lists (key and revision).
func (m *mirror) matches(ctx context.Context, what string, cache *client.Cache, reader *client.Client, ns, prefix string) {
	m.t.Helper()
	want, err := reader.List(ctx, wire.ListRequest{Namespace: ns, KeyPrefix: prefix, Limit: 256})
	if err != nil {
		m.t.Fatalf("%s: list: %v", what, err)
	}
	got := cache.List()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(got) != len(want.Entries) || len(m.entries) != len(want.Entries) {
		m.t.Fatalf("%s: cache holds %d entries, its handlers %d, the store %d", what, len(got), len(m.entries), len(want.Entries))
	}
	for i, e := range want.Entries {
		if got[i].Key != e.Key || got[i].Revision != e.Revision || m.entries[e.Key].Revision != e.Revision {
			m.t.Fatalf("%s: cache %s@%d, handlers @%d, store %s@%d", what, got[i].Key, got[i].Revision, m.entries[e.Key].Revision, e.Key, e.Revision)
		}
	}
}

// acked records, per key, the last write a writer was told committed, and counts the others.
type acked struct {
	mu      sync.Mutex
	byKey   map[string]wire.Entry
	unknown int // writes whose outcome is unknown (no reply)
	refused int // writes the client says did not happen (UNAVAILABLE, ...)
}

// writeLoop puts keys items/0..items/9 in turn, blind, until stop is closed, and records what it was
// told. It returns when stop is closed.
func writeLoop(ctx context.Context, w *client.Client, ns string, stop <-chan struct{}, a *acked) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("items/%d", i%10)
		rctx, cancel := context.WithTimeout(ctx, w.RequestTimeout())
		e, err := w.Put(rctx, wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1",
			Document: json.RawMessage(fmt.Sprintf(`{"holder":"w%d","claimed_at_ms":%d}`, i, i))})
		cancel()
		a.mu.Lock()
		switch {
		case err == nil:
			a.byKey[key] = e
		case wire.CodeOf(err) != "":
			a.refused++
		default:
			a.unknown++
		}
		a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			select { // the cluster re-forms: do not spin
			case <-time.After(20 * time.Millisecond):
			case <-stop:
				return
			}
		}
	}
}

// settle waits until the writer has a reply again and returns the revision of a write made then: once
// a cache reaches it, the cache has had every change before it.
func settle(ctx context.Context, t *testing.T, w *client.Client, ns string) wire.Entry {
	t.Helper()
	for {
		rctx, cancel := context.WithTimeout(ctx, w.RequestTimeout())
		e, err := w.Put(rctx, wire.PutRequest{Namespace: ns, Key: "items/settle", Schema: "keeppeek.lease.v1",
			Document: json.RawMessage(`{"holder":"settle","claimed_at_ms":1}`)})
		cancel()
		if err == nil {
			return e
		}
		if ctx.Err() != nil {
			t.Fatalf("no write answered once the cluster re-formed: %v", err)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// checkAcked fails the test if a write the writer was told committed is not in the store (at its
// revision or a later one).
func checkAcked(ctx context.Context, t *testing.T, reader *client.Client, ns string, a *acked) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, e := range a.byKey {
		got, err := reader.Get(ctx, ns, key)
		if err != nil || got.Revision < e.Revision {
			t.Fatalf("acknowledged write %s@%d lost: store has %s@%d (%v)", key, e.Revision, got.Key, got.Revision, err)
		}
	}
}

// underWrites opens a Cache of ns's items/ on reader, mirrored by its handlers, starts a writeLoop on
// writer, and returns once the cache has applied 20 revisions; stopWrites ends the loop.
func underWrites(ctx context.Context, t *testing.T, reader, writer *client.Client, ns string) (cache *client.Cache, m *mirror, a *acked, stopWrites func()) {
	t.Helper()
	m = newMirror(t)
	cache, err := reader.NewCache(ctx, client.CacheOptions{Namespace: ns, KeyPrefix: "items/", Handlers: m.handlers(),
		CheckInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	a = &acked{byKey: map[string]wire.Entry{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { writeLoop(ctx, writer, ns, stop, a) })
	var once sync.Once
	stopWrites = func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopWrites)
	if err := cache.WaitForRevision(ctx, 20); err != nil {
		t.Fatal(err)
	}
	return cache, m, a, stopWrites
}

// settledAndWhole waits until the cache has had every write, then fails the test unless it and its
// mirror hold exactly the store's entries and every acknowledged write is there.
func settledAndWhole(ctx context.Context, t *testing.T, what string, cache *client.Cache, m *mirror, writer *client.Client, ns string, a *acked) {
	t.Helper()
	last := settle(ctx, t, writer, ns)
	if err := cache.WaitForRevision(ctx, last.Revision); err != nil {
		t.Fatalf("cache never reached revision %d: %v", last.Revision, err)
	}
	m.matches(ctx, what, cache, writer, ns, "items/")
	checkAcked(ctx, t, writer, ns, a)
	t.Logf("writes: %d acknowledged keys, %d refused, %d unknown; cache resyncs %d", len(a.byKey), a.refused, a.unknown, cache.Resyncs())
}

// A client's node dies under its Cache, while a writer on another node writes on: the client
// reconnects to another node, its Cache resyncs and ends up exactly the store's, every change applied
// once and in order, and no acknowledged write is lost.
func TestE2EClusterClientNodeDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startAuthCluster(t, natstest.ClusterOptions{})
	startStatedOn(t, c.URL(1), "")
	const ns = "service/tx"
	reader := clusterClient(t, c, "coordinator", 0, 2)
	writer := clusterClient(t, c, "ops", 2, 0)
	if got := connectedNode(t, c, reader.Conn()); got != 0 {
		t.Fatalf("reader on node %d, want 0", got)
	}
	cache, m, a, stopWrites := underWrites(ctx, t, reader, writer, ns)
	c.Shutdown(0)
	if err := cache.WaitForRevision(ctx, cache.Revision()+20); err != nil {
		t.Fatal(err)
	}
	stopWrites()
	if got := connectedNode(t, c, reader.Conn()); got == 0 {
		t.Fatalf("reader still on node 0")
	}
	settledAndWhole(ctx, t, "after the reader's node died", cache, m, writer, ns, a)
	if cache.Resyncs() == 0 {
		t.Fatalf("the cache did not resync across its reconnect")
	}
}

// stated's node dies: stated reconnects to another node and serves again; a Cache on a third node
// (whose own connection never dropped) ends up exactly the store's, and no acknowledged write is lost.
func TestE2EClusterStatedNodeDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startAuthCluster(t, natstest.ClusterOptions{})
	s := startStatedOn(t, c.URL(1), "")
	const ns = "service/tx"
	reader := clusterClient(t, c, "coordinator", 0)
	writer := clusterClient(t, c, "ops", 2)
	cache, m, a, stopWrites := underWrites(ctx, t, reader, writer, ns)
	c.Shutdown(1)
	awaitReadyz(t, s, 200, "once stated reconnected to another node")
	last := settle(ctx, t, writer, ns)
	if err := cache.WaitForRevision(ctx, last.Revision+20); err != nil {
		t.Fatal(err)
	}
	stopWrites()
	settledAndWhole(ctx, t, "after stated's node died", cache, m, writer, ns, a)
}

// The route between the reader's node and stated's is cut for a moment, and a write made meanwhile
// (through stated's node) is published while the reader's watch subject has no interest there: its
// update is lost, and neither the reader's connection nor stated's ever dropped. No update follows, so
// no sequence gap ever shows the loss. The Cache's liveness check must find it (SPEC section 7.4: a
// gap means watch again): before, it acknowledged what it had applied, the server took that, and the
// cache showed the old state, and WaitForRevision blocked, until the server closed the watch for
// ACK_TIMEOUT (ack_deadline_ms, 30 s by default; two minutes here).
func TestE2EClusterCacheFindsAnUpdateLostOnACutRoute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startAuthCluster(t, natstest.ClusterOptions{Nodes: 2, LinkedRoute: true})
	startStatedOn(t, c.URL(1), "[bounds]\nack_deadline_ms = 120000\n")
	const ns = "service/tx"
	reader := clusterClient(t, c, "coordinator", 0)
	writer := clusterClient(t, c, "ops", 1)
	m := newMirror(t)
	// The check runs once no ack went out for a whole interval: the second tick after the snapshot,
	// well after the route is back.
	const check = 3 * time.Second
	cache, err := reader.NewCache(ctx, client.CacheOptions{Namespace: ns, KeyPrefix: "items/", WatchID: "cut", Handlers: m.handlers(),
		CheckInterval: check})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	subj := wire.WatchSubject(wire.DefaultPrefix, "coordinator", "cut")
	c.RouteLink().Cut()
	for c.Server(1).GlobalAccount().SubscriptionInterest(subj) {
		if ctx.Err() != nil {
			t.Fatal("stated's node still sees the reader's watch subject after the route was cut")
		}
		time.Sleep(5 * time.Millisecond) // nats-server signals no event for a route's interest going
	}
	e, err := writer.Put(ctx, wire.PutRequest{Namespace: ns, Key: "items/a", Schema: "keeppeek.lease.v1",
		Document: json.RawMessage(`{"holder":"w","claimed_at_ms":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	c.RouteLink().Mend()
	c.WaitFormed()
	wctx, wcancel := context.WithTimeout(ctx, 4*check)
	defer wcancel()
	if err := cache.WaitForRevision(wctx, e.Revision); err != nil {
		t.Fatalf("the cache never learned of the write at revision %d, lost on the cut route (it holds revision %d, %d entries): %v",
			e.Revision, cache.Revision(), len(cache.List()), err)
	}
	m.matches(ctx, "after the route came back", cache, writer, ns, "items/")
}

// A lease held through stated while stated's node dies, a standby campaigning on a third node: the
// lease is either kept (renewed through stated on its new node) or lost with Lost closed, and the two
// are never Held at once; the fencing token keeps a holder that is not Held from writing.
func TestE2EClusterLeaseAcrossStatedNodeDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startAuthCluster(t, natstest.ClusterOptions{})
	startStatedOn(t, c.URL(1), "")
	const ns = "service/tx"
	opts := func(holder string) lease.Options {
		return lease.Options{Namespace: ns, Key: "leases/job", Holder: holder, TTL: 2 * time.Second}
	}
	ca := clusterClient(t, c, "coordinator", 0)
	cb := clusterClient(t, c, "ops", 2)
	la, err := lease.Campaign(ctx, ca, opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(ctx) }()
	var mu sync.Mutex
	var lb *lease.Lease
	campaignDone := make(chan error, 1)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	go func() {
		// As an Elector does: a campaign that failed (a request whose reply was lost with stated's
		// node) campaigns again.
		for {
			l, err := lease.Campaign(bctx, cb, opts("b"))
			if err != nil && bctx.Err() == nil {
				t.Logf("standby b campaigns again after: %v", err)
				select {
				case <-time.After(50 * time.Millisecond):
				case <-bctx.Done():
				}
				continue
			}
			mu.Lock()
			lb = l
			mu.Unlock()
			campaignDone <- err
			return
		}
	}()
	// Both held at once is the one outcome that must never be seen.
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	var overlap bool
	sampler.Go(func() {
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(2 * time.Millisecond):
			}
			mu.Lock()
			b := lb
			mu.Unlock()
			if b != nil && b.Held() && la.Held() {
				mu.Lock()
				overlap = true
				mu.Unlock()
			}
		}
	})
	c.Shutdown(1)
	// Three TTLs: a lease not renewed through stated's new node has been lost by then, and its
	// standby has claimed it.
	select {
	case <-la.Lost():
		t.Logf("holder a lost the lease: %v", la.Err())
		select {
		case err := <-campaignDone:
			if err != nil {
				t.Fatalf("the standby's campaign after the holder lost the lease: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("the standby never claimed the lease its holder lost")
		}
	case <-time.After(6 * time.Second):
		if !la.Held() {
			t.Fatalf("holder a is not Held, yet Lost is open: %v", la.Err())
		}
		t.Logf("holder a kept the lease")
		select {
		case err := <-campaignDone:
			t.Fatalf("the standby's campaign ended while a still holds the lease: %v", err)
		default:
		}
	}
	close(stopSampling)
	sampler.Wait()
	mu.Lock()
	defer mu.Unlock()
	if lb != nil {
		defer func() { _ = lb.Release(ctx) }()
	}
	if overlap {
		t.Fatal("holders a and b were both Held at one moment")
	}
	doc := json.RawMessage(`{"subject_key":"intents/x","state":"active","observed_at_ms":1}`)
	_, err = la.Put(ctx, wire.PutRequest{Key: "status/x", Schema: "keeppeek.observed-status.v1", Document: doc})
	switch {
	case la.Held() && err != nil:
		t.Fatalf("a guarded write of the holder that kept its lease: %v", err)
	case !la.Held() && !errors.Is(err, wire.ErrGuardFailed):
		t.Fatalf("a guarded write of the holder that lost its lease: %v, want GUARD_FAILED", err)
	}
}

// A watch made through one node of a cluster while stated is on another gets the update of a write
// made right after its reply, whichever node the write goes through: the client subscribes to the
// delivery subject before it sends the watch request on the same connection, and nats-server sends a
// subscription's interest to the other nodes before the messages its connection publishes after it,
// so stated's node knows of the subscriber before the watch request reaches stated.
func TestE2EClusterFirstUpdateOfAFreshWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startAuthCluster(t, natstest.ClusterOptions{})
	startStatedOn(t, c.URL(1), "")
	const ns = "service/tx"
	watcher := clusterClient(t, c, "coordinator", 0)
	writers := []*client.Client{watcher, clusterClient(t, c, "ops", 1), clusterClient(t, c, "ops", 2)}
	for i := range 60 {
		id := fmt.Sprintf("fresh-%d", i)
		w, err := watcher.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: ns, KeyPrefix: "fresh/" + id})
		if err != nil {
			t.Fatal(err)
		}
		e, err := writers[i%3].Put(ctx, wire.PutRequest{Namespace: ns, Key: "fresh/" + id, Schema: "keeppeek.lease.v1",
			Document: json.RawMessage(`{"holder":"w","claimed_at_ms":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-w.Messages():
			if m.Kind != wire.UpdatePut || m.WatchSequence != 1 || m.Revision != e.Revision {
				t.Fatalf("watch %s: first message %+v, want the PUT at revision %d", id, m, e.Revision)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("watch %s made on node 0 never got the update of a write through node %d", id, i%3)
		}
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A node restarts and takes connections before its routes are up: a client that reconnects to it
// gets UNAVAILABLE (no responders) for a request no state server received, and only for such a
// request: no write answered UNAVAILABLE is ever found in the store, and every acknowledged one is.
func TestE2EClusterRequestsWhileANodeJoins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startAuthCluster(t, natstest.ClusterOptions{})
	startStatedOn(t, c.URL(1), "")
	const ns = "service/tx"
	reader := clusterClient(t, c, "ops", 2)
	// A client of node 0 alone: it reconnects there, and nowhere else.
	nc, err := client.Connect(c.URL(0), "coordinator", nats.UserInfo("coordinator", password("coordinator")),
		nats.IgnoreDiscoveredServers(), nats.ReconnectWait(time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := client.New(nc, "coordinator", client.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var refused, unknown, done []string
	for round := range 5 {
		c.Shutdown(0)
		c.Start(0)
		for i := 0; ; i++ {
			key := fmt.Sprintf("join/%d-%d", round, i)
			rctx, rcancel := context.WithTimeout(ctx, w.RequestTimeout())
			_, err := w.Put(rctx, wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1",
				Document: json.RawMessage(`{"holder":"w","claimed_at_ms":1}`)})
			rcancel()
			if err == nil {
				done = append(done, key)
				break
			}
			if wire.CodeOf(err) != "" {
				refused = append(refused, key)
			} else {
				unknown = append(unknown, key)
			}
			if ctx.Err() != nil {
				t.Fatalf("no put through the restarted node answered: %v", err)
			}
		}
		c.WaitFormed()
	}
	for _, key := range refused {
		if _, err := reader.Get(ctx, ns, key); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("put of %s was answered with an error code (nothing written), yet get answers %v", key, err)
		}
	}
	for _, key := range done {
		if _, err := reader.Get(ctx, ns, key); err != nil {
			t.Fatalf("acknowledged put of %s: get answers %v", key, err)
		}
	}
	t.Logf("%d refused, %d unknown, %d acknowledged", len(refused), len(unknown), len(done))
}
