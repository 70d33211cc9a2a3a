package client

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// These tests drive the long-lived objects of the package (a Cache, raw Watches, the Client's
// bookkeeping) through hundreds of the disruptions a worker sees in months of running (its connection
// cut by the NATS server, its watch closed OVERFLOW, ACK_TIMEOUT or SHUTDOWN, the state server
// restarted) and check that nothing grows with the number of cycles: goroutines, subscriptions on the
// connection, the server's live watches, the client's in-flight watch marks; that handlers run once per
// event; and that the object still works after the last cycle.

// longRunRequestTimeout is the clients' request timeout.
const longRunRequestTimeout = 300 * time.Millisecond

// longRunCycles is the number of disruptions each test drives an object through.
const longRunCycles = 200

// eventually polls cond (state that no event announces: goroutine counts, subscription counts) until
// it holds, or fails the test after the test timeout.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Poll(t, testTimeout, what, cond)
}

// noMoreGoroutinesThan waits until at most n goroutines run.
func noMoreGoroutinesThan(t *testing.T, what string, n int) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		g := runtime.NumGoroutine()
		return g <= n, fmt.Sprintf("%d goroutines, want at most %d", g, n)
	})
}

// startWithBaseline starts a model server and a long-run client of it (with request timeout timeout),
// and returns them with the test's context and the baseline backToBaseline checks against: the
// goroutines running and the client's subscriptions once its reply subscription is made.
func startWithBaseline(t *testing.T, timeout time.Duration) (m *modelServer, c *Client, ctx context.Context, goroutines, subs int) {
	t.Helper()
	m = startModelServer(t)
	c = longRunClient(t, m, timeout)
	ctx = ctxT(t)
	if _, err := c.Info(ctx); err != nil { // the connection's reply subscription is made now
		t.Fatal(err)
	}
	runtime.GC()
	return m, c, ctx, runtime.NumGoroutine(), c.Conn().NumSubscriptions()
}

// backToBaseline waits until c's connection holds subs subscriptions, the store watches of alice's
// are down to watches and at most goroutines+2 goroutines run, and then checks that no watch id of c
// is marked in flight: what a client leaves behind when, at the end of a test's cycles, it is back
// where it started.
func backToBaseline(t *testing.T, m *modelServer, c *Client, subs, watches, goroutines int, when string) {
	t.Helper()
	eventually(t, "subscriptions "+when, func() (bool, string) {
		n := c.Conn().NumSubscriptions()
		return n == subs, fmt.Sprintf("%d subscriptions (baseline %d)", n, subs)
	})
	eventually(t, "live watches "+when, func() (bool, string) {
		n := m.liveWatchesOf(alice.ID)
		return n == watches, fmt.Sprintf("%d live watches %v", n, m.store().LiveWatches())
	})
	if n := watchMarks(c); n != 0 {
		t.Errorf("%s: %d watch ids still marked in flight", when, n)
	}
	noMoreGoroutinesThan(t, "goroutines "+when, goroutines+2)
}

// watchMarks is how many watch ids have a watch request marked in flight on c.
func watchMarks(c *Client) int {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	return len(c.watchBusy)
}

// liveWatchesOf counts the server's live watches of principal.
func (m *modelServer) liveWatchesOf(principal string) int {
	st := m.store()
	if st == nil {
		return -1
	}
	n := 0
	for _, ref := range st.LiveWatches() {
		if ref.Principal == principal {
			n++
		}
	}
	return n
}

// longRunClient connects alice the way production does (client.Connect: no reconnect buffer) with a
// quick reconnect, and the request timeout: a request sent as the connection is cut is never
// answered, and costs that long.
func longRunClient(t *testing.T, m *modelServer, timeout time.Duration) *Client {
	t.Helper()
	nc, err := Connect(m.url(), alice.ID, nats.ReconnectWait(5*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(nc, alice.ID, WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A cache that lives through hundreds of disconnects, server-side closes (OVERFLOW, ACK_TIMEOUT) and
// state server restarts (SHUTDOWN) holds one subscription, one live watch and a fixed number of
// goroutines at the end as after its first resync; OnResync is called once per snapshot installed,
// OnPut at most once per put, and a put after the last cycle is seen once.
func TestCacheCyclesLeaveNothingBehind(t *testing.T) {
	m := startModelServer(t)
	// Nothing here waits for a request lost to a cut but the cache, which retries: a longer timeout
	// keeps a loaded machine's slow replies from counting as losses.
	c := longRunClient(t, m, 2*time.Second)
	writer := longRunClient(t, m, 2*time.Second)
	ctx := ctxT(t)

	var mu sync.Mutex
	resyncs, puts := 0, map[string]int{} // puts: OnPut calls per key@revision
	const keys = 32
	resynced := make(chan struct{}, 1)
	k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice", KeyPrefix: "lr/", WatchID: "longrun",
		CheckInterval: 50 * time.Millisecond, ResyncBackoff: 5 * time.Millisecond,
		Handlers: Handlers{
			OnPut: func(e wire.Entry) {
				mu.Lock()
				puts[fmt.Sprintf("%s@%d", e.Key, e.Revision)]++
				mu.Unlock()
			},
			OnResync: func([]wire.Entry, uint64) {
				mu.Lock()
				resyncs++
				mu.Unlock()
				select {
				case resynced <- struct{}{}:
				default:
				}
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := k.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	<-resynced

	put := func(key string) (rev uint64) {
		t.Helper()
		for {
			e, err := writer.Put(ctx, preference("user/alice", key, "grid"))
			if err == nil {
				if err := k.WaitForRevision(ctx, e.Revision); err != nil {
					t.Fatalf("wait for %s: %v", key, err)
				}
				return e.Revision
			}
			// UNAVAILABLE (reconnecting, or the store restarting) or no answer: try again; its outcome
			// does not matter here.
			if code := wire.CodeOf(err); code != "" && code != wire.CodeUnavailable {
				t.Fatalf("put %s: %v", key, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond): // the store or the connection is coming back
			}
		}
	}
	// awaitResync waits for a snapshot installed after the disruption.
	awaitResync := func(what string) {
		t.Helper()
		select {
		case <-resynced:
		case <-ctx.Done():
			t.Fatalf("cycle %s: no resync", what)
		}
	}
	cycle := func(i int) {
		t.Helper()
		for len(resynced) > 0 {
			<-resynced
		}
		switch i % 4 {
		case 0:
			if !m.disconnect(c.Conn()) {
				t.Fatalf("cycle %d: disconnect", i)
			}
		case 1:
			if !m.closeWatch(alice.ID, "longrun", wire.CloseOverflow) {
				t.Fatalf("cycle %d: no live watch to close", i)
			}
		case 2:
			if !m.closeWatch(alice.ID, "longrun", wire.CloseAckTimeout) {
				t.Fatalf("cycle %d: no live watch to close", i)
			}
		case 3:
			if i%20 == 3 {
				m.restart(false, func() {})
			} else if !m.disconnect(c.Conn()) {
				t.Fatalf("cycle %d: disconnect", i)
			}
		}
		awaitResync(fmt.Sprint(i))
		put(fmt.Sprintf("lr/%d", i%keys)) // a snapshot holds at most 64 entries (modelBounds)
	}

	// The baseline is taken after a few cycles, with every lazily started piece running.
	for i := range 8 {
		cycle(i)
	}
	eventually(t, "live watches", func() (bool, string) {
		n := m.liveWatchesOf(alice.ID)
		return n == 1, fmt.Sprintf("%d live watches", n)
	})
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	subs := c.Conn().NumSubscriptions()
	t.Logf("baseline: %d goroutines, %d subscriptions", goroutines, subs)

	for i := 8; i < longRunCycles; i++ {
		cycle(i)
	}

	// The object still works: a put is seen once.
	last := fmt.Sprintf("lr/last@%d", put("lr/last"))
	mu.Lock()
	for put, n := range puts {
		if n > 1 {
			t.Errorf("OnPut called %d times for %s", n, put)
		}
	}
	if puts[last] != 1 {
		t.Errorf("OnPut called %d times for the put after the cycles, want 1", puts[last])
	}
	gotResyncs := resyncs
	mu.Unlock()
	if want := int(k.Resyncs()) + 1; gotResyncs != want {
		t.Errorf("OnResync called %d times, Resyncs()+1 = %d", gotResyncs, want)
	}
	// One resync per disruption: none missed, none doubled (a tenth more allows for a status change
	// that a loaded machine delivers after the re-watch it caused).
	if r := k.Resyncs(); r < longRunCycles || r > longRunCycles+longRunCycles/10 {
		t.Errorf("Resyncs() = %d after %d disruptions", r, longRunCycles)
	}
	if !k.Following() {
		t.Error("the cache is not following after the cycles")
	}

	backToBaseline(t, m, c, subs, 1, goroutines, "after the cycles")
	k.mu.RLock()
	entries := len(k.entries)
	k.mu.RUnlock()
	if want := keys + 1; entries != want {
		t.Errorf("the cache holds %d entries, want %d", entries, want)
	}
}

// Raw watches started and stopped hundreds of times, a third of them given up before their reply
// and a third closed by the server first, leave no subscription, mark, live watch or goroutine behind.
func TestWatchCyclesLeaveNothingBehind(t *testing.T) {
	// Requests of one try each: a timeout of 2 s keeps a loaded machine's slow replies from failing
	// the test (the tries after a disconnect bound themselves).
	m, c, ctx, goroutines, subs := startWithBaseline(t, 2*time.Second)

	for i := range longRunCycles {
		id := fmt.Sprintf("w%d", i%3)
		switch i % 3 {
		case 0: // given up before its reply: the request is followed to its end and reaped
			gctx, cancel := context.WithCancel(ctx)
			go cancel()
			w, err := c.Watch(gctx, wire.WatchRequest{WatchID: id, Namespace: "user/alice", KeyPrefix: "x/"})
			if err == nil {
				if err := w.Stop(ctx); err != nil {
					t.Fatalf("cycle %d: stop: %v", i, err)
				}
			}
			// Its reap is done before the next disconnect: a watch request whose reply a cut
			// connection lost leaves its registration to the server's sweep, by design.
			eventually(t, "marks", func() (bool, string) {
				n := watchMarks(c)
				return n == 0, fmt.Sprintf("%d watch ids marked in flight", n)
			})

		case 1: // closed by the server, then stopped
			w, err := c.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: "user/alice", KeyPrefix: "x/"})
			if err != nil {
				t.Fatalf("cycle %d: watch: %v", i, err)
			}
			if !m.closeWatch(alice.ID, id, wire.CloseAckTimeout) {
				t.Fatalf("cycle %d: no live watch to close", i)
			}
			for range w.Messages() {
			}
			if err := w.Stop(ctx); err != nil {
				t.Fatalf("cycle %d: stop: %v", i, err)
			}
		case 2: // a disconnect while it runs, then stopped
			w, err := c.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: "user/alice", KeyPrefix: "x/"})
			if err != nil {
				t.Fatalf("cycle %d: watch: %v", i, err)
			}
			reconnected := c.Conn().StatusChanged(nats.CONNECTED)
			if !m.disconnect(c.Conn()) {
				t.Fatalf("cycle %d: disconnect", i)
			}
			select { // a request sent before the client saw the cut would be lost, and cost a timeout
			case <-reconnected:
			case <-ctx.Done():
				t.Fatalf("cycle %d: no reconnect", i)
			}
			c.Conn().RemoveStatusListener(reconnected)
			for {
				// Each try is bounded: a request sent as the connection drops is never answered.
				sctx, cancel := context.WithTimeout(ctx, longRunRequestTimeout)
				err := w.Stop(sctx)
				cancel()
				if err == nil {
					break
				}
				if code := wire.CodeOf(err); code != "" && code != wire.CodeUnavailable {
					t.Fatalf("cycle %d: stop: %v", i, err)
				}
				select {
				case <-ctx.Done():
					t.Fatalf("cycle %d: stop: %v", i, err)
				case <-time.After(5 * time.Millisecond): // reconnecting
				}
			}
		}
	}
	eventually(t, "marks", func() (bool, string) {
		n := watchMarks(c)
		return n == 0, fmt.Sprintf("%d watch ids marked in flight", n)
	})
	backToBaseline(t, m, c, subs, 0, goroutines, "after the cycles")
}

// A cache closed while its connection is being cut again and again stops its goroutine and leaves
// no subscription behind; the server's watch is unwatched, or Close says it may not be.
func TestCacheCloseDuringReconnectStorm(t *testing.T) {
	m, c, ctx, goroutines, subs := startWithBaseline(t, longRunRequestTimeout)
	for i := range 20 {
		k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice", KeyPrefix: "s/", WatchID: "storm",
			ResyncBackoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		endStorm := natstest.Storm(m.ns, time.Duration(i%5)*time.Millisecond, c.Conn())
		closeErr := k.Close()
		endStorm()
		select {
		case <-k.Done():
		default:
			t.Fatalf("cycle %d: Close returned before the cache stopped", i)
		}
		if closeErr != nil {
			// The watch may be left registered: unwatch it once the connection is back.
			for {
				uctx, cancel := context.WithTimeout(ctx, longRunRequestTimeout)
				err := c.Unwatch(uctx, "storm")
				cancel()
				if err == nil || wire.CodeOf(err) == wire.CodeNotFound {
					break
				}
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond) // reconnecting
			}
		}
	}
	backToBaseline(t, m, c, subs, 0, goroutines, "after the closes")
}

// A cache whose NATS server (and with it every connection) goes away and comes back, again and
// again, resyncs after each return, sees a put after the last one once, and holds as many
// goroutines and subscriptions as after its first return.
func TestCacheFollowsAcrossNATSRestarts(t *testing.T) {
	ctx := ctxT(t)
	// The first start takes a port the system picks (one chosen free beforehand could be taken
	// before the bind); every restart comes back on it, where the clients reconnect.
	listen := "127.0.0.1:0"
	startNATS := func() *natsserver.Server {
		ns, err := natsserver.Start(natsserver.Options{Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		listen = ns.Addr().String()
		return ns
	}
	ns := startNATS()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	url := ns.ClientURL()
	fast := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(5 * time.Millisecond), nats.ReconnectJitter(0, 0)}

	// The state server, on a connection that reconnects as fast as the clients'.
	opts := store.DefaultOptions()
	opts.Logger = slog.New(slog.DiscardHandler)
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	snc, err := nats.Connect(url, append(fast, nats.Name("stated"))...)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(st, snc, server.Options{Principals: []policy.Principal{admin, alice}, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_ = srv.Stop(sctx)
		snc.Close()
	}()

	nc, err := Connect(url, alice.ID, fast...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := New(nc, alice.ID, WithRequestTimeout(longRunRequestTimeout))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	puts := map[string]int{}
	resynced := make(chan struct{}, 1)
	k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice", KeyPrefix: "nr/", ResyncBackoff: 5 * time.Millisecond,
		Handlers: Handlers{
			OnPut: func(e wire.Entry) {
				mu.Lock()
				puts[fmt.Sprintf("%s@%d", e.Key, e.Revision)]++
				mu.Unlock()
			},
			OnResync: func([]wire.Entry, uint64) {
				select {
				case resynced <- struct{}{}:
				default:
				}
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	<-resynced

	put := func(key string) string {
		t.Helper()
		for {
			pctx, cancel := context.WithTimeout(ctx, longRunRequestTimeout)
			e, err := c.Put(pctx, preference("user/alice", key, "grid"))
			cancel()
			if err == nil {
				if err := k.WaitForRevision(ctx, e.Revision); err != nil {
					t.Fatalf("wait for %s: %v", key, err)
				}
				return fmt.Sprintf("%s@%d", key, e.Revision)
			}
			if code := wire.CodeOf(err); code != "" && code != wire.CodeUnavailable || ctx.Err() != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			time.Sleep(5 * time.Millisecond) // the store or the connection is coming back
		}
	}
	var goroutines, subs int
	const restarts = 40
	for i := range restarts {
		if i == 2 {
			runtime.GC()
			goroutines, subs = runtime.NumGoroutine(), nc.NumSubscriptions()
		}
		for len(resynced) > 0 {
			<-resynced
		}
		ns.Shutdown()
		ns.WaitForShutdown()
		ns = startNATS()
		select {
		case <-resynced:
		case <-ctx.Done():
			t.Fatalf("restart %d: no resync", i)
		}
		put(fmt.Sprintf("nr/%d", i%8))
	}
	last := put("nr/last")
	mu.Lock()
	for p, n := range puts {
		if n > 1 {
			t.Errorf("OnPut called %d times for %s", n, p)
		}
	}
	if puts[last] != 1 {
		t.Errorf("OnPut called %d times for the put after the restarts, want 1", puts[last])
	}
	mu.Unlock()
	eventually(t, "subscriptions", func() (bool, string) {
		n := nc.NumSubscriptions()
		return n == subs, fmt.Sprintf("%d subscriptions (after 2 restarts: %d)", n, subs)
	})
	eventually(t, "live watches", func() (bool, string) {
		n := len(st.LiveWatches())
		return n == 1, fmt.Sprintf("%d live watches", n)
	})
	noMoreGoroutinesThan(t, "goroutines after the restarts", goroutines+2)
}
