package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsauth "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// event is one handler call.
type event struct {
	kind     string // put, delete, expire, resync
	key      string
	rev      uint64
	entry    wire.Entry
	snapshot []wire.Entry
}

// recorder records handler calls and signals resyncs and expiries.
type recorder struct {
	mu      sync.Mutex
	events  []event
	resyncs chan uint64 // snapshot revision of every OnResync
	expires chan string
}

func newRecorder() *recorder {
	return &recorder{resyncs: make(chan uint64, 1024), expires: make(chan string, 1024)}
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) handlers() Handlers {
	return Handlers{
		OnPut:    func(e wire.Entry) { r.add(event{kind: "put", key: e.Key, rev: e.Revision, entry: e}) },
		OnDelete: func(key string, rev uint64) { r.add(event{kind: "delete", key: key, rev: rev}) },
		OnExpire: func(key string, rev uint64) { r.add(event{kind: "expire", key: key, rev: rev}); r.expires <- key },
		OnResync: func(s []wire.Entry, rev uint64) {
			r.add(event{kind: "resync", rev: rev, snapshot: append([]wire.Entry(nil), s...)})
			r.resyncs <- rev
		},
	}
}

// replay rebuilds the cache's contents from the handler calls alone, checking their order: the first
// call is a resync, every update's revision is above the one before, and a resync never goes back.
func (r *recorder) replay(t *testing.T) map[string]wire.Entry {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 || r.events[0].kind != "resync" {
		t.Fatalf("the first handler call is not OnResync: %+v", r.events)
	}
	state := map[string]wire.Entry{}
	var last uint64
	for i, e := range r.events {
		switch {
		case e.kind == "resync" && e.rev < last:
			t.Fatalf("event %d: resync to revision %d after %d", i, e.rev, last)
		case e.kind != "resync" && e.rev <= last:
			t.Fatalf("event %d: %s %s at revision %d after %d (doubled or reordered)", i, e.kind, e.key, e.rev, last)
		}
		last = e.rev
		switch e.kind {
		case "resync":
			state = map[string]wire.Entry{}
			for _, s := range e.snapshot {
				state[s.Key] = s
			}
		case "put":
			state[e.key] = e.entry
		default:
			delete(state, e.key)
		}
	}
	return state
}

// awaitResync waits for the next OnResync and returns its revision.
func (r *recorder) awaitResync(t *testing.T) uint64 {
	t.Helper()
	select {
	case rev := <-r.resyncs:
		return rev
	case <-time.After(testTimeout):
		t.Fatal("no resync")
	}
	return 0
}

// newCache starts a cache and closes it at cleanup (before the connection closes).
func newCache(t *testing.T, c *Client, o CacheOptions) *Cache {
	t.Helper()
	k, err := c.NewCache(ctxT(t), o)
	if err != nil {
		t.Fatalf("NewCache: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return k
}

// listAll reads every entry of ns under prefix, page by page, and the namespace revision.
func listAll(t *testing.T, c *Client, ns, prefix string) ([]wire.Entry, uint64) {
	t.Helper()
	var all []wire.Entry
	req := wire.ListRequest{Namespace: ns, KeyPrefix: prefix, Limit: wire.MaxListLimit}
	for {
		l, err := c.List(ctxT(t), req)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		all = append(all, l.Entries...)
		if l.NextAfterKey == "" {
			return all, l.Revision
		}
		req.AfterKey = l.NextAfterKey
	}
}

// assertMatchesServer waits until the cache reflects the namespace's current revision, then checks it
// holds exactly what the server lists, and that replaying the handler calls gives the same.
func assertMatchesServer(t *testing.T, k *Cache, c *Client, ns, prefix string, r *recorder) {
	t.Helper()
	want, rev := listAll(t, c, ns, prefix)
	if err := k.WaitForRevision(ctxT(t), rev); err != nil {
		t.Fatalf("WaitForRevision(%d): %v (cache at %d)", rev, err, k.Revision())
	}
	got := k.List()
	if len(got) != len(want) {
		t.Fatalf("cache holds %d entries, server %d\ncache:  %v\nserver: %v", len(got), len(want), keys(got), keys(want))
	}
	for i := range want {
		if !entryEqual(got[i], want[i]) {
			t.Fatalf("entry %d: cache %+v, server %+v", i, got[i], want[i])
		}
		if e, ok := k.Get(want[i].Key); !ok || !entryEqual(e, want[i]) {
			t.Fatalf("Get(%s) = %+v, %v", want[i].Key, e, ok)
		}
	}
	if r != nil {
		replayed := r.replay(t)
		if len(replayed) != len(want) {
			t.Fatalf("handler replay holds %d entries, server %d", len(replayed), len(want))
		}
		for _, w := range want {
			if e, ok := replayed[w.Key]; !ok || !entryEqual(e, w) {
				t.Fatalf("handler replay of %s = %+v, %v; server %+v", w.Key, e, ok, w)
			}
		}
	}
}

func keys(es []wire.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%s@%d", e.Key, e.Revision)
	}
	return out
}

func TestCacheInstallsTheSnapshot(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	for _, k := range []string{"p/b", "p/a", "p/c", "q/outside"} {
		if _, err := c.Put(ctx, preference(ns, k, "x")); err != nil {
			t.Fatal(err)
		}
	}
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, KeyPrefix: "p/", Handlers: r.handlers()})
	if k.Revision() != 4 || k.Resyncs() != 0 {
		t.Fatalf("revision %d, resyncs %d; want 4, 0", k.Revision(), k.Resyncs())
	}
	if _, ok := k.Get("q/outside"); ok {
		t.Fatal("the cache holds a key outside its prefix")
	}
	if got := keys(k.List()); fmt.Sprint(got) != "[p/a@2 p/b@1 p/c@3]" {
		t.Fatalf("List = %v", got)
	}
	if rev := r.awaitResync(t); rev != 4 {
		t.Fatalf("OnResync at %d, want 4", rev)
	}
	assertMatchesServer(t, k, c, ns, "p/", r)
	if !wire.ValidWatchID(k.WatchID()) {
		t.Fatalf("generated watch id %q", k.WatchID())
	}
}

func TestCacheAppliesUpdatesAndWaitForRevision(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: r.handlers()})

	e, err := c.Put(ctx, preference(ns, "a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	if got, ok := k.Get("a"); !ok || !entryEqual(got, e) {
		t.Fatalf("after WaitForRevision(%d): Get = %+v, %v; want %+v", e.Revision, got, ok, e)
	}
	e2, _ := c.Put(ctx, preference(ns, "a", "2"))
	if err := k.WaitForRevision(ctx, e2.Revision); err != nil {
		t.Fatal(err)
	}
	if got, _ := k.Get("a"); !entryEqual(got, e2) {
		t.Fatalf("Get = %+v, want %+v", got, e2)
	}
	rev, err := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.Get("a"); ok {
		t.Fatal("a deleted key is still cached")
	}

	// A lease that elapses arrives as one EXPIRE.
	withTTL := preference(ns, "lease", "x")
	withTTL.TTLMs = ptr(int64(1000))
	le, err := c.Put(ctx, withTTL)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case key := <-r.expires:
		if key != "lease" {
			t.Fatalf("expired %q", key)
		}
	case <-time.After(testTimeout):
		t.Fatal("no EXPIRE")
	}
	// The handler runs before the cache's revision moves (WaitForRevision returns once handlers have
	// seen it): wait for it rather than read it at once.
	if err := k.WaitForRevision(ctx, le.Revision+1); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.Get("lease"); ok || k.Revision() != le.Revision+1 {
		t.Fatalf("after expiry: cached %v, revision %d (lease at %d)", ok, k.Revision(), le.Revision)
	}
	assertMatchesServer(t, k, c, ns, "", r)

	r.mu.Lock()
	var kinds []string
	for _, ev := range r.events {
		kinds = append(kinds, fmt.Sprintf("%s:%s@%d", ev.kind, ev.key, ev.rev))
	}
	r.mu.Unlock()
	if want := "[resync:@0 put:a@1 put:a@2 delete:a@3 put:lease@4 expire:lease@5]"; fmt.Sprint(kinds) != want {
		t.Fatalf("handler calls %v, want %s", kinds, want)
	}

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := k.WaitForRevision(short, 1000); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForRevision of a future revision: %v", err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctx, 1000); !errors.Is(err, ErrCacheClosed) {
		t.Fatalf("WaitForRevision after Close: %v, want ErrCacheClosed", err)
	}
	if got, ok := k.Get("lease"); ok || len(k.List()) != 0 {
		t.Fatalf("closed cache changed: %+v", got)
	}
}

func TestCacheResyncsAfterServerClose(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	for i := range 5 {
		if _, err := c.Put(ctx, preference(ns, fmt.Sprintf("k%d", i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: r.handlers(), WatchID: "cache-a"})
	r.awaitResync(t)
	e, _ := c.Put(ctx, preference(ns, "k0", "y"))
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	if !env.Store.CloseWatch(alice, "cache-a", wire.CloseOverflow, "test") {
		t.Fatal("the cache's watch is not live")
	}
	// Changes right after the close land either in the new snapshot or as updates after it.
	if _, err := c.Put(ctx, preference(ns, "k1", "y")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "k2"}); err != nil {
		t.Fatal(err)
	}
	r.awaitResync(t)
	if _, err := c.Put(ctx, preference(ns, "k5", "new")); err != nil {
		t.Fatal(err)
	}
	assertMatchesServer(t, k, c, ns, "", r)
	if n := k.Resyncs(); n != 1 {
		t.Fatalf("Resyncs = %d, want 1", n)
	}
}

func TestCacheNoticesAWatchRemovedBehindItsBack(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	other := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: r.handlers(), CheckInterval: 20 * time.Millisecond})
	r.awaitResync(t)
	if err := other.Unwatch(ctx, k.WatchID()); err != nil {
		t.Fatal(err)
	}
	// The server sends this write to no one; only the liveness check can bring it in.
	e, err := other.Put(ctx, preference(ns, "while-gone", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatalf("the cache never saw the write made while its watch was gone: %v", err)
	}
	if k.Resyncs() < 1 {
		t.Fatal("no resync")
	}
	assertMatchesServer(t, k, c, ns, "", r)
}

func TestCacheResyncsAfterReconnect(t *testing.T) {
	env := startEnv(t)
	nc, err := Connect(env.URL, alice.ID, nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(nc, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	writer := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	if _, err := writer.Put(ctx, preference(ns, "before", "x")); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: r.handlers(), CheckInterval: -1})
	r.awaitResync(t)
	reconnected := make(chan struct{}, 1)
	nc.SetReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} })
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.NATS.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	e, err := writer.Put(ctx, preference(ns, "during", "x")) // likely published while the cache is away
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(testTimeout):
		t.Fatal("no reconnect")
	}
	r.awaitResync(t)
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	if k.Resyncs() < 1 {
		t.Fatal("no resync after the reconnect")
	}
	if _, err := writer.Put(ctx, preference(ns, "after", "x")); err != nil {
		t.Fatal(err)
	}
	assertMatchesServer(t, k, c, ns, "", r)
}

func TestCacheResyncsAfterOverflow(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	r := newRecorder()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := r.handlers()
	onPut := h.OnPut
	h.OnPut = func(e wire.Entry) {
		once.Do(func() { close(entered); <-release }) // the first update stalls the cache: no acks
		onPut(e)
	}
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: h})
	r.awaitResync(t)
	if _, err := c.Put(ctx, preference(ns, "k", "0")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(testTimeout):
		t.Fatal("the first update never reached the cache")
	}
	limit := int(wire.DefaultBounds().MaxPendingUpdates)
	for i := range limit + 8 {
		if _, err := c.Put(ctx, preference(ns, fmt.Sprintf("k%d", i%7), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	r.awaitResync(t)
	assertMatchesServer(t, k, c, ns, "", r)
	if k.Resyncs() != 1 {
		t.Fatalf("Resyncs = %d, want 1", k.Resyncs())
	}
}

func TestCacheConvergesUnderConcurrentWriters(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, admin.ID)
	ctx := ctxT(t)
	const ns = "service/transcoder-a"
	const writers, ops, keysPerWriter = 8, 60, 6
	// Anchors no writer touches: a reader must see them in every List, through every resync.
	for i := range 3 {
		if _, err := c.Put(ctx, lease(ns, fmt.Sprintf("anchor-%d", i), "a", 1)); err != nil {
			t.Fatal(err)
		}
	}
	r := newRecorder()
	k := newCache(t, c, CacheOptions{Namespace: ns, Handlers: r.handlers()})
	r.awaitResync(t)

	stopReader := make(chan struct{})
	var readerErr atomic.Value
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for {
			select {
			case <-stopReader:
				return
			default:
			}
			seen := 0
			for _, e := range k.List() {
				if len(e.Key) > 7 && e.Key[:7] == "anchor-" {
					seen++
				}
			}
			if seen != 3 {
				readerErr.Store(fmt.Sprintf("a reader saw %d of 3 anchors", seen))
				return
			}
			// Let the writers and the server run between reads: a reader that never yields holds a
			// whole P, and with one (-cpu 1, or a loaded CI machine) the writes crawl to the deadline.
			runtime.Gosched()
		}
	}()

	// A disruptor closes the cache's watch on the server a few times while the writers run.
	writing, stopWriting := context.WithCancel(ctx)
	disrupted := make(chan int, 1)
	go func() {
		n := 0
		defer func() { disrupted <- n }()
		for range 3 {
			if k.WaitForRevision(writing, k.Revision()+10) != nil {
				return
			}
			if !env.Store.CloseWatch(admin, k.WatchID(), wire.CloseOverflow, "test") {
				continue // resyncing already
			}
			n++
			select {
			case <-r.resyncs:
			case <-writing.Done():
				return
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wc := newClient(t, env, admin.ID)
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			live := map[string]bool{}
			for i := range ops {
				key := fmt.Sprintf("w%d/k%d", w, rng.IntN(keysPerWriter))
				var rev uint64
				var stored *wire.Entry
				if live[key] && rng.IntN(3) == 0 {
					var err error
					if rev, err = wc.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
						errs <- fmt.Errorf("delete %s: %w", key, err)
						return
					}
					live[key] = false
				} else {
					e, err := wc.Put(ctx, lease(ns, key, fmt.Sprintf("w%d", w), int64(i)))
					if err != nil {
						errs <- fmt.Errorf("put %s: %w", key, err)
						return
					}
					rev, stored, live[key] = e.Revision, &e, true
				}
				if w%2 == 1 {
					continue // odd writers do not wait: bursts that overflow the watch
				}
				// Even writers wait to see their own write; they alone write their keys.
				if err := k.WaitForRevision(ctx, rev); err != nil {
					errs <- fmt.Errorf("wait for %s@%d: %w", key, rev, err)
					return
				}
				got, ok := k.Get(key)
				if stored == nil && ok {
					errs <- fmt.Errorf("%s deleted at %d is still cached (%d)", key, rev, got.Revision)
					return
				}
				if stored != nil && (!ok || !entryEqual(got, *stored)) {
					errs <- fmt.Errorf("%s: cached %+v (%v) after its put at %d", key, got, ok, rev)
					return
				}
			}
		}()
	}
	wg.Wait()
	stopWriting()
	closes := <-disrupted
	close(stopReader)
	readerDone.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v := readerErr.Load(); v != nil {
		t.Error(v)
	}
	if t.Failed() {
		return
	}
	assertMatchesServer(t, k, c, ns, "", r)
	if k.Resyncs() < uint64(closes) {
		t.Fatalf("%d resyncs after %d closes", k.Resyncs(), closes)
	}
	t.Logf("%d writers x %d ops, %d closes: %d resyncs", writers, ops, closes, k.Resyncs())
}

func TestNewCacheTakesOverALiveWatchID(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	// A predecessor's watch with the same id is still live.
	old, err := c.Watch(ctx, wire.WatchRequest{WatchID: "worker-1", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Stop(ctxT(t)) }()
	if _, err := c.Put(ctx, preference("user/alice", "a", "x")); err != nil {
		t.Fatal(err)
	}
	k := newCache(t, c, CacheOptions{Namespace: "user/alice", WatchID: "worker-1"})
	if _, ok := k.Get("a"); !ok {
		t.Fatal("snapshot missing")
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	// Close unwatched: the id is free.
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "worker-1", Namespace: "user/alice"})
	if err != nil {
		t.Fatalf("watch after Close: %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNewCacheFailures(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	for name, o := range map[string]CacheOptions{
		"bad namespace":  {Namespace: "foo/x"},
		"bad prefix":     {Namespace: "user/alice", KeyPrefix: "/a"},
		"bad watch id":   {Namespace: "user/alice", WatchID: "a.b"},
		"negative delay": {Namespace: "user/alice", ResyncBackoff: -1},
	} {
		if _, err := c.NewCache(ctx, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Permanent failures are not retried: NewCache returns their code. A cache that retried them
	// would return only when its context ended, with the context's error, which these checks refuse
	// (no wall-clock bound: 65 fsynced puts on a loaded machine can take seconds).
	permanent := func() context.Context {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t.Cleanup(cancel)
		return pctx
	}
	if _, err := c.NewCache(permanent(), CacheOptions{Namespace: "service/x"}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("cache of service/x: %v, want PERMISSION_DENIED", err)
	}
	for i := range 65 {
		if _, err := c.Put(ctx, preference("user/alice", fmt.Sprintf("many/%02d", i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.NewCache(permanent(), CacheOptions{Namespace: "user/alice", KeyPrefix: "many/"}); !errors.Is(err, wire.ErrWatchTooBroad) {
		t.Fatalf("cache of 65 entries: %v, want WATCH_TOO_BROAD", err)
	}
	// No state server: retried until the context ends.
	nobody := newClient(t, env, alice.ID, WithPrefix("nobody"))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := nobody.NewCache(short, CacheOptions{Namespace: "user/alice", ResyncBackoff: 10 * time.Millisecond}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cache without a server: %v, want the context's deadline", err)
	}
}

// A cache installs a snapshot only under the epoch info reports (else it could not tell a restore):
// when its principal may watch but not ask info, NewCache installs nothing and leaves no watch behind.
func TestCacheInstallsNothingWithoutInfo(t *testing.T) {
	perms := &natsauth.Permissions{
		Publish:   &natsauth.SubjectPermission{Allow: []string{"kp.state.v1.alice.>"}, Deny: []string{"kp.state.v1.alice.info"}},
		Subscribe: &natsauth.SubjectPermission{Allow: []string{"kp.watch.v1.alice.>", wire.InboxPrefix("alice") + ".>"}},
	}
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{admin, alice, bob},
		NATSUsers: []natsserver.User{{Name: "alice", Password: "alice-secret", Permissions: perms}}})
	c := newClient(t, env, alice.ID, WithRequestTimeout(200*time.Millisecond))
	ctx := ctxT(t)
	if _, err := c.Put(ctx, preference("user/alice", "a", "x")); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "needs-info", Namespace: "user/alice"})
	if err != nil {
		t.Fatalf("the watch itself is allowed: %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	k, err := c.NewCache(short, CacheOptions{Namespace: "user/alice", WatchID: "needs-info", ResyncBackoff: 10 * time.Millisecond})
	if err == nil {
		_ = k.Close()
		t.Fatalf("a cache installed a snapshot (%d entries) without info", len(k.List()))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NewCache without info: %v, want the context's deadline (info times out: retried)", err)
	}
	w, err = c.Watch(ctx, wire.WatchRequest{WatchID: "needs-info", Namespace: "user/alice"})
	if err != nil {
		t.Fatalf("the cache left its watch registered: %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// WaitForRevision returns only once the handlers have seen the revision: a writer that waits for its
// own write finds its handlers' work done (here, a handler that records what it saw).
func TestWaitForRevisionWaitsForTheHandlers(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	var mu sync.Mutex
	seen := map[string]uint64{}
	release := make(chan struct{})
	k := newCache(t, c, CacheOptions{Namespace: "user/alice", Handlers: Handlers{
		OnPut: func(e wire.Entry) {
			<-release // a handler that takes its time
			mu.Lock()
			seen[e.Key] = e.Revision
			mu.Unlock()
		},
	}})
	e, err := c.Put(ctx, preference("user/alice", "a", "x"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := k.WaitForRevision(short, e.Revision); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForRevision while the handler runs: %v, want it still waiting", err)
	}
	close(release)
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["a"] != e.Revision {
		t.Fatalf("WaitForRevision returned before the handler saw revision %d (saw %d)", e.Revision, seen["a"])
	}
}
