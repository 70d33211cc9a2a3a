package client

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// handlerWatermark wraps a recorder's handlers and keeps the highest revision they were called with,
// so a test can tell whether WaitForRevision returned before the handlers of that revision ran.
type handlerWatermark struct {
	mu  sync.Mutex
	rev uint64
}

func (w *handlerWatermark) wrap(h Handlers) Handlers {
	mark := func(rev uint64) {
		w.mu.Lock()
		w.rev = max(w.rev, rev)
		w.mu.Unlock()
	}
	return Handlers{
		OnPut:    func(e wire.Entry) { h.OnPut(e); mark(e.Revision) },
		OnDelete: func(key string, rev uint64) { h.OnDelete(key, rev); mark(rev) },
		OnExpire: func(key string, rev uint64) { h.OnExpire(key, rev); mark(rev) },
		OnResync: func(s []wire.Entry, rev uint64) { h.OnResync(s, rev); mark(rev) },
	}
}

func (w *handlerWatermark) get() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rev
}

// Many caches on one connection, a writer on another, and stated stopped (SIGTERM), killed
// (SIGKILL) and restarted while the writes go on; its embedded NATS server goes with it, so every
// connection drops and reconnects. Every cache ends equal to the store, its handlers replay to the
// same entries in revision order with nothing doubled, WaitForRevision never returns before the
// handlers of that revision ran, and Close returns while stated is down.
func TestE2ECachesOnOneConnectionSurviveKillsAndRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s := e2e.NewStated(t, e2e.Config{Principals: []e2e.Principal{{ID: "coordinator", Admin: true, Password: "pw"}}})
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	connect := func() *Client {
		nc, err := Connect(s.URL(), admin.ID, nats.UserInfo(admin.ID, "pw"), nats.ReconnectWait(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := New(nc, admin.ID, WithRequestTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const ns = "service/tx"
	prefixes := []string{"p0/", "p1/", "p2/", "p3/"}
	reader, writer := connect(), connect()
	var caches []watchedCache
	for i := range 12 {
		w := watchedCache{prefix: prefixes[i%len(prefixes)], r: newRecorder(), mark: &handlerWatermark{}}
		k, err := reader.NewCache(ctx, CacheOptions{Namespace: ns, KeyPrefix: w.prefix, CheckInterval: 200 * time.Millisecond,
			ResyncBackoff: 20 * time.Millisecond, Handlers: w.mark.wrap(w.r.handlers())})
		if err != nil {
			t.Fatal(err)
		}
		w.k = k
		caches = append(caches, w)
	}
	put := func(key string, rng *rand.Rand) (uint64, error) {
		if rng != nil && rng.IntN(4) == 0 {
			rev, err := writer.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: key})
			if wire.CodeOf(err) == wire.CodeNotFound {
				return 0, nil
			}
			return rev, err
		}
		e, err := writer.Put(ctx, wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaLease,
			Document: json.RawMessage(fmt.Sprintf(`{"holder":"w","claimed_at_ms":%d}`, time.Now().UnixMilli()))})
		return e.Revision, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round, disrupt := range []func(){
		func() { s.Term(); s.Start() },
		func() { s.Kill(); s.Start() },
		func() { s.Kill(); s.Start() },
	} {
		// Writes go on through the disruption; a failed one (stated away) may or may not have
		// committed, and the caches must agree with the store either way.
		writing := make(chan struct{})
		go func() {
			defer close(writing)
			for i := range 80 {
				_, _ = put(fmt.Sprintf("%sk%d", prefixes[rng.IntN(len(prefixes))], rng.IntN(8)), rng)
				if i == 20 {
					disrupt()
				}
			}
		}()
		// Waiters: WaitForRevision must return only after the handlers ran.
		var wg sync.WaitGroup
		for _, w := range caches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					rev := w.k.Revision() + 1
					wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
					err := w.k.WaitForRevision(wctx, rev)
					wcancel()
					if err == nil && w.mark.get() < rev {
						t.Errorf("WaitForRevision(%d) returned with the handlers at %d", rev, w.mark.get())
					}
				}
			}()
		}
		select {
		case <-writing:
		case <-ctx.Done():
			t.Fatal("the writer never finished")
		}
		wg.Wait()
		// A last write under each prefix, answered: the revision each cache must reach.
		last := map[string]uint64{}
		for _, p := range prefixes {
			last[p] = retry(t, ctx, "sentinel", func() (uint64, error) { return put(p+"sentinel", nil) })
		}
		checkSettled(t, ctx, round, caches, last, writer, ns)
	}
	// Close while stated is away: bounded by the request timeout of the unwatch.
	s.Kill()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var wg sync.WaitGroup
		for _, w := range caches {
			wg.Go(func() { _ = w.k.Close() })
		}
		wg.Wait()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return while stated was away")
	}
	for i, w := range caches {
		t.Logf("cache %d (%s): %d resyncs", i, w.prefix, w.k.Resyncs())
	}
}

// The connection drops and comes back while a cache's watch reply is on its way (the server has
// registered the watch and taken the snapshot): updates sent meanwhile are lost, the reply itself
// arrives after the reconnect, and the cache must not trust the incarnation it then installs.
func TestCacheReconnectInTheMiddleOfASnapshot(t *testing.T) {
	env := startEnv(t)
	ctx := ctxT(t)
	const ns = "user/alice"
	writer := newClient(t, env, alice.ID)
	if _, err := writer.Put(ctx, preference(ns, "before", "x")); err != nil {
		t.Fatal(err)
	}
	replied, release := make(chan struct{}), make(chan struct{})
	var r *relay
	r = startRelay(t, env.URL, relayHooks{after: func(op wire.Op, n int, _ []byte) bool {
		if op == wire.OpWatch && n == 1 {
			close(replied)
			select {
			case <-release:
			case <-r.stopped:
			}
		}
		return true
	}})
	nc := env.Connect(t, alice.ID)
	reconnected := make(chan struct{}, 1)
	nc.SetReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	})
	c, err := New(nc, alice.ID, WithPrefix(relayPrefix), WithRequestTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	type result struct {
		k   *Cache
		err error
	}
	started := make(chan result, 1)
	go func() {
		k, err := c.NewCache(ctx, CacheOptions{Namespace: ns, Handlers: rec.handlers(), CheckInterval: -1})
		started <- result{k, err}
	}()
	select {
	case <-replied:
	case <-ctx.Done():
		t.Fatal("no watch reply")
	}
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.NATS.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	during, err := writer.Put(ctx, preference(ns, "during", "x")) // its update may be lost
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("no reconnect")
	}
	if err := nc.Flush(); err != nil { // the server has the client's subscriptions again
		t.Fatal(err)
	}
	close(release)
	res := <-started
	if res.err != nil {
		t.Fatal(res.err)
	}
	k := res.k
	defer func() { _ = k.Close() }()
	if err := k.WaitForRevision(ctx, during.Revision); err != nil {
		t.Fatalf("WaitForRevision(%d): %v (cache at %d)", during.Revision, err, k.Revision())
	}
	if _, err := writer.Put(ctx, preference(ns, "after", "x")); err != nil {
		t.Fatal(err)
	}
	assertMatchesServer(t, k, writer, ns, "", rec)
}

// Acks lost on the way to the server, and replies of acks the server applied lost on the way back:
// a cache that cannot tell whether its watch is still sound resyncs, and ends equal to the store,
// its handlers in revision order with nothing doubled.
func TestCacheConvergesWhenAcksAreLost(t *testing.T) {
	env := startEnv(t)
	ctx := ctxT(t)
	const ns = "user/alice"
	startRelay(t, env.URL, relayHooks{
		before: func(op wire.Op, n int) bool { return op != wire.OpAck || n%5 != 2 },
		after:  func(op wire.Op, n int, _ []byte) bool { return op != wire.OpAck || n%5 != 4 },
	})
	c := newClient(t, env, alice.ID, WithPrefix(relayPrefix), WithRequestTimeout(200*time.Millisecond))
	rec := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: rec.handlers(), AckDelay: -1, CheckInterval: 100 * time.Millisecond,
		ResyncBackoff: 10 * time.Millisecond})
	writer := newClient(t, env, alice.ID)
	var last wire.Entry
	for i := range 60 {
		var err error
		if last, err = writer.Put(ctx, preference(ns, fmt.Sprintf("k%d", i%7), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if err := k.WaitForRevision(ctx, last.Revision); err != nil {
				t.Fatal(err)
			}
		}
	}
	if k.Resyncs() == 0 {
		t.Fatal("no resync although acks were lost")
	}
	assertMatchesServer(t, k, writer, ns, "", rec)
}

// A raw Watch against the real stated: SIGTERM closes it with SHUTDOWN (then Messages ends, and Stop
// sends nothing, for the id is free); after SIGKILL nothing closes it, Stop ends it within its
// context although stated is away, and the same id watches again once stated is back.
func TestE2EWatchAcrossTermAndKill(t *testing.T) {
	s, url := externalStated(t)
	ctx := ctxT(t)
	c := devClient(t, url, WithRequestTimeout(time.Second))
	req := wire.WatchRequest{WatchID: "raw", Namespace: "service/tx", KeyPrefix: "items/"}
	w, err := c.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e := putItem(t, ctx, c, "a")
	if m := recv(t, w.Messages()); m.Kind != wire.UpdatePut || m.WatchSequence != 1 || m.Revision != e.Revision {
		t.Fatalf("got %+v, want the PUT at %d as update 1", m, e.Revision)
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d", code)
	}
	if m := recv(t, w.Messages()); m.Kind != wire.UpdateClosed || m.Reason != wire.CloseShutdown {
		t.Fatalf("got %+v, want CLOSED SHUTDOWN", m)
	}
	waitClosed(t, w.Messages())
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop after SHUTDOWN: %v", err)
	}
	s.Start()
	w = retry(t, ctx, "watch again", func() (*Watch, error) { return c.Watch(ctx, req) })
	if len(w.Snapshot().Entries) != 1 {
		t.Fatalf("snapshot %+v, want items/a", w.Snapshot())
	}
	s.Kill()
	stopCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := w.Stop(stopCtx); err == nil {
		t.Fatal("Stop with stated away reports an unwatch that cannot have happened")
	}
	waitClosed(t, w.Messages())
	s.Start()
	w = retry(t, ctx, "watch after the kill", func() (*Watch, error) { return c.Watch(ctx, req) })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
