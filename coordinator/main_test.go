package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait in the tests.
const testTimeout = 10 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newCoordinator connects principal to env and returns its Coordinator.
func newCoordinator(t testing.TB, env *testenv.Env, principal string) *Coordinator {
	t.Helper()
	return coordinatorOn(t, env.Connect(t, principal), principal)
}

func coordinatorOn(t testing.TB, nc *nats.Conn, principal string) *Coordinator {
	t.Helper()
	cl, err := client.New(nc, principal)
	if err != nil {
		t.Fatalf("client.New(%s): %v", principal, err)
	}
	c, err := New(cl)
	if err != nil {
		t.Fatalf("New(%s): %v", principal, err)
	}
	return c
}

// intentOf decodes the intent document of e.
func intentOf(t testing.TB, e wire.Entry) MediaIntent {
	t.Helper()
	in, err := decodeIntent(&e)
	if err != nil {
		t.Fatalf("decode %s: %v", e.String(), err)
	}
	return in
}

// mustGet reads namespace/key as the Coordinator's principal.
func mustGet(t testing.TB, c *Coordinator, namespace, key string) wire.Entry {
	t.Helper()
	e, err := c.Client().Get(ctxT(t), namespace, key)
	if err != nil {
		t.Fatalf("get %s:%s: %v", namespace, key, err)
	}
	return e
}

// wantCode fails unless err is a *wire.Error with code.
func wantCode(t testing.TB, err error, code wire.Code, what string) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("%s: error %v, want %s", what, err, code)
	}
}

func params(t testing.TB, kv ...string) map[string]json.RawMessage {
	t.Helper()
	if len(kv)%2 != 0 {
		t.Fatalf("params: odd arguments")
	}
	out := map[string]json.RawMessage{}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			out[kv[i]] = nil
			continue
		}
		out[kv[i]] = json.RawMessage(kv[i+1])
	}
	return out
}

// mustOfflineClient returns a client on a connection that was never opened to a server: for tests of
// what is decided locally.
func mustOfflineClient(t testing.TB) *client.Client {
	t.Helper()
	cl, err := client.New(&nats.Conn{}, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
