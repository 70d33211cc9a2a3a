package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

func TestConnectUsesThePrincipalsInbox(t *testing.T) {
	env := startEnv(t)
	nc, err := Connect(env.URL, "alice", nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if inbox := nc.NewRespInbox(); !strings.HasPrefix(inbox, "_INBOX.alice.") {
		t.Errorf("reply inbox %q is not under _INBOX.alice.", inbox)
	}
	if nc.Opts.Name != "keeppeek-alice" || nc.Opts.MaxReconnect != -1 {
		t.Errorf("name %q, max reconnects %d", nc.Opts.Name, nc.Opts.MaxReconnect)
	}
	c, err := New(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctxT(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if !contains(info.Features, wire.FeatureStateStore) || info.Epoch == "" || info.Bounds != wire.DefaultBounds() {
		t.Errorf("info = %+v", info)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestGetPutDeleteListRoundTrip(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, admin.ID)
	ctx := ctxT(t)
	const ns = "service/transcoder-a"

	req := lease(ns, "leases/a", "worker-1", 100)
	req.Document = []byte("{ \"holder\" : \"worker-1\",\n \"claimed_at_ms\": 100 }")
	req.ExpectedRevision = ptr(int64(0))
	a1, err := c.Put(ctx, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if a1.Namespace != ns || a1.Key != "leases/a" || a1.Owner != admin.ID || a1.Revision != 1 ||
		a1.Schema != "keeppeek.lease.v1" || string(a1.Document) != `{"holder":"worker-1","claimed_at_ms":100}` {
		t.Fatalf("stored entry = %+v (%s)", a1, a1.Document)
	}
	got, err := c.Get(ctx, ns, "leases/a")
	if err != nil || !entryEqual(got, a1) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, a1)
	}

	cas := lease(ns, "leases/a", "worker-2", 200)
	cas.ExpectedRevision = ptr(int64(a1.Revision))
	a2, err := c.Put(ctx, cas)
	if err != nil || a2.Revision != 2 || a2.CreatedAtMs != a1.CreatedAtMs {
		t.Fatalf("compare-and-set = %+v, %v", a2, err)
	}
	ttl := lease(ns, "leases/b", "worker-3", 300)
	ttl.TTLMs = ptr(int64(60_000))
	b, err := c.Put(ctx, ttl)
	if err != nil || b.Revision != 3 || b.TTLMs != 60_000 || b.ExpiresAtMs < b.UpdatedAtMs+60_000 {
		t.Fatalf("put with lease = %+v, %v", b, err)
	}

	l, err := c.List(ctx, wire.ListRequest{Namespace: ns, KeyPrefix: "leases/"})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if l.Revision != 3 || l.NextAfterKey != "" || len(l.Entries) != 2 || !entryEqual(l.Entries[0], a2) || !entryEqual(l.Entries[1], b) {
		t.Fatalf("List = %+v", l)
	}
	page, err := c.List(ctx, wire.ListRequest{Namespace: ns, Limit: 1})
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Key != "leases/a" || page.NextAfterKey != "leases/a" {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	page, err = c.List(ctx, wire.ListRequest{Namespace: ns, Limit: 1, AfterKey: page.NextAfterKey})
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Key != "leases/b" || page.NextAfterKey != "" {
		t.Fatalf("second page = %+v, %v", page, err)
	}
	empty, err := c.List(ctx, wire.ListRequest{Namespace: "service/never-written"})
	if err != nil || empty.Revision != 0 || len(empty.Entries) != 0 || empty.Entries == nil {
		t.Fatalf("List of an empty namespace = %+v, %v", empty, err)
	}

	rev, err := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "leases/a", ExpectedRevision: ptr(int64(a2.Revision))})
	if err != nil || rev != 4 {
		t.Fatalf("Delete = %d, %v; want revision 4", rev, err)
	}
	if _, err := c.Get(ctx, ns, "leases/a"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get after delete: %v, want NOT_FOUND", err)
	}
}

// entryEqual compares entries field by field (Document by bytes).
func entryEqual(a, b wire.Entry) bool {
	return a.Namespace == b.Namespace && a.Key == b.Key && a.Schema == b.Schema && a.Owner == b.Owner &&
		a.Revision == b.Revision && a.CreatedAtMs == b.CreatedAtMs && a.UpdatedAtMs == b.UpdatedAtMs &&
		a.TTLMs == b.TTLMs && a.ExpiresAtMs == b.ExpiresAtMs && string(a.Document) == string(b.Document)
}

func TestErrorsAreWireErrors(t *testing.T) {
	env := startEnv(t)
	ctx := ctxT(t)
	coord := newClient(t, env, admin.ID)
	al := newClient(t, env, alice.ID)
	const ns = "service/transcoder-a"
	first, err := coord.Put(ctx, lease(ns, "leases/a", "w1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Put(ctx, lease(ns, "leases/other", "w1", 1)); err != nil {
		t.Fatal(err)
	}

	createAgain := lease(ns, "leases/a", "w2", 2)
	createAgain.ExpectedRevision = ptr(int64(0))
	stale := lease(ns, "leases/a", "w2", 2)
	stale.ExpectedRevision = ptr(int64(first.Revision + 7))
	casMissing := lease(ns, "leases/missing", "w2", 2)
	casMissing.ExpectedRevision = ptr(int64(3))
	guarded := lease(ns, "leases/a", "w2", 2)
	guarded.Guard = &wire.Guard{Key: "leases/nobody", Revision: 1}
	shortTTL := lease(ns, "leases/a", "w2", 2)
	shortTTL.TTLMs = ptr(int64(500))
	unknownSchema := lease(ns, "leases/a", "w2", 2)
	unknownSchema.Schema = "keeppeek.nope.v1"

	cases := []struct {
		name    string
		call    func() error
		want    *wire.Error
		current *uint64
	}{
		{"create-only on an existing key", func() error { _, err := coord.Put(ctx, createAgain); return err }, wire.ErrConflict, ptr(first.Revision)},
		{"stale expected_revision", func() error { _, err := coord.Put(ctx, stale); return err }, wire.ErrConflict, ptr(first.Revision)},
		{"expected_revision on a missing key", func() error { _, err := coord.Put(ctx, casMissing); return err }, wire.ErrConflict, ptr(uint64(0))},
		{"guard on a missing key", func() error { _, err := coord.Put(ctx, guarded); return err }, wire.ErrGuardFailed, ptr(uint64(0))},
		{"get of a missing key", func() error { _, err := coord.Get(ctx, ns, "leases/missing"); return err }, wire.ErrNotFound, nil},
		{"delete of a missing key", func() error {
			_, err := coord.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "leases/missing"})
			return err
		}, wire.ErrNotFound, nil},
		{"alice writes service/x", func() error { _, err := al.Put(ctx, lease("service/x", "leases/a", "w1", 1)); return err }, wire.ErrPermissionDenied, nil},
		{"alice reads user/bob", func() error { _, err := al.Get(ctx, "user/bob", "k"); return err }, wire.ErrPermissionDenied, nil},
		{"alice lists system", func() error { _, err := al.List(ctx, wire.ListRequest{Namespace: "system"}); return err }, wire.ErrPermissionDenied, nil},
		{"double slash in a key", func() error { _, err := coord.Get(ctx, ns, "a//b"); return err }, wire.ErrInvalidArgument, nil},
		{"unknown namespace form", func() error { _, err := coord.Put(ctx, lease("foo/x", "k", "w1", 1)); return err }, wire.ErrInvalidArgument, nil},
		{"create-only delete", func() error {
			_, err := coord.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "leases/a", ExpectedRevision: ptr(int64(0))})
			return err
		}, wire.ErrInvalidArgument, nil},
		{"list limit over 256", func() error { _, err := coord.List(ctx, wire.ListRequest{Namespace: ns, Limit: 257}); return err }, wire.ErrInvalidArgument, nil},
		{"ttl under a second", func() error { _, err := coord.Put(ctx, shortTTL); return err }, wire.ErrTTLInvalid, nil},
		{"unregistered schema", func() error { _, err := coord.Put(ctx, unknownSchema); return err }, wire.ErrSchemaInvalid, nil},
		{"ack of an unknown watch", func() error { return coord.Ack(ctx, "nope", 0) }, wire.ErrNotFound, nil},
		{"unwatch of an unknown watch", func() error { return coord.Unwatch(ctx, "nope") }, wire.ErrNotFound, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var we *wire.Error
			if !errors.As(err, &we) || !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %s", err, tc.want.Code)
			}
			switch {
			case tc.current == nil && we.CurrentRevision != nil:
				t.Errorf("current_revision %d on %s", *we.CurrentRevision, we.Code)
			case tc.current != nil && (we.CurrentRevision == nil || *we.CurrentRevision != *tc.current):
				t.Errorf("current_revision = %v, want %d", we.CurrentRevision, *tc.current)
			}
		})
	}
	// Nothing above changed leases/a.
	if got, err := coord.Get(ctx, ns, "leases/a"); err != nil || !entryEqual(got, first) {
		t.Fatalf("leases/a = %+v, %v; want it unchanged", got, err)
	}
}

func TestNoStateServerIsUnavailable(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID, WithPrefix("nobody"))
	_, err := c.Get(ctxT(t), "user/alice", "k")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || !strings.Contains(we.Message, "no state server answered") {
		t.Fatalf("err = %#v, want UNAVAILABLE saying no state server answered", err)
	}
}

func TestTimeoutIsReturnedAsIs(t *testing.T) {
	env := startEnv(t)
	nc := env.Connect(t, alice.ID)
	// A subscriber that never answers: the request times out instead of finding no responders.
	sub, err := nc.SubscribeSync("silent.state.v1.alice.get")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	c, err := New(nc, alice.ID, WithPrefix("silent"), WithRequestTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Get(context.Background(), "user/alice", "k") // no deadline: the client's timeout applies
	if !errors.Is(err, context.DeadlineExceeded) || wire.CodeOf(err) != "" {
		t.Fatalf("err = %#v, want a wrapped context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the request timeout was not applied: took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "user/alice", "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
}

func TestRequestIDsAreEchoedUnderConcurrency(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			_, err := c.Put(ctx, preference("user/alice", "prefs/"+string(rune('a'+i%26))+"x", "l"))
			errs <- err
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if id := c.lastID.Load(); id != 32 {
		t.Fatalf("last request id %d, want 32", id)
	}
}
