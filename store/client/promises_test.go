package client

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/syncbuf"

	"github.com/keeppeek/coordination/store/wire"
)

// Tests of promises the doc comments make that no other test checked.

// A nil Option is skipped, as nats.go skips a nil nats.Option: a caller that builds its options
// conditionally (var o Option; if verbose { o = WithLogger(l) }) gets the defaults, not a panic.
func TestNewSkipsANilOption(t *testing.T) {
	env := startEnv(t)
	var none Option
	var c *Client
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("New with a nil Option panicked: %v", r)
			}
		}()
		var err error
		c, err = New(env.Connect(t, alice.ID), alice.ID, none, WithRequestTimeout(time.Second), nil)
		if err != nil {
			t.Fatalf("New with a nil Option: %v", err)
		}
	}()
	if c.RequestTimeout() != time.Second {
		t.Fatalf("RequestTimeout = %v, want the option given beside the nil ones", c.RequestTimeout())
	}
	if _, err := c.Put(ctxT(t), preference("user/alice", "k", "grid")); err != nil {
		t.Fatalf("Put through a client made with a nil Option: %v", err)
	}
}

// Finish (doc): a reply that comes before ctx ends is returned; a ctx that ends first returns
// ctx.Err() at once and hands the result to late when it comes; a ctx already ended sends nothing and
// never calls late; the request runs until the later of ctx's deadline and the request timeout.
func TestFinish(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID, WithRequestTimeout(2*time.Second))
	ctx := ctxT(t)
	const ns = "user/alice"

	// Answered in time.
	e, err := Finish(ctx, c, func(rctx context.Context) (wire.Entry, error) {
		return c.Put(rctx, preference(ns, "in-time", "a"))
	}, func(wire.Entry, error) { t.Error("late called for a reply returned in time") })
	if err != nil || e.Key != "in-time" || e.Revision == 0 {
		t.Fatalf("Finish answered in time = %+v, %v", e, err)
	}

	// Already ended: nothing sent, late never called.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	var sent atomic.Bool
	_, err = Finish(ended, c, func(rctx context.Context) (wire.Entry, error) {
		sent.Store(true)
		return c.Put(rctx, preference(ns, "never", "a"))
	}, func(wire.Entry, error) { t.Error("late called for a request never sent") })
	if !errors.Is(err, context.Canceled) || sent.Load() {
		t.Fatalf("Finish with an ended ctx = %v (sent %v), want context.Canceled and nothing sent", err, sent.Load())
	}
	if _, err := c.Get(ctx, ns, "never"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("get of the key a request never sent would have written = %v, want NOT_FOUND", err)
	}

	// Given up: ctx.Err() at once, the request runs on (its ctx outlives the caller's, up to the
	// request timeout), and late gets its result.
	short, cancelShort := context.WithCancel(ctx)
	go_, started := make(chan struct{}), make(chan struct{})
	type result struct {
		e   wire.Entry
		err error
	}
	late := make(chan result, 1)
	var deadline time.Time
	var mu sync.Mutex
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := Finish(short, c, func(rctx context.Context) (wire.Entry, error) {
			close(started)
			<-go_
			d, _ := rctx.Deadline()
			mu.Lock()
			deadline = d
			mu.Unlock()
			if err := rctx.Err(); err != nil {
				return wire.Entry{}, err
			}
			return c.Put(rctx, preference(ns, "late", "a"))
		}, func(e wire.Entry, err error) { late <- result{e, err} })
		done <- err
	}()
	<-started // sent (as far as Finish knows): now give up on it
	cancelShort()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Finish given up = %v, want context.Canceled", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Finish did not return once its ctx ended")
	}
	close(go_)
	select {
	case r := <-late:
		if r.err != nil || r.e.Key != "late" {
			t.Fatalf("late got %+v, %v; want the put's entry", r.e, r.err)
		}
	case <-time.After(testTimeout):
		t.Fatal("late was never called")
	}
	mu.Lock()
	if deadline.IsZero() || deadline.Before(start.Add(2*time.Second)) {
		t.Errorf("the request's deadline %v is not the request timeout after the start %v", deadline, start)
	}
	mu.Unlock()
	if got, err := c.Get(ctx, ns, "late"); err != nil || got.Key != "late" {
		t.Fatalf("the given-up put is not in the store: %+v, %v", got, err)
	}
}

// A context deadline always wins over the request timeout (WithRequestTimeout doc), a later one
// included: a request whose ctx allows more time than the timeout waits for its reply that long.
func TestALaterContextDeadlineWins(t *testing.T) {
	env := startEnv(t)
	nc := env.Connect(t, alice.ID)
	sub, err := nc.SubscribeSync("silent.state.v1.alice.get") // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	c, err := New(nc, alice.ID, WithPrefix("silent"), WithRequestTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const wait = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, "user/alice", "k")
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Fatalf("Get = %v after %v (ctx err %v): the request timeout cut a request whose ctx allowed %v",
			err, time.Since(start), ctx.Err(), wait)
	}
}

// Ack refuses a sequence above 2^53-1 (which JSON cannot carry) locally, as INVALID_ARGUMENT: the
// watch is left as it was.
func TestAckAboveTheLargestIntegerIsRefusedLocally(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "big", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()
	if err := w.Ack(ctx, wire.MaxSafeInteger+1); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("Ack(2^53) = %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.Put(ctx, preference("user/alice", "k", "a")); err != nil {
		t.Fatal(err)
	}
	m := recv(t, w.Messages())
	if m.WatchSequence != 1 {
		t.Fatalf("update %+v", m)
	}
	if err := w.Ack(ctx, 1); err != nil {
		t.Fatalf("Ack(1) after the refused one: %v", err)
	}
}

// A message on the watch's subject that does not decode ends Messages, and Err says why; Err is nil
// while the watch runs (Messages, Err docs). Stop then still removes the server's watch.
func TestWatchEndsOnAMessageThatDoesNotDecode(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "bad", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Err() != nil {
		t.Fatalf("Err of a running watch = %v", w.Err())
	}
	// The test environment's NATS server has no authorization: another connection can publish on
	// the watch's delivery subject, as a misbehaving server would.
	other := env.Connect(t, bob.ID)
	if err := other.Publish(c.watchSubject("bad"), []byte(`{"watch_id":"bad","kind":"PUT"`)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, w.Messages())
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("Err after a message that does not decode = %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	w2, err := c.Watch(ctx, wire.WatchRequest{WatchID: "bad", Namespace: "user/alice"})
	if err != nil {
		t.Fatalf("a watch of the same id after Stop: %v (Stop left the server's watch)", err)
	}
	_ = w2.Stop(ctx)
}

// After Close (Close, Done, Following, Get, WaitForRevision, WaitForRevisionIn docs): Done is
// closed, Following is false, the entries stay readable, later Close calls return the same, a wait
// for a revision not reached is ErrCacheClosed, and a wait in another epoch is ErrEpochChanged.
func TestCacheAfterClose(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	e, err := c.Put(ctx, preference("user/alice", "k", "grid"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !k.Following() || k.Err() != nil || !strings.HasPrefix(k.WatchID(), "cache-") || len(k.WatchID()) != len("cache-")+16 {
		t.Fatalf("a new cache: following %v, err %v, watch id %q", k.Following(), k.Err(), k.WatchID())
	}
	if err := k.WaitForRevisionIn(ctx, "another-epoch", e.Revision); !errors.Is(err, ErrEpochChanged) {
		t.Fatalf("WaitForRevisionIn of another epoch = %v, want ErrEpochChanged at once", err)
	}
	first := k.Close()
	if first != nil {
		t.Fatalf("Close: %v", first)
	}
	select {
	case <-k.Done():
	default:
		t.Fatal("Done is open after Close")
	}
	if k.Following() {
		t.Fatal("Following after Close")
	}
	if got, ok := k.Get("k"); !ok || got.Revision != e.Revision || len(k.List()) != 1 {
		t.Fatalf("entries after Close: %+v %v, list %v", got, ok, k.List())
	}
	if err := k.Close(); err != first {
		t.Fatalf("second Close = %v, want the first's %v", err, first)
	}
	if err := k.WaitForRevision(ctx, e.Revision+1); !errors.Is(err, ErrCacheClosed) {
		t.Fatalf("WaitForRevision after Close = %v, want ErrCacheClosed", err)
	}
	if err := c.Ack(ctx, k.WatchID(), 0); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack of the cache's watch after Close = %v, want NOT_FOUND (unwatched)", err)
	}
}

// A cache logs on its client's logger (WithLogger) unless CacheOptions.Logger says otherwise: a
// resync is logged there.
func TestCacheLogsOnTheClientsLogger(t *testing.T) {
	env := startEnv(t)
	var buf syncbuf.Buffer
	c := newClient(t, env, alice.ID, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := ctxT(t)
	resynced := make(chan struct{}, 4)
	k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice", WatchID: "logged",
		Handlers: Handlers{OnResync: func([]wire.Entry, uint64) { resynced <- struct{}{} }}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = k.Close() }()
	<-resynced // the first snapshot
	if !env.Store.CloseWatch(alice, "logged", wire.CloseRestored, "test") {
		t.Fatal("the watch was not live on the server")
	}
	select {
	case <-resynced:
	case <-time.After(testTimeout):
		t.Fatal("the cache did not resync")
	}
	if !strings.Contains(buf.String(), "state cache resync") {
		t.Fatalf("the client's logger has no resync: %q", buf.String())
	}
}
