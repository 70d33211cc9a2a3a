package client

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// statusListeners counts the status listeners registered on nc (nats.go keeps them per status,
// unexported; the test reads the count only).
func statusListeners(t *testing.T, nc *nats.Conn) int {
	t.Helper()
	v := reflect.ValueOf(nc).Elem().FieldByName("statListeners")
	if !v.IsValid() || v.Kind() != reflect.Map {
		t.Fatal("nats.Conn has no map statListeners: the nats.go in go.mod keeps its status listeners elsewhere; update statusListeners")
	}
	n := 0
	for it := v.MapRange(); it.Next(); {
		n += it.Value().Len()
	}
	return n
}

// Caches and watches that come and go for months on one client, with ever-new watch ids, and
// requests refused with ever-new keys, namespaces and ids, leave nothing on the client's connection
// (subscriptions, status listeners), in the client (watch marks) or on the server (live watches), and
// no goroutine.
func TestChurnOfCachesWatchesAndRefusalsLeavesNothingBehind(t *testing.T) {
	m, c, ctx, goroutines, subs := startWithBaseline(t, longRunRequestTimeout)
	listeners := statusListeners(t, c.Conn())
	const cycles = 60
	for i := range cycles {
		// A cache started and closed, with a new watch id each time.
		k, err := c.NewCache(ctx, CacheOptions{Namespace: "user/alice", KeyPrefix: fmt.Sprintf("c%d/", i),
			CheckInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatalf("cycle %d: cache: %v", i, err)
		}
		e, err := c.Put(ctx, preference("user/alice", fmt.Sprintf("c%d/k", i), "grid"))
		if err != nil {
			t.Fatal(err)
		}
		if err := k.WaitForRevision(ctx, e.Revision); err != nil {
			t.Fatal(err)
		}
		if n := statusListeners(t, c.Conn()); n <= listeners {
			t.Fatalf("cycle %d: %d status listeners with a cache running, baseline %d: the count reads nothing", i, n, listeners)
		}
		if err := k.Close(); err != nil {
			t.Fatalf("cycle %d: close: %v", i, err)
		}
		if _, err := c.Delete(ctx, wire.DeleteRequest{Namespace: "user/alice", Key: e.Key}); err != nil {
			t.Fatal(err)
		}
		// A cache refused at start (PERMISSION_DENIED), with a new id.
		if _, err := c.NewCache(ctx, CacheOptions{Namespace: fmt.Sprintf("user/other%d", i)}); wire.CodeOf(err) != wire.CodePermissionDenied {
			t.Fatalf("cycle %d: cache of another's namespace: %v", i, err)
		}
		// A cache whose watch the server closes, then closed.
		k, err = c.NewCache(ctx, CacheOptions{Namespace: "user/alice", WatchID: fmt.Sprintf("closed%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		m.closeWatch(alice.ID, k.WatchID(), wire.CloseOverflow)
		if err := k.Close(); err != nil {
			t.Fatalf("cycle %d: close: %v", i, err)
		}
		// Raw watches: refused, stopped, and closed by the server then stopped.
		if _, err := c.Watch(ctx, wire.WatchRequest{WatchID: fmt.Sprintf("r%d", i), Namespace: "service/x"}); wire.CodeOf(err) != wire.CodePermissionDenied {
			t.Fatalf("cycle %d: watch: %v", i, err)
		}
		w, err := c.Watch(ctx, wire.WatchRequest{WatchID: fmt.Sprintf("w%d", i), Namespace: "user/alice", KeyPrefix: "none/"})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			m.closeWatch(alice.ID, w.ID(), wire.CloseAckTimeout)
			for range w.Messages() {
			}
		}
		if err := w.Stop(ctx); err != nil {
			t.Fatalf("cycle %d: stop: %v", i, err)
		}
		// Refusals naming new keys and ids.
		if _, err := c.Get(ctx, "user/alice", fmt.Sprintf("missing%d", i)); wire.CodeOf(err) != wire.CodeNotFound {
			t.Fatal(err)
		}
		if err := c.Ack(ctx, fmt.Sprintf("never%d", i), 1); wire.CodeOf(err) != wire.CodeNotFound {
			t.Fatal(err)
		}
		if err := c.Unwatch(ctx, fmt.Sprintf("never%d", i)); wire.CodeOf(err) != wire.CodeNotFound {
			t.Fatal(err)
		}
	}
	eventually(t, "status listeners", func() (bool, string) {
		n := statusListeners(t, c.Conn())
		return n == listeners, fmt.Sprintf("%d status listeners (baseline %d)", n, listeners)
	})
	runtime.GC()
	backToBaseline(t, m, c, subs, 0, goroutines, "after the churn")
}
