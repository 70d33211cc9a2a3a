package store

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// nsRevision is the namespace revision as List reports it.
func nsRevision(t testing.TB, s *Store, ns string) uint64 {
	t.Helper()
	r, err := s.List(ctxT(t), admin, wire.ListRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("List %s: %v", ns, err)
	}
	return r.Revision
}

// TestExpectedRevisionTable covers every row of the expected_revision table of SPEC section 5, for
// put and delete.
func TestExpectedRevisionTable(t *testing.T) {
	const ns = "service/tx"
	type step struct {
		name    string
		del     bool
		exp     *int64
		code    wire.Code // "" = ok
		current uint64    // current_revision on CONFLICT
		rev     uint64    // revision of an ok reply
	}
	steps := []step{
		{name: "put absent on missing key creates", rev: 1},
		{name: "put absent replaces blindly", rev: 2},
		{name: "put 0 on existing key conflicts", exp: i64(0), code: wire.CodeConflict, current: 2},
		{name: "put N wrong conflicts with current", exp: i64(1), code: wire.CodeConflict, current: 2},
		{name: "put N right replaces", exp: i64(2), rev: 3},
		{name: "delete 0 is invalid", del: true, exp: i64(0), code: wire.CodeInvalidArgument},
		{name: "delete N wrong conflicts", del: true, exp: i64(2), code: wire.CodeConflict, current: 3},
		{name: "delete N right deletes", del: true, exp: i64(3), rev: 4},
		{name: "delete missing is NOT_FOUND", del: true, code: wire.CodeNotFound},
		{name: "delete missing with N is NOT_FOUND", del: true, exp: i64(9), code: wire.CodeNotFound},
		{name: "put N on missing key conflicts with 0", exp: i64(3), code: wire.CodeConflict, current: 0},
		{name: "put 0 on missing key creates", exp: i64(0), rev: 5},
	}
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	for _, st := range steps {
		before := nsRevision(t, s, ns)
		var err error
		var rev uint64
		if st.del {
			rev, err = s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: "k", ExpectedRevision: st.exp})
		} else {
			req := putLease(ns, "k")
			req.ExpectedRevision = st.exp
			var e wire.Entry
			e, err = s.Put(ctx, admin, req)
			rev = e.Revision
		}
		if st.code == "" {
			if err != nil || rev != st.rev {
				t.Fatalf("%s: got rev %d err %v, want rev %d", st.name, rev, err, st.rev)
			}
			if after := nsRevision(t, s, ns); after != before+1 {
				t.Fatalf("%s: namespace revision %d -> %d, want +1", st.name, before, after)
			}
			continue
		}
		wantCode(t, err, st.code)
		var we *wire.Error
		errors.As(err, &we)
		if st.code == wire.CodeConflict {
			if we.CurrentRevision == nil || *we.CurrentRevision != st.current {
				t.Fatalf("%s: current_revision %v, want %d", st.name, we.CurrentRevision, st.current)
			}
		} else if we.CurrentRevision != nil {
			t.Fatalf("%s: current_revision set on %s", st.name, st.code)
		}
		if after := nsRevision(t, s, ns); after != before {
			t.Fatalf("%s: a rejected call advanced the revision %d -> %d", st.name, before, after)
		}
	}
}

// TestCheckOrder follows the check order of SPEC section 5: the first failing check answers.
func TestCheckOrder(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxEntriesPerNamespace = 2
	opts := DefaultOptions()
	opts.Bounds = b
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	mustPut(t, s, admin, putLease(ns, "lease"))
	mustPut(t, s, admin, putLease(ns, "a"))
	big := json.RawMessage(`{"holder":"w1","claimed_at_ms":1,"purpose":"` + strings.Repeat("x", 20000) + `"}`)
	cases := []struct {
		name string
		p    policy.Principal
		req  wire.PutRequest
		code wire.Code
	}{
		{"shape before policy", alice, wire.PutRequest{Namespace: ns, Key: "a//b", Schema: "keeppeek.lease.v1", Document: leaseDoc("w")}, wire.CodeInvalidArgument},
		{"unknown namespace form", admin, wire.PutRequest{Namespace: "foo/x", Key: "a", Schema: "keeppeek.lease.v1", Document: leaseDoc("w")}, wire.CodeInvalidArgument},
		{"document not an object", admin, wire.PutRequest{Namespace: ns, Key: "a", Schema: "keeppeek.lease.v1", Document: json.RawMessage(`[1]`)}, wire.CodeInvalidArgument},
		{"policy before ttl", alice, wire.PutRequest{Namespace: ns, Key: "a", Schema: "keeppeek.lease.v1", Document: leaseDoc("w"), TTLMs: i64(5)}, wire.CodePermissionDenied},
		{"system is nobody's", admin, wire.PutRequest{Namespace: "system", Key: "a", Schema: "keeppeek.worker-status.v1", Document: json.RawMessage(`{}`)}, wire.CodePermissionDenied},
		{"ttl before size", admin, wire.PutRequest{Namespace: ns, Key: "a", Schema: "keeppeek.lease.v1", Document: big, TTLMs: i64(999)}, wire.CodeTTLInvalid},
		{"size before schema", admin, wire.PutRequest{Namespace: ns, Key: "a", Schema: "nope.v1", Document: big}, wire.CodeTooLarge},
		{"schema before guard", admin, wire.PutRequest{Namespace: ns, Key: "a", Schema: "nope.v1", Document: leaseDoc("w"), Guard: &wire.Guard{Key: "lease", Revision: 9}}, wire.CodeSchemaInvalid},
		{"guard before conflict", admin, wire.PutRequest{Namespace: ns, Key: "a", Schema: "keeppeek.lease.v1", Document: leaseDoc("w"), ExpectedRevision: i64(0), Guard: &wire.Guard{Key: "lease", Revision: 9}}, wire.CodeGuardFailed},
		{"conflict before quota", admin, wire.PutRequest{Namespace: ns, Key: "c", Schema: "keeppeek.lease.v1", Document: leaseDoc("w"), ExpectedRevision: i64(5)}, wire.CodeConflict},
		{"quota", admin, wire.PutRequest{Namespace: ns, Key: "c", Schema: "keeppeek.lease.v1", Document: leaseDoc("w")}, wire.CodeQuotaExceeded},
	}
	for _, c := range cases {
		before := nsRevision(t, s, ns)
		_, err := s.Put(ctx, c.p, c.req)
		if got := wire.CodeOf(err); got != c.code {
			t.Errorf("%s: got %v, want %s", c.name, err, c.code)
		}
		if after := nsRevision(t, s, ns); after != before {
			t.Errorf("%s: revision moved %d -> %d", c.name, before, after)
		}
	}
}

// TestGuard covers the fencing guard of SPEC section 5.
func TestGuard(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	lease := mustPut(t, s, admin, putLease(ns, "leases/a"))
	status := func(g *wire.Guard) wire.PutRequest {
		return wire.PutRequest{Namespace: ns, Key: "status/a", Schema: "keeppeek.observed-status.v1",
			Document: json.RawMessage(`{"subject_key":"intents/a","state":"active","observed_at_ms":1}`), Guard: g}
	}
	// Matching guard: commits.
	if _, err := s.Put(ctx, admin, status(&wire.Guard{Key: "leases/a", Revision: int64(lease.Revision)})); err != nil {
		t.Fatalf("guarded put with the right revision: %v", err)
	}
	// Stale guard: GUARD_FAILED with the lease's current revision, nothing changes.
	renewed := mustPut(t, s, admin, putLease(ns, "leases/a"))
	before := nsRevision(t, s, ns)
	_, err := s.Put(ctx, admin, status(&wire.Guard{Key: "leases/a", Revision: int64(lease.Revision)}))
	wantCode(t, err, wire.CodeGuardFailed)
	var we *wire.Error
	errors.As(err, &we)
	if we.CurrentRevision == nil || *we.CurrentRevision != renewed.Revision {
		t.Fatalf("current_revision %v, want %d", we.CurrentRevision, renewed.Revision)
	}
	_, err = s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: "status/a", Guard: &wire.Guard{Key: "leases/a", Revision: int64(lease.Revision)}})
	wantCode(t, err, wire.CodeGuardFailed)
	if after := nsRevision(t, s, ns); after != before {
		t.Fatalf("failed guard moved the revision")
	}
	// Missing guard key: GUARD_FAILED with current_revision 0.
	_, err = s.Put(ctx, admin, status(&wire.Guard{Key: "leases/none", Revision: 1}))
	wantCode(t, err, wire.CodeGuardFailed)
	errors.As(err, &we)
	if we.CurrentRevision == nil || *we.CurrentRevision != 0 {
		t.Fatalf("missing guard key: current_revision %v, want 0", we.CurrentRevision)
	}
	// Shape rules: same key or revision 0 is INVALID_ARGUMENT.
	_, err = s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: "leases/a", Schema: "keeppeek.lease.v1", Document: leaseDoc("w"), Guard: &wire.Guard{Key: "leases/a", Revision: 1}})
	wantCode(t, err, wire.CodeInvalidArgument)
	_, err = s.Put(ctx, admin, status(&wire.Guard{Key: "leases/a", Revision: 0}))
	wantCode(t, err, wire.CodeInvalidArgument)
	// Guarded delete with the current revision works.
	if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: "status/a", Guard: &wire.Guard{Key: "leases/a", Revision: int64(renewed.Revision)}}); err != nil {
		t.Fatalf("guarded delete: %v", err)
	}
}

// TestPolicy checks that the engine enforces SPEC section 2 for every operation.
func TestPolicy(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	pref := json.RawMessage(`{"kind":"ui","preferred_group":"g1"}`)
	mustPut(t, s, alice, wire.PutRequest{Namespace: "user/alice", Key: "prefs", Schema: "keeppeek.preference.v1", Document: pref})
	mustPut(t, s, admin, wire.PutRequest{Namespace: "user/alice", Key: "by-admin", Schema: "keeppeek.preference.v1", Document: pref})
	mustPut(t, s, admin, putLease("service/tx", "k"))
	sink, _ := chanSink(4)
	for _, ns := range []string{"service/tx", "group/g1", "user/alice", "system"} {
		_, gerr := s.Get(ctx, bob, wire.GetRequest{Namespace: ns, Key: "k"})
		_, lerr := s.List(ctx, bob, wire.ListRequest{Namespace: ns})
		_, werr := s.Watch(ctx, bob, wire.WatchRequest{WatchID: "w", Namespace: ns}, sink)
		_, perr := s.Put(ctx, bob, wire.PutRequest{Namespace: ns, Key: "k", Schema: "keeppeek.preference.v1", Document: pref})
		_, derr := s.Delete(ctx, bob, wire.DeleteRequest{Namespace: ns, Key: "k"})
		for _, err := range []error{gerr, lerr, werr, perr, derr} {
			if !errors.Is(err, wire.ErrPermissionDenied) {
				t.Fatalf("bob on %s: got %v, want PERMISSION_DENIED", ns, err)
			}
		}
	}
	// The owner is the writing principal, whatever the namespace.
	e, err := s.Get(ctx, alice, wire.GetRequest{Namespace: "user/alice", Key: "by-admin"})
	if err != nil || e.Owner != "coordinator" {
		t.Fatalf("alice reads admin's entry in her namespace: %+v %v", e, err)
	}
	if _, err := s.Get(ctx, alice, wire.GetRequest{Namespace: "user/alice", Key: "missing"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	// Denial does not depend on whether the key exists.
	if _, err := s.Get(ctx, bob, wire.GetRequest{Namespace: "user/alice", Key: "missing"}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("missing key for bob: %v", err)
	}
}

// TestBoundsAndQuotas covers SPEC section 8: documents, entries, namespaces, total bytes.
func TestBoundsAndQuotas(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxDocumentBytes = 200
	b.MaxEntriesPerNamespace = 3
	b.MaxNamespaces = 2
	b.MaxTotalValueBytes = 400
	opts := DefaultOptions()
	opts.Bounds = b
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	doc := func(n int) json.RawMessage { // a lease document of exactly n compact bytes
		base := `{"holder":"w","claimed_at_ms":1,"purpose":""}`
		return json.RawMessage(`{"holder":"w","claimed_at_ms":1,"purpose":"` + strings.Repeat("p", n-len(base)) + `"}`)
	}
	put := func(ns, key string, n int) error {
		_, err := s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1", Document: doc(n)})
		return err
	}
	if err := put("service/a", "max", 200); err != nil {
		t.Fatalf("document at max_document_bytes: %v", err)
	}
	wantCode(t, put("service/a", "over", 201), wire.CodeTooLarge)
	// Whitespace does not count: the compact size does.
	spaced := json.RawMessage(" {  \"holder\" : \"w\",\n \"claimed_at_ms\" : 1 } ")
	if _, err := s.Put(ctx, admin, wire.PutRequest{Namespace: "service/a", Key: "spaced", Schema: "keeppeek.lease.v1", Document: spaced}); err != nil {
		t.Fatal(err)
	}
	if err := put("service/a", "third", 50); err != nil {
		t.Fatal(err)
	}
	wantCode(t, put("service/a", "fourth", 50), wire.CodeQuotaExceeded) // entries per namespace
	if err := put("service/a", "third", 60); err != nil {               // replacing is not a new entry
		t.Fatalf("replace at the entry bound: %v", err)
	}
	if err := put("service/b", "x", 50); err != nil {
		t.Fatal(err)
	}
	wantCode(t, put("service/c", "x", 50), wire.CodeQuotaExceeded) // namespaces
	st := s.Stats()
	wantCode(t, put("service/b", "y", 400-int(st.TotalBytes)+1), wire.CodeQuotaExceeded) // total bytes
	if after := s.Stats(); after.TotalBytes != st.TotalBytes || after.LiveNamespaces != 2 {
		t.Fatalf("rejected writes changed counters: %+v -> %+v", st, after)
	}
	if err := put("service/b", "y", 400-int(st.TotalBytes)); err != nil {
		t.Fatalf("a put that reaches the byte ceiling exactly: %v", err)
	}
	// An emptied namespace frees its slot; its revision is kept.
	revA := nsRevision(t, s, "service/a")
	for _, k := range []string{"max", "spaced", "third"} {
		if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: "service/a", Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	if got := nsRevision(t, s, "service/a"); got != revA+3 {
		t.Fatalf("empty namespace revision %d, want %d", got, revA+3)
	}
	if err := put("service/c", "x", 50); err != nil {
		t.Fatalf("namespace slot not freed: %v", err)
	}
}

// TestTwoWritersSameExpectedRevision: exactly one of two CAS writers wins, every round (seed
// acceptance scenario 1).
func TestTwoWritersSameExpectedRevision(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	cur := mustPut(t, s, admin, putLease(ns, "intents/front-door")).Revision
	for round := 0; round < 200; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		revs := make([]uint64, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := putLease(ns, "intents/front-door")
				req.ExpectedRevision = i64(int64(cur))
				e, err := s.Put(ctx, admin, req)
				errs[i], revs[i] = err, e.Revision
			}()
		}
		wg.Wait()
		wins := 0
		for i := range 2 {
			if errs[i] == nil {
				wins++
				cur = revs[i]
			} else if !errors.Is(errs[i], wire.ErrConflict) {
				t.Fatalf("round %d: loser got %v, want CONFLICT", round, errs[i])
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d writers won", round, wins)
		}
	}
}

// TestListPaging covers list order, prefixes, paging and the revision field.
func TestListPaging(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	const ns = "service/tx"
	keys := []string{"a", "a/1", "a/2", "a0", "b/1", "b/2", "b/3"}
	for _, k := range keys {
		mustPut(t, s, admin, putLease(ns, k))
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		r, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, AfterKey: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.Revision != uint64(len(keys)) {
			t.Fatalf("revision %d", r.Revision)
		}
		for _, e := range r.Entries {
			got = append(got, e.Key)
		}
		if r.NextAfterKey == "" {
			break
		}
		after = r.NextAfterKey
	}
	if strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("paged list %v", got)
	}
	r, _ := s.List(ctx, admin, wire.ListRequest{Namespace: ns, KeyPrefix: "a/"})
	if len(r.Entries) != 2 || r.NextAfterKey != "" {
		t.Fatalf("prefix a/: %+v", r)
	}
	r, _ = s.List(ctx, admin, wire.ListRequest{Namespace: ns, Limit: 7})
	if len(r.Entries) != 7 || r.NextAfterKey != "" {
		t.Fatalf("exact page must not announce more: %+v", r.NextAfterKey)
	}
	r, err := s.List(ctx, admin, wire.ListRequest{Namespace: "service/never"})
	if err != nil || r.Revision != 0 || r.Entries == nil || len(r.Entries) != 0 {
		t.Fatalf("never-written namespace: %+v %v", r, err)
	}
}
