package store

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// A reload whose bounds wait for the next start lowers the store's quota bounds at once
// (LowerQuotas): a store over its bounds is not served when it opens (SPEC section 10), so one that
// went on admitting writes under the old bounds could grow past what that start serves. Bounds under
// what the store holds are refused, naming what, and change nothing; bounds taken are the bounds
// writes are admitted under (and that info reports) from then on; a higher bound changes nothing; and
// the store opens again under the lowered bounds.
func TestLowerQuotas(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	ctx := ctxT(t)
	for _, k := range []string{"a", "b", "c"} {
		mustPut(t, s, admin, putLease("service/tx", k))
	}
	mustPut(t, s, admin, putLease("service/rx", "a"))
	docLen := int64(len(leaseDoc("w1")))
	was := s.Bounds()
	for _, tc := range []struct {
		set  func(*wire.Bounds)
		want string
	}{
		{func(b *wire.Bounds) { b.MaxEntriesPerNamespace = 2 }, `namespace "service/tx" holds 3 entries, over max_entries_per_namespace 2`},
		{func(b *wire.Bounds) { b.MaxNamespaces = 1 }, "2 namespaces hold entries, over max_namespaces 1"},
		{func(b *wire.Bounds) { b.MaxTotalValueBytes = 4*docLen - 1 }, "over max_total_value_bytes"},
		{func(b *wire.Bounds) { b.MaxDocumentBytes = docLen - 1 }, "over max_document_bytes"},
	} {
		b := was
		tc.set(&b)
		err := s.LowerQuotas(b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("LowerQuotas under what the store holds: %v, want it to say %q", err, tc.want)
		}
		if s.Bounds() != was || s.Info().Bounds != was {
			t.Fatalf("a refused LowerQuotas changed the bounds: %+v", s.Bounds())
		}
	}
	mustPut(t, s, admin, putLease("service/tx", "d")) // still admitted under the bounds it opened with

	lowered := was
	lowered.MaxEntriesPerNamespace, lowered.MaxDocumentBytes = 4, docLen
	b := lowered
	b.MaxPendingUpdates, b.MaxNamespaces = 1, was.MaxNamespaces+1 // not a quota bound; a higher one
	if err := s.LowerQuotas(b); err != nil {
		t.Fatalf("LowerQuotas to what the store holds: %v", err)
	}
	if s.Bounds() != lowered || s.Info().Bounds != lowered {
		t.Fatalf("bounds after LowerQuotas: %+v, info %+v, want %+v", s.Bounds(), s.Info().Bounds, lowered)
	}
	_, err := s.Put(ctx, admin, putLease("service/tx", "e"))
	wantCode(t, err, wire.CodeQuotaExceeded)
	mustPut(t, s, admin, putLease("service/tx", "a")) // a rewrite adds no entry
	_, err = s.Put(ctx, admin, wire.PutRequest{Namespace: "service/rx", Key: "b", Schema: "keeppeek.lease.v1", Document: leaseDoc("w12")})
	wantCode(t, err, wire.CodeTooLarge)
	if err := s.LowerQuotas(was); err != nil || s.Bounds() != lowered {
		t.Fatalf("LowerQuotas to higher bounds: %v, bounds %+v, want them unchanged", err, s.Bounds())
	}

	// A put checked its document against the bound in force when it came in; the commit checks it
	// again against the bound in force when it is staged.
	s.commitMu.Lock()
	_, err = newStage(s, s.nowMs()).stagePut(&mutation{kind: mutPut, principal: admin.ID, ns: "service/rx", key: "b",
		schema: "keeppeek.lease.v1", doc: leaseDoc("w12")})
	s.commitMu.Unlock()
	wantCode(t, err, wire.CodeTooLarge)

	s.Close()
	opts := DefaultOptions()
	opts.Bounds = lowered
	openAt(t, path, opts) // fails the test if the store is not served under the lowered bounds
}

// gateObserver holds the commit it is armed for between its write to the database and its apply to
// memory: the write is then committed but not yet in what the store holds.
type gateObserver struct {
	nopObserver
	mu      sync.Mutex
	armed   bool
	blocked chan struct{}
	release chan struct{}
}

func (g *gateObserver) Committed(int, time.Duration) {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.blocked)
		<-g.release
	}
}

// LowerQuotas waits for a commit under way: a write staged under the old bounds and written to the
// database, not yet applied to memory, counts in what the store holds. Checked without waiting, it
// would not, and the lowered bound would be taken with the store about to hold more.
func TestLowerQuotasWaitsForACommitUnderWay(t *testing.T) {
	g := &gateObserver{blocked: make(chan struct{}), release: make(chan struct{})}
	opts := DefaultOptions()
	opts.Observer = g
	s, _ := openT(t, opts)
	ctx := ctxT(t)
	for _, k := range []string{"a", "b", "c"} {
		mustPut(t, s, admin, putLease("service/tx", k))
	}
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	put := make(chan error, 1)
	go func() { _, err := s.Put(ctx, admin, putLease("service/tx", "d")); put <- err }()
	select {
	case <-g.blocked:
	case <-time.After(testTimeout):
		t.Fatal("the put never committed")
	}
	b := s.Bounds()
	b.MaxEntriesPerNamespace = 3
	lowered := make(chan error, 1)
	go func() { lowered <- s.LowerQuotas(b) }()
	// LowerQuotas may not return while the commit is held; if it does, it must have refused.
	var err error
	returned := false
	select {
	case err = <-lowered:
		returned = true
	case <-time.After(200 * time.Millisecond):
	}
	close(g.release)
	if !returned {
		err = <-lowered
	}
	if perr := <-put; perr != nil {
		t.Fatalf("the put under way: %v", perr)
	}
	if err == nil {
		raw, _ := json.Marshal(s.Bounds())
		t.Fatalf("LowerQuotas took max_entries_per_namespace 3 while a fourth entry was being committed; the store holds %+v, bounds %s",
			s.Stats().PerNamespace, raw)
	}
	if !strings.Contains(err.Error(), "holds 4 entries, over max_entries_per_namespace 3") {
		t.Fatalf("LowerQuotas: %v", err)
	}
}
