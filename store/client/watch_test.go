package client

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// recv takes the next watch message, failing the test after testTimeout.
func recv(t *testing.T, ch <-chan wire.WatchMessage) wire.WatchMessage {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("messages closed")
		}
		return m
	case <-time.After(testTimeout):
		t.Fatal("no watch message")
	}
	panic("unreachable")
}

// waitClosed waits until ch is closed, failing on any further message.
func waitClosed(t *testing.T, ch <-chan wire.WatchMessage) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %+v", m)
		}
	case <-time.After(testTimeout):
		t.Fatal("messages not closed")
	}
}

func TestWatchSnapshotThenUpdatesInOrder(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	pa, _ := c.Put(ctx, preference(ns, "p/a", "1"))
	pb, _ := c.Put(ctx, preference(ns, "p/b", "1"))
	if _, err := c.Put(ctx, preference(ns, "q/c", "1")); err != nil {
		t.Fatal(err)
	}

	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w1", Namespace: ns, KeyPrefix: "p/"})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer func() { _ = w.Stop(ctxT(t)) }()
	snap := w.Snapshot()
	if w.ID() != "w1" || snap.WatchID != "w1" || snap.SnapshotRevision != 3 || len(snap.Entries) != 2 ||
		!entryEqual(snap.Entries[0], pa) || !entryEqual(snap.Entries[1], pb) {
		t.Fatalf("snapshot = %+v", snap)
	}

	pa2, _ := c.Put(ctx, preference(ns, "p/a", "2"))                          // 4
	_, _ = c.Put(ctx, preference(ns, "q/c", "2"))                             // 5: outside the prefix
	delRev, _ := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "p/b"}) // 6
	pd, err := c.Put(ctx, preference(ns, "p/d", "1"))                         // 7
	if err != nil || delRev != 6 || pd.Revision != 7 {
		t.Fatalf("writes: delete at %d, put %+v, %v", delRev, pd, err)
	}
	want := []wire.WatchMessage{
		{WatchID: "w1", WatchSequence: 1, Revision: 4, Kind: wire.UpdatePut, Key: "p/a", Entry: &pa2},
		{WatchID: "w1", WatchSequence: 2, Revision: 6, Kind: wire.UpdateDelete, Key: "p/b"},
		{WatchID: "w1", WatchSequence: 3, Revision: 7, Kind: wire.UpdatePut, Key: "p/d", Entry: &pd},
	}
	for _, wm := range want {
		m := recv(t, w.Messages())
		if m.WatchID != wm.WatchID || m.WatchSequence != wm.WatchSequence || m.Revision != wm.Revision ||
			m.Kind != wm.Kind || m.Key != wm.Key || (m.Entry == nil) != (wm.Entry == nil) ||
			(m.Entry != nil && !entryEqual(*m.Entry, *wm.Entry)) {
			t.Fatalf("message %+v, want %+v", m, wm)
		}
	}

	if err := w.Ack(ctx, 2); err != nil {
		t.Fatalf("Ack 2: %v", err)
	}
	if err := w.Ack(ctx, 1); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("Ack below the earlier ack: %v, want INVALID_ARGUMENT", err)
	}
	if err := w.Ack(ctx, 4); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("Ack above the highest sent: %v, want INVALID_ARGUMENT", err)
	}
	if err := w.Ack(ctx, 3); err != nil {
		t.Fatalf("Ack 3: %v", err)
	}
	if _, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w1", Namespace: ns}); !errors.Is(err, wire.ErrWatchExists) {
		t.Fatalf("second watch with the same id: %v, want WATCH_EXISTS", err)
	}

	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitClosed(t, w.Messages())
	if err := w.Stop(ctx); err != nil || w.Err() != nil {
		t.Fatalf("second Stop: %v, Err %v", err, w.Err())
	}
	if err := c.Ack(ctx, "w1", 3); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Ack after Stop: %v, want NOT_FOUND", err)
	}
	// The id is free again.
	w2, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w1", Namespace: ns, KeyPrefix: "p/"})
	if err != nil {
		t.Fatalf("watch after Stop: %v", err)
	}
	if err := w2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWatchEndsWithClosed(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w2", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	if !env.Store.CloseWatch(alice, "w2", wire.CloseRestored, "test") {
		t.Fatal("the watch was not live on the server")
	}
	m := recv(t, w.Messages())
	if m.Kind != wire.UpdateClosed || m.Reason != wire.CloseRestored || m.WatchID != "w2" || m.Message != "test" {
		t.Fatalf("message = %+v, want CLOSED RESTORED", m)
	}
	waitClosed(t, w.Messages())
	if err := w.Stop(ctx); err != nil { // NOT_FOUND from unwatch is fine
		t.Fatalf("Stop after close: %v", err)
	}
}

func TestWatchOverflowsWithoutAcks(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w3", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(ctxT(t)) }()
	limit := int(wire.DefaultBounds().MaxPendingUpdates)
	for i := range limit + 1 {
		if _, err := c.Put(ctx, preference("user/alice", "k", string(rune('a'+i%26)))); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= limit; seq++ {
		if m := recv(t, w.Messages()); m.Kind != wire.UpdatePut || m.WatchSequence != uint64(seq) {
			t.Fatalf("message %+v, want PUT %d", m, seq)
		}
	}
	if m := recv(t, w.Messages()); m.Kind != wire.UpdateClosed || m.Reason != wire.CloseOverflow {
		t.Fatalf("message %+v, want CLOSED OVERFLOW", m)
	}
	waitClosed(t, w.Messages())
}

func TestWatchRejected(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	if _, err := c.Info(ctx); err != nil { // sets up the reply subscription
		t.Fatal(err)
	}
	subs := c.Conn().NumSubscriptions()
	if _, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w", Namespace: "service/x"}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("watch of service/x: %v, want PERMISSION_DENIED", err)
	}
	for _, id := range []string{"", "a.b", "a*", ">"} {
		if _, err := c.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: "user/alice"}); !errors.Is(err, wire.ErrInvalidArgument) {
			t.Fatalf("watch id %q: %v, want INVALID_ARGUMENT", id, err)
		}
	}
	if n := c.Conn().NumSubscriptions(); n != subs {
		t.Fatalf("failed watches left %d subscriptions behind", n-subs)
	}
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "w", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Conn().NumSubscriptions(); n != subs {
		t.Fatalf("a stopped watch left %d subscriptions behind", n-subs)
	}
}

// A watch whose NATS connection is closed will never receive another message: Messages is closed,
// and Err says why, so that a reader ranging over Messages is not left waiting forever (a Cache in
// the same case stops, and its waiters learn it).
func TestWatchEndsWhenItsConnectionCloses(t *testing.T) {
	env := startEnv(t)
	nc := env.Connect(t, alice.ID)
	c, err := New(nc, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctxT(t), wire.WatchRequest{WatchID: "w-conn", Namespace: "user/alice"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	waitClosed(t, w.Messages())
	if err := w.Err(); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Err() = %v, want nats.ErrConnectionClosed", err)
	}
	if err := w.Stop(ctxT(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
