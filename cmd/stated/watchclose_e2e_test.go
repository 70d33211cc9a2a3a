package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// wireWatches subscribes, on nc, to every watch subject of principal: stated publishes all of that
// principal's watch messages on one connection, so they arrive here in the order they were sent.
func wireWatches(t *testing.T, nc *nats.Conn, principal string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, principal, ">"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// wireMessagesUntil reads sub until a PUT of key arrives on watch sentinel and returns, in arrival
// order, the messages of watch id seen before it.
func wireMessagesUntil(t *testing.T, sub *nats.Subscription, id, sentinel, key string) []wire.WatchMessage {
	t.Helper()
	var got []wire.WatchMessage
	for {
		msg, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatalf("waiting for %s's update of %s (messages of %s so far %+v): %v", sentinel, key, id, got, err)
		}
		var m wire.WatchMessage
		if err := json.Unmarshal(msg.Data, &m); err != nil {
			t.Fatalf("watch message %s: %v", msg.Data, err)
		}
		switch m.WatchID {
		case id:
			got = append(got, m)
		case sentinel:
			if m.Kind == wire.UpdatePut && m.Key == key {
				return got
			}
		}
	}
}

func describe(ms []wire.WatchMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		if m.Kind == wire.UpdateClosed {
			out[i] = "CLOSED:" + string(m.Reason)
		} else {
			out[i] = fmt.Sprintf("%s:%d:%s", m.Kind, m.WatchSequence, m.Key)
		}
	}
	return out
}

func putLease(t *testing.T, ctx context.Context, c *client.Client, ns, key, holder string) wire.Entry {
	t.Helper()
	e, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaLease,
		Document: json.RawMessage(fmt.Sprintf(`{"holder":%q,"claimed_at_ms":1}`, holder))})
	if err != nil {
		t.Fatalf("put %s %s: %v", ns, key, err)
	}
	return e
}

// TestE2EWatchOverflowOverNATS: with max_pending_updates = 4, a watch that does not ack receives
// updates 1..4, then one CLOSED OVERFLOW and nothing after; ack and unwatch on it answer NOT_FOUND.
func TestE2EWatchOverflowOverNATS(t *testing.T) {
	s, ctx := startWith(t, "[bounds]\nmax_pending_updates = 4\n")
	coord := goClient(t, s, "coordinator")
	raw, _ := conn(t, s, "coordinator")
	sub := wireWatches(t, raw, "coordinator")

	lazy := openWatch(t, coord, "lazy", "service/tx", "items/k")
	openWatch(t, coord, "sentinel", "service/tx", "sentinel/")
	var revs []uint64
	for i := 1; i <= 5; i++ {
		revs = append(revs, putLease(t, ctx, coord, "service/tx", "items/k", fmt.Sprintf("w%d", i)).Revision)
	}
	for i := 1; i <= 4; i++ {
		if m := wantUpdate(t, lazy, uint64(i), "items/k"); m.Revision != revs[i-1] || m.Entry == nil || m.Entry.Revision != revs[i-1] {
			t.Fatalf("update %d: %+v, want revision %d", i, m, revs[i-1])
		}
	}
	wantClosed(t, lazy, wire.CloseOverflow)

	// On the wire: after the close nothing more is sent on the watch's subject, even for later puts.
	putLease(t, ctx, coord, "service/tx", "items/k", "w6")
	putLease(t, ctx, coord, "service/tx", "sentinel/x", "s")
	got := describe(wireMessagesUntil(t, sub, "lazy", "sentinel", "sentinel/x"))
	want := []string{"PUT:1:items/k", "PUT:2:items/k", "PUT:3:items/k", "PUT:4:items/k", "CLOSED:OVERFLOW"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages on the lazy watch's subject %v, want %v", got, want)
	}

	if err := coord.Ack(ctx, "lazy", 4); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack on the closed watch: %v, want NOT_FOUND", err)
	}
	if err := coord.Unwatch(ctx, "lazy"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("unwatch of the closed watch: %v, want NOT_FOUND", err)
	}
}

// TestE2EWatchAckTimeoutOverNATS: with ack_deadline_ms = 2000, a watch that never acks is closed
// with ACK_TIMEOUT, while an identical watch that acks stays open and receives a later put.
func TestE2EWatchAckTimeoutOverNATS(t *testing.T) {
	s, ctx := startWith(t, "[bounds]\nack_deadline_ms = 2000\n")
	coord := goClient(t, s, "coordinator")

	lazy := openWatch(t, coord, "lazy", "service/tx", "items/")
	diligent := openWatch(t, coord, "diligent", "service/tx", "items/")
	putLease(t, ctx, coord, "service/tx", "items/k", "w1")
	wantUpdate(t, diligent, 1, "items/k")
	if err := diligent.Ack(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wantUpdate(t, lazy, 1, "items/k")
	wantClosed(t, lazy, wire.CloseAckTimeout) // nextWatchMessage bounds the wait (10 s)

	if n := value(scrape(t, s), "state_watches", nil); n != 1 {
		t.Fatalf("live watches after the ACK_TIMEOUT close: %v, want 1 (the diligent one)", n)
	}
	putLease(t, ctx, coord, "service/tx", "items/k", "w2")
	wantUpdate(t, diligent, 2, "items/k")
	if err := diligent.Ack(ctx, 2); err != nil {
		t.Fatalf("ack on the diligent watch after the other timed out: %v", err)
	}
	if err := coord.Ack(ctx, "lazy", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack on the timed-out watch: %v, want NOT_FOUND", err)
	}
	if n := value(scrape(t, s), "state_watch_closures_total", map[string]string{"reason": "ACK_TIMEOUT"}); n != 1 {
		t.Fatalf("state_watch_closures_total{reason=ACK_TIMEOUT} = %v, want 1", n)
	}
}

// TestE2EWatchAckBoundsOverNATS: an ack below an earlier ack and one above the highest sequence sent
// answer INVALID_ARGUMENT and change nothing: with max_pending_updates = 4 the watch still holds
// exactly the earlier ack (more pending would overflow, a bogus higher one would underflow).
func TestE2EWatchAckBoundsOverNATS(t *testing.T) {
	s, ctx := startWith(t, "[bounds]\nmax_pending_updates = 4\n")
	alice := goClient(t, s, "alice")
	put := func(i int) {
		t.Helper()
		if _, err := alice.Put(ctx, wire.PutRequest{Namespace: "user/alice", Key: fmt.Sprintf("prefs/%d", i),
			Schema: wire.SchemaPreference, Document: json.RawMessage(`{"kind":"ui"}`)}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	w := openWatch(t, alice, "w", "user/alice", "prefs/")
	for i := 1; i <= 3; i++ {
		put(i)
		wantUpdate(t, w, uint64(i), fmt.Sprintf("prefs/%d", i))
	}
	if err := w.Ack(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := w.Ack(ctx, 1); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("ack 1 after ack 2: %v, want INVALID_ARGUMENT", err)
	}
	if err := w.Ack(ctx, 4); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("ack 4 with 3 sent: %v, want INVALID_ARGUMENT", err)
	}
	// Acked 2: updates 4..6 make exactly max_pending_updates pending, so all arrive, no close.
	for i := 4; i <= 6; i++ {
		put(i)
		wantUpdate(t, w, uint64(i), fmt.Sprintf("prefs/%d", i))
	}
	if err := w.Ack(ctx, 7); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("ack 7 with 6 sent: %v, want INVALID_ARGUMENT", err)
	}
	if err := w.Ack(ctx, 6); err != nil {
		t.Fatalf("ack 6 after the rejected acks: %v", err)
	}
	put(7)
	wantUpdate(t, w, 7, "prefs/7")
	if err := w.Ack(ctx, 7); err != nil {
		t.Fatal(err)
	}
}

// TestE2ESighupDemotedAdminKeepsConnection: an admin's watch on service/ (admins only) closes with
// UNAUTHORIZED when SIGHUP makes it a plain principal; nothing more reaches that watch, and the same
// connection keeps working for what the principal may still do (its own user namespace).
func TestE2ESighupDemotedAdminKeepsConnection(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coord := goClient(t, s, "coordinator")
	var disconnects atomic.Int64
	nc, err := client.Connect(s.URL(), "ops", nats.UserInfo("ops", password("ops")),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnects.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ops, err := client.New(nc, "ops", client.WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	sub := wireWatches(t, nc, "ops")
	svc := openWatch(t, ops, "svc", "service/tx", "")
	own := openWatch(t, ops, "own", "user/ops", "")
	putLease(t, ctx, coord, "service/tx", "items/a", "w1")
	wantUpdate(t, svc, 1, "items/a")
	if err := svc.Ack(ctx, 1); err != nil {
		t.Fatal(err)
	}

	demoted := append([]e2e.Principal(nil), principals...)
	for i := range demoted {
		if demoted[i].ID == "ops" {
			demoted[i].Admin = false
		}
	}
	s.WriteConfig(e2e.Config{Principals: demoted})
	s.Reload()
	wantClosed(t, svc, wire.CloseUnauthorized)

	// A later put in service/tx does not reach the closed watch; ops may still write its own namespace.
	putLease(t, ctx, coord, "service/tx", "items/b", "w2")
	if _, err := ops.Put(ctx, wire.PutRequest{Namespace: "user/ops", Key: "prefs", Schema: wire.SchemaPreference,
		Document: json.RawMessage(`{"kind":"ui"}`)}); err != nil {
		t.Fatalf("demoted ops writing user/ops: %v", err)
	}
	wantUpdate(t, own, 1, "prefs")
	if err := own.Ack(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := describe(wireMessagesUntil(t, sub, "svc", "own", "prefs"))
	if want := []string{"PUT:1:items/a", "CLOSED:UNAUTHORIZED"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages on the service watch's subject %v, want %v", got, want)
	}

	if e, err := ops.Get(ctx, "user/ops", "prefs"); err != nil || e.Owner != "ops" {
		t.Fatalf("demoted ops reading user/ops: %+v %v", e, err)
	}
	if _, err := ops.Get(ctx, "service/tx", "items/a"); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("demoted ops reading service/tx: %v, want PERMISSION_DENIED", err)
	}
	if _, err := ops.Watch(ctx, wire.WatchRequest{WatchID: "svc", Namespace: "service/tx"}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("demoted ops watching service/tx again: %v, want PERMISSION_DENIED", err)
	}
	if err := ops.Ack(ctx, "svc", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack on the closed watch: %v, want NOT_FOUND", err)
	}
	if n := disconnects.Load(); n != 0 || nc.Stats().Reconnects != 0 || !nc.IsConnected() {
		t.Fatalf("ops's connection was cut: %d disconnects, %d reconnects, status %v", n, nc.Stats().Reconnects, nc.Status())
	}
	if n := value(scrape(t, s), "state_watch_closures_total", map[string]string{"reason": "UNAUTHORIZED"}); n != 1 {
		t.Fatalf("state_watch_closures_total{reason=UNAUTHORIZED} = %v, want 1", n)
	}
}
