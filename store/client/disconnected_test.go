package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// awaitStatus waits until nc reports status (bounded by the test timeout).
func awaitStatus(t *testing.T, nc *nats.Conn, ch chan nats.Status, want nats.Status) {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for nc.Status() != want {
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("the connection is %v, not %v, after %v", nc.Status(), want, testTimeout)
		}
	}
}

// A write made while the client's connection is down fails at once with UNAVAILABLE, and never
// reaches the store: nats.go would otherwise hold it in its reconnect buffer and send it when the
// connection comes back, long after its caller gave up on it (a put without expected_revision would
// then overwrite whatever was written since).
func TestRequestWhileDisconnectedIsNeverSentLater(t *testing.T) {
	env := startEnv(t)
	link := natstest.NewCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
	nc, err := Connect(link.URL(), "alice", nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	status := nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer nc.RemoveStatusListener(status)
	c, err := New(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := c.Put(ctx, preference("user/alice", "before", "grid")); err != nil {
		t.Fatal(err)
	}

	link.Cut()
	awaitStatus(t, nc, status, nats.RECONNECTING)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.Put(wctx, preference("user/alice", "during", "grid"))
	cancel()
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("put while disconnected: %v, want UNAVAILABLE at once (not sent)", err)
	}

	link.Mend()
	awaitStatus(t, nc, status, nats.CONNECTED)
	// Answered after anything the connection held back was sent and handled.
	if _, err := c.Put(ctx, preference("user/alice", "after", "grid")); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, env, "alice")
	if e, err := other.Get(ctx, "user/alice", "during"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the put refused while disconnected reached the store once reconnected: %+v, %v", e, err)
	}
}
