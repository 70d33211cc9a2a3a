package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2EQuotasOverTheWire drives the quota bounds of SPEC section 8 at their exact limits and one
// past them through one real stated configured with small ones (4 entries per namespace, 4
// namespaces holding entries, 400 bytes of documents in all, an ack deadline of 1 s): QUOTA_EXCEEDED
// comes after the state checks, a refused write stores, reserves and evicts nothing, a replacement
// counts only what it adds, deletes and expiries give the room back, and leases overdue at a restart
// are purged before the server serves, one revision each, their bytes leaving the counter. It ends
// with an ACK_TIMEOUT close, which must not come before the deadline.
func TestE2EQuotasOverTheWire(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: confPrincipals, Extra: "[bounds]\nmax_entries_per_namespace = 4\nmax_namespaces = 4\n" +
		"max_total_value_bytes = 400\nack_deadline_ms = 1000\n"})
	s.Start()
	c := dialRaw(t, s, confPrincipals, "coordinator")
	put := func(ns, key, doc, extra string) reply { return c.call(wire.OpPut, putLeaseRaw(ns, key, doc, extra)) }
	revision := func(ns string, want uint64, keys ...string) {
		t.Helper()
		l := c.call(wire.OpList, fmt.Sprintf(`{"namespace":%q}`, ns)).ok(t)
		var got []string
		for _, e := range l.res.Entries {
			got = append(got, e.Key)
		}
		if *l.res.Revision != want || fmt.Sprint(got) != fmt.Sprint(keys) {
			t.Fatalf("%s: revision %d, keys %v; want %d, %v", ns, *l.res.Revision, got, want, keys)
		}
	}
	want := wire.DefaultBounds()
	want.MaxEntriesPerNamespace, want.MaxNamespaces, want.MaxTotalValueBytes, want.AckDeadlineMs = 4, 4, 400, 1000
	if r := c.call(wire.OpInfo, `{}`).ok(t); *r.res.Bounds != want {
		t.Fatalf("info bounds %+v, want %+v", *r.res.Bounds, want)
	}

	// max_entries_per_namespace: 4 entries, then the fifth key is refused; state errors come first.
	for _, k := range []string{"a", "b", "c", "d"} {
		put("service/qa", k, smallLease, "").ok(t) // 34 bytes each
	}
	put("service/qa", "e", smallLease, "").code(t, wire.CodeQuotaExceeded)
	put("service/qa", "e", smallLease, `,"expected_revision":3`).current(t, wire.CodeConflict, 0)
	put("service/qa", "e", smallLease, `,"guard":{"key":"a","revision":2}`).current(t, wire.CodeGuardFailed, 1)
	c.call(wire.OpPut, `{"namespace":"service/qa","key":"e","schema":"keeppeek.nope.v1","document":{}}`).code(t, wire.CodeSchemaInvalid)
	put("service/qa", "e", smallLease, `,"ttl_ms":10`).code(t, wire.CodeTTLInvalid)
	c.call(wire.OpGet, `{"namespace":"service/qa","key":"e"}`).code(t, wire.CodeNotFound)
	revision("service/qa", 4, "a", "b", "c", "d")
	put("service/qa", "a", smallLease, "").ok(t) // a replacement is no new entry: revision 5
	c.call(wire.OpDelete, `{"namespace":"service/qa","key":"d"}`).ok(t)
	put("service/qa", "e", smallLease, "").ok(t) // 7
	revision("service/qa", 7, "a", "b", "c", "e")

	// max_namespaces: service/qa holds entries; three more namespaces fill the bound.
	for _, ns := range []string{"service/qb", "service/qc", "service/qd"} {
		put(ns, "k", smallLease, "").ok(t)
	}
	put("service/qe", "k", smallLease, "").code(t, wire.CodeQuotaExceeded)
	revision("service/qe", 0)                     // nothing reserved: still never written
	put("service/qd", "k2", smallLease, "").ok(t) // a namespace that holds entries takes more
	c.call(wire.OpDelete, `{"namespace":"service/qc","key":"k"}`).ok(t)
	put("service/qe", "k", smallLease, "").ok(t) // the emptied namespace no longer counts
	revision("service/qc", 2)

	// max_total_value_bytes: 8 small documents, then one that fills the 400 bytes exactly.
	small := len(smallLease)
	fill := 400 - 8*small
	put("service/qd", "fill", leaseBody(t, fill), "").ok(t) // revision 3 of service/qd
	put("service/qd", "one", smallLease, "").code(t, wire.CodeQuotaExceeded)
	put("service/qd", "fill", leaseBody(t, fill+1), "").code(t, wire.CodeQuotaExceeded) // a replacement counts what it adds
	put("service/qb", "k", holderDoc(t, small+13), "").code(t, wire.CodeQuotaExceeded)  // elsewhere too
	put("service/qd", "fill", leaseBody(t, fill-1), "").ok(t)                           // 399
	put("service/qb", "k", holderDoc(t, small+1), "").ok(t)                             // 400 again
	put("service/qb", "k", holderDoc(t, small+2), "").code(t, wire.CodeQuotaExceeded)
	revision("service/qd", 4, "fill", "k", "k2")
	if r := c.call(wire.OpGet, `{"namespace":"service/qb","key":"k"}`).ok(t); r.res.Entry.Revision != 2 || len(r.res.Entry.Document) != small+1 {
		t.Fatalf("service/qb k after the refused replacement: %s", r.raw)
	}

	// An expiry gives its entry and its bytes back. The watch acks at once: the deadline is 1 s.
	sub := c.subscribeWatch("fill")
	c.call(wire.OpWatch, `{"watch_id":"fill","namespace":"service/qd","key_prefix":"fill"}`).ok(t)
	put("service/qd", "fill", leaseBody(t, fill-1), `,"ttl_ms":1000`).ok(t) // revision 5
	if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdatePut || m.m.Revision != 5 {
		t.Fatalf("lease update %s", m.raw)
	}
	c.call(wire.OpAck, `{"watch_id":"fill","applied_sequence":1}`).ok(t)
	if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdateExpire || m.m.Revision != 6 || m.m.WatchSequence != 2 {
		t.Fatalf("expiry update %s", m.raw)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"fill"}`).ok(t)
	put("service/qd", "after", leaseBody(t, fill-1), "").ok(t) // its bytes are free again: revision 7
	revision("service/qd", 7, "after", "k", "k2")

	// A lease overdue at a restart is purged before the server serves: one revision, its bytes freed.
	c.call(wire.OpDelete, `{"namespace":"service/qd","key":"after"}`).ok(t)
	short := put("service/qb", "short", leaseBody(t, fill-1), `,"ttl_ms":1000`).ok(t).res.Entry // revision 3 of service/qb; 400 bytes
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	if wait := time.Until(time.UnixMilli(short.ExpiresAtMs + 1)); wait > 0 {
		time.Sleep(wait) // the lease must be overdue when stated starts again: time itself must pass
	}
	s.Start()
	c = dialRaw(t, s, confPrincipals, "coordinator")
	revision("service/qb", 4, "k")
	c.call(wire.OpGet, `{"namespace":"service/qb","key":"short"}`).code(t, wire.CodeNotFound)
	put("service/qd", "after", leaseBody(t, fill-1), "").ok(t) // exactly 400 bytes again
	put("service/qd", "more", smallLease, "").code(t, wire.CodeQuotaExceeded)

	// ACK_TIMEOUT: an update left unacknowledged closes its watch, not before ack_deadline_ms.
	sub = c.subscribeWatch("late")
	c.call(wire.OpWatch, `{"watch_id":"late","namespace":"service/qa","key_prefix":"a"}`).ok(t)
	sent := time.Now()
	put("service/qa", "a", smallLease, "").ok(t)
	if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdatePut || m.m.WatchSequence != 1 {
		t.Fatalf("update %s", m.raw)
	}
	m := nextWatchMsg(t, sub)
	if m.m.Kind != wire.UpdateClosed || m.m.Reason != wire.CloseAckTimeout || m.m.WatchID != "late" {
		t.Fatalf("after an unacknowledged update: %s, want CLOSED ACK_TIMEOUT", m.raw)
	}
	if waited := time.Since(sent); waited < time.Second {
		t.Fatalf("ACK_TIMEOUT after %v, before the 1 s deadline", waited)
	}
	c.call(wire.OpAck, `{"watch_id":"late","applied_sequence":1}`).code(t, wire.CodeNotFound)
	c.call(wire.OpWatch, `{"watch_id":"late","namespace":"service/qa","key_prefix":"a"}`).ok(t)
	c.call(wire.OpUnwatch, `{"watch_id":"late"}`).ok(t)
	noMessage(t, sub, "after the ACK_TIMEOUT close")
}

// holderDoc is a lease document of exactly size bytes (32 to 95), its holder padded.
func holderDoc(t *testing.T, size int) string {
	t.Helper()
	n := size - len(`{"holder":"","claimed_at_ms":1}`)
	if n < 1 || n > 64 {
		t.Fatalf("a lease document with a holder cannot be %d bytes", size)
	}
	return `{"holder":"` + strings.Repeat("w", n) + `","claimed_at_ms":1}`
}
