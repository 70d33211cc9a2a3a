package client

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// TestMain runs the tests, removes the stated binary the end-to-end tests built, and checks for leaked
// goroutines (goleak).
func TestMain(m *testing.M) { e2e.Main(m) }

// testTimeout bounds every wait in the tests.
const testTimeout = 30 * time.Second

// Principals of the test environment.
var (
	admin = policy.Principal{ID: "coordinator", Admin: true}
	alice = policy.Principal{ID: "alice"}
	bob   = policy.Principal{ID: "bob"}
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startEnv starts the state service with admin, alice and bob.
func startEnv(t testing.TB) *testenv.Env {
	t.Helper()
	return testenv.Start(t, testenv.Options{Principals: []policy.Principal{admin, alice, bob}})
}

// newClient connects principal to env and returns its client; the connection closes at cleanup.
func newClient(t testing.TB, env *testenv.Env, principal string, opts ...Option) *Client {
	t.Helper()
	c, err := New(env.Connect(t, principal), principal, opts...)
	if err != nil {
		t.Fatalf("New(%s): %v", principal, err)
	}
	return c
}

// Documents of registered schemas.

// preference is a keeppeek.preference.v1 put (user and group namespaces).
func preference(ns, key, layout string) wire.PutRequest {
	doc, _ := json.Marshal(map[string]string{"kind": "display", "layout": layout})
	return wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.preference.v1", Document: doc}
}

// lease is a keeppeek.lease.v1 put (service namespaces).
func lease(ns, key, holder string, at int64) wire.PutRequest {
	return wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1",
		Document: json.RawMessage(fmt.Sprintf(`{"holder":%q,"claimed_at_ms":%d}`, holder, at))}
}

func ptr[T any](v T) *T { return &v }

// layoutOf decodes the layout of a preference document.
func layoutOf(t testing.TB, e wire.Entry) string {
	t.Helper()
	var d struct {
		Layout string `json:"layout"`
	}
	if err := json.Unmarshal(e.Document, &d); err != nil {
		t.Fatalf("decode %s: %v", e.String(), err)
	}
	return d.Layout
}
