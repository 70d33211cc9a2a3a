package store

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Principals used across the tests.
var (
	admin = policy.Principal{ID: "coordinator", Admin: true}
	alice = policy.Principal{ID: "alice"}
	bob   = policy.Principal{ID: "bob"}
)

// testTimeout bounds every wait in the tests.
const testTimeout = 10 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// openT opens a store on disk in a fresh temp dir and closes it at cleanup.
func openT(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state-store.db")
	return openAt(t, path, opts), path
}

func openAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if r := s.Unavailable(); r != nil {
		s.Close()
		t.Fatalf("store unavailable: %v", r)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func i64(v int64) *int64 { return &v }

// leaseDoc is a valid keeppeek.lease.v1 document.
func leaseDoc(holder string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"holder":%q,"claimed_at_ms":1}`, holder))
}

func putLease(ns, key string) wire.PutRequest {
	return wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1", Document: leaseDoc("w1")}
}

func mustPut(t testing.TB, s *Store, p policy.Principal, req wire.PutRequest) wire.Entry {
	t.Helper()
	e, err := s.Put(ctxT(t), p, req)
	if err != nil {
		t.Fatalf("Put %s:%s: %v", req.Namespace, req.Key, err)
	}
	return e
}

// chanSink is a Sink that never blocks while the watch respects max_pending_updates.
func chanSink(n int) (Sink, chan Message) {
	ch := make(chan Message, n)
	return func(m Message) { ch <- m }, ch
}

func recv(t testing.TB, ch chan Message) Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(testTimeout):
		t.Fatalf("no watch message within %v", testTimeout)
		return Message{}
	}
}

func wantCode(t testing.TB, err error, code wire.Code) {
	t.Helper()
	if got := wire.CodeOf(err); got != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}
