package store

import (
	"encoding/json"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/wire"
)

// setNamespaceRevision rewrites the persisted revision of ns in the closed database at path, as a
// store that has lived through that many writes would have left it.
func setNamespaceRevision(t *testing.T, path, ns string, rev uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		var c nsCounter
		if err := json.Unmarshal(b.Get(counterKey(ns)), &c); err != nil {
			return err
		}
		c.Revision = rev
		v, _ := json.Marshal(c)
		return b.Put(counterKey(ns), v)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRevisionsStopAt2To53Minus1: revisions are JSON integers up to 2^53-1 (SPEC sections 4 and 5). A
// put that would leave a namespace unable to take the revisions its entries' removal needs is refused
// QUOTA_EXCEEDED and changes nothing; the deletes and the lease expiry that follow still get their
// revisions, the last at 2^53-1; and the database opens again (one holding a revision of 2^53 does
// not: a put answered OK at 2^53 used to leave the store unavailable at the next start).
func TestRevisionsStopAt2To53Minus1(t *testing.T) {
	opts, clk := withClock(DefaultOptions())
	s, path := openT(t, opts)
	ctx := ctxT(t)
	const ns = "service/tx"
	lease := mustPut(t, s, admin, ttlPut(ns, "lease", 60_000))
	s.Close()
	const top = wire.MaxSafeInteger
	setNamespaceRevision(t, path, ns, top-3)

	s = openAt(t, path, opts)
	if e := mustPut(t, s, admin, putLease(ns, "b")); e.Revision != top-2 {
		t.Fatalf("put at revision %d, want %d", e.Revision, uint64(top-2))
	}
	// Two entries at top-2: one revision each is kept for their removal; a third write has none.
	for _, key := range []string{"b", "c"} {
		_, err := s.Put(ctx, admin, putLease(ns, key))
		wantCode(t, err, wire.CodeQuotaExceeded)
	}
	if r := nsRevision(t, s, ns); r != top-2 {
		t.Fatalf("refused puts moved the revision to %d", r)
	}
	_, ch := watchT(t, s, admin, "w", ns, "")
	rev, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: "b"})
	if err != nil || rev != top-1 {
		t.Fatalf("delete at the bound: revision %d, %v", rev, err)
	}
	clk.advance(time.Duration(lease.TTLMs+1000) * time.Millisecond)
	if ws, _ := watchT(t, s, admin, "w2", ns, ""); ws.SnapshotRevision != top || len(ws.Entries) != 0 {
		t.Fatalf("snapshot after the lease's deadline: %+v", ws) // due leases expire first
	}
	recv(t, ch) // DELETE
	if m := recv(t, ch); m.Event.Kind != wire.UpdateExpire || m.Event.Revision != top {
		t.Fatalf("expiry at the bound: %+v", m.Event)
	}
	_, err = s.Put(ctx, admin, putLease(ns, "d"))
	wantCode(t, err, wire.CodeQuotaExceeded)
	s.Close()

	s = openAt(t, path, opts)
	if r := nsRevision(t, s, ns); r != top {
		t.Fatalf("revision after reopen %d, want 2^53-1", r)
	}
}

// TestOpenRefusesRevisionsWithoutRoomForRemovals: a namespace whose revision leaves its entries no
// revision for their removal (revision + entries > 2^53-1) opens unavailable: a lease of it expiring
// would commit a revision past the contract's integers.
func TestOpenRefusesRevisionsWithoutRoomForRemovals(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	const ns = "service/tx"
	mustPut(t, s, admin, putLease(ns, "a"))
	s.Close()
	setNamespaceRevision(t, path, ns, wire.MaxSafeInteger)
	s, err := Open(path, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Unavailable() == nil {
		t.Fatalf("a namespace at 2^53-1 with an entry opened")
	}
}
