package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// TestMain checks for leaked goroutines and removes the stated binary the end-to-end tests build.
func TestMain(m *testing.M) {
	e2e.Main(m)
}

// testTimeout bounds every wait of a test.
const testTimeout = 15 * time.Second

const ns = "service/transcoder-a"

// ctxT returns a context that ends after testTimeout or with the test.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newClient returns a coordinator (admin) client on a connection of its own.
func newClient(t testing.TB, env *testenv.Env) *client.Client {
	t.Helper()
	c, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientFor returns a client of principal on a connection of its own.
func clientFor(t testing.TB, env *testenv.Env, principal string) (*client.Client, error) {
	return client.New(env.Connect(t, principal), principal)
}

// opts returns lease options for key held by holder.
func opts(key, holder string, ttl time.Duration) lease.Options {
	return lease.Options{Namespace: ns, Key: key, Holder: holder, TTL: ttl}
}

// claim claims o and releases the lease at cleanup.
func claim(t testing.TB, c *client.Client, o lease.Options) *lease.Lease {
	t.Helper()
	l, err := lease.Claim(ctxT(t), c, o)
	if err != nil {
		t.Fatalf("Claim(%s by %s): %v", o.Key, o.Holder, err)
	}
	t.Cleanup(func() { releaseNow(t, l) })
	return l
}

// releaseNow releases l, bounded.
func releaseNow(t testing.TB, l *lease.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// recv receives one value from ch within testTimeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// closed waits up to testTimeout for ch to be closed.
func closed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// notifier returns a buffered channel and a func that sends on it without blocking.
func notifier[T any]() (chan T, func(T)) {
	ch := make(chan T, 64)
	return ch, func(v T) {
		select {
		case ch <- v:
		default:
		}
	}
}

// statusPut is a keeppeek.observed-status.v1 put of key (namespace left to the lease).
func statusPut(key, state string) wire.PutRequest {
	return wire.PutRequest{Key: key, Schema: "keeppeek.observed-status.v1",
		Document: json.RawMessage(fmt.Sprintf(`{"subject_key":"intents/front-door","state":%q,"observed_at_ms":%d}`, state, time.Now().UnixMilli()))}
}

// leaseDoc is the strict shape of a keeppeek.lease.v1 document.
type leaseDoc struct {
	Holder      string `json:"holder"`
	ClaimedAtMs int64  `json:"claimed_at_ms"`
	RenewedAtMs int64  `json:"renewed_at_ms"`
	Purpose     string `json:"purpose"`
}

func decodeLease(t testing.TB, e wire.Entry) leaseDoc {
	t.Helper()
	var d leaseDoc
	if err := wire.Decode(e.Document, &d); err != nil {
		t.Fatalf("lease document %s: %v", e.Document, err)
	}
	return d
}

// get reads ns:key as c; ok false on NOT_FOUND.
func get(t testing.TB, c *client.Client, key string) (wire.Entry, bool) {
	t.Helper()
	e, err := c.Get(ctxT(t), ns, key)
	if wire.CodeOf(err) == wire.CodeNotFound {
		return e, false
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return e, true
}
