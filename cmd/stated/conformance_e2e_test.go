package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// confPrincipals are the conformance test's principals: two admins and three plain principals, so
// that four of them can fill max_watches (4 x 256) and a fifth find it full.
var confPrincipals = []e2e.Principal{
	{ID: "coordinator", Admin: true, Password: "coord-pw"},
	{ID: "ops", Admin: true, Password: "ops-pw"},
	{ID: "alice", Password: "alice-pw"},
	{ID: "bob", Password: "bob-pw"},
	{ID: "carol", Password: "carol-pw"},
}

// TestE2EWireConformance drives the rules of SPEC sections 5 to 8, as a client sees them over NATS,
// through one real stated with the default bounds: requests are hand-written JSON and every reply is
// checked field by field (checkReply) before its values. Each group uses namespaces of its own, so
// revisions are known exactly. The watch-count group runs first and alone: it fills max_watches.
func TestE2EWireConformance(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: confPrincipals, Extra: "[state_store.settings.\"service/settings\"]\n"})
	s.Start()
	dial := func(t *testing.T, p string) *rawConn { return dialRaw(t, s, confPrincipals, p) }

	t.Run("watch count bounds", func(t *testing.T) { confWatchCounts(t, dial) })
	t.Run("groups", func(t *testing.T) {
		for _, g := range []struct {
			name string
			run  func(*testing.T, func(*testing.T, string) *rawConn)
		}{
			{"envelope", confEnvelope},
			{"shape", confShape},
			{"check order", confCheckOrder},
			{"expected_revision", confExpectedRevision},
			{"guard", confGuard},
			{"ttl", confTTL},
			{"list", confList},
			{"watch", confWatch},
			{"overflow", confOverflow},
			{"watch race", confWatchRace},
			{"document bytes", confDocumentBytes},
			{"pages over max_payload", confBigPages},
			{"snapshot bytes", confSnapshotBytes},
			{"info", confInfo},
			{"settings namespace", confSettings},
			{"go client", func(t *testing.T, _ func(*testing.T, string) *rawConn) { confGoClient(t, s) }},
		} {
			t.Run(g.name, func(t *testing.T) {
				t.Parallel()
				g.run(t, dial)
			})
		}
	})
}

// opBodies are a valid request of each op (without request_id), on namespaces no other group uses.
var opBodies = map[wire.Op]string{
	wire.OpGet:     `{"namespace":"service/env","key":"k"}`,
	wire.OpPut:     putLeaseRaw("service/env", "k", smallLease, ""),
	wire.OpDelete:  `{"namespace":"service/env","key":"k"}`,
	wire.OpList:    `{"namespace":"service/env"}`,
	wire.OpWatch:   `{"watch_id":"env","namespace":"service/env"}`,
	wire.OpUnwatch: `{"watch_id":"env"}`,
	wire.OpAck:     `{"watch_id":"env","applied_sequence":0}`,
	wire.OpInfo:    `{}`,
}

// withID puts request_id (as its JSON text) first in body.
func withID(body, id string) string {
	rest := strings.TrimPrefix(body, "{")
	if rest == "}" {
		return `{"request_id":` + id + `}`
	}
	return `{"request_id":` + id + `,` + rest
}

// confEnvelope: SPEC section 5's envelope. A request that is not a JSON object gets request_id 0 and
// INVALID_ARGUMENT; the request_id of every other request is echoed, up to 2^53-1; one outside 0 to
// 2^53-1 (or not an integer) is INVALID_ARGUMENT, for info too, and the reply then carries 0, the one
// id the contract's range always holds; an unknown or misspelt field is INVALID_ARGUMENT. None of these
// changes anything.
func confEnvelope(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	for _, op := range wire.Ops {
		t.Run(string(op), func(t *testing.T) {
			c := &rawConn{t: t, nc: c.nc, principal: c.principal}
			for _, body := range []string{`not json`, `[]`, `null`, `"x"`, `{"request_id":1`, `{"request_id":1}}`, `7`} {
				c.send(op, body, 0).code(t, wire.CodeInvalidArgument)
			}
			if op != wire.OpInfo { // info takes an empty body for {}
				c.send(op, ``, 0).code(t, wire.CodeInvalidArgument)
			}
			valid := opBodies[op]
			for _, id := range []string{`-1`, `9007199254740992`, `18446744073709551616`, `1.5`, `1e3`, `"5"`, `true`} {
				c.send(op, withID(valid, id), 0).code(t, wire.CodeInvalidArgument)
			}
			r := c.send(op, withID(valid, "9007199254740991"), wire.MaxSafeInteger)
			if op == wire.OpInfo {
				r.ok(t)
			}
			for _, extra := range []string{`"owner":"x"`, `"Namespace":"service/env"`, `"bogus":null`, `"Request_ID":3`} {
				body := strings.TrimSuffix(valid, "}")
				if body != "{" {
					body += ","
				}
				c.call(op, body+extra+"}").code(t, wire.CodeInvalidArgument)
			}
		})
	}
	// None of the refused puts and deletes changed anything; the valid ones (request_id 2^53-1) did:
	// one put, then one delete.
	list := c.call(wire.OpList, `{"namespace":"service/env"}`).ok(t)
	if *list.res.Revision != 2 || len(list.res.Entries) != 0 {
		t.Fatalf("service/env after the envelope cases: %s, want revision 2 and no entries", list.raw)
	}
}

// confShape: check (1) of SPEC section 5 and the identifiers of section 1 that requests carry: a
// missing or empty required field, a document that is not an object, a malformed identifier: all
// INVALID_ARGUMENT, nothing changed, the namespace revision unmoved.
func confShape(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/shape"
	c.call(wire.OpPut, putLeaseRaw(ns, "k", smallLease, "")).ok(t)
	long := func(n int, seg string) string { return strings.Repeat(seg, n) }
	key256 := long(128, "a/")[:255] + "b" // 256 bytes of valid segments
	id63 := "p" + long(62, "x")
	wid64 := long(64, "w")
	cases := []struct {
		name string
		op   wire.Op
		body string
		ok   bool
	}{
		{"get without key", wire.OpGet, `{"namespace":"service/shape"}`, false},
		{"get with empty key", wire.OpGet, `{"namespace":"service/shape","key":""}`, false},
		{"get without namespace", wire.OpGet, `{"key":"k"}`, false},
		{"namespace with unknown form", wire.OpGet, `{"namespace":"foo/x","key":"k"}`, false},
		{"system with an id", wire.OpGet, `{"namespace":"system/x","key":"k"}`, false},
		{"namespace with trailing slash", wire.OpGet, `{"namespace":"service/shape/","key":"k"}`, false},
		{"namespace without id", wire.OpGet, `{"namespace":"service/","key":"k"}`, false},
		{"namespace id upper case", wire.OpGet, `{"namespace":"service/Shape","key":"k"}`, false},
		{"namespace id 64 bytes", wire.OpGet, `{"namespace":"service/` + id63 + `x","key":"k"}`, false},
		{"key 256 bytes", wire.OpPut, putLeaseRaw(ns, key256, smallLease, ""), true},
		{"key 257 bytes", wire.OpPut, putLeaseRaw(ns, key256+"c", smallLease, ""), false},
		{"key leading slash", wire.OpGet, `{"namespace":"service/shape","key":"/k"}`, false},
		{"key trailing slash", wire.OpGet, `{"namespace":"service/shape","key":"k/"}`, false},
		{"key double slash", wire.OpGet, `{"namespace":"service/shape","key":"a//b"}`, false},
		{"key dot segment", wire.OpGet, `{"namespace":"service/shape","key":"a/./b"}`, false},
		{"key dotdot segment", wire.OpGet, `{"namespace":"service/shape","key":".."}`, false},
		{"key bad character", wire.OpGet, `{"namespace":"service/shape","key":"a b"}`, false},
		{"put without schema", wire.OpPut, `{"namespace":"service/shape","key":"k","document":{}}`, false},
		{"put with empty schema", wire.OpPut, `{"namespace":"service/shape","key":"k","schema":"","document":{}}`, false},
		{"put without document", wire.OpPut, `{"namespace":"service/shape","key":"k","schema":"keeppeek.lease.v1"}`, false},
		{"document null", wire.OpPut, putLeaseRaw(ns, "k", `null`, ""), false},
		{"document array", wire.OpPut, putLeaseRaw(ns, "k", `[`+smallLease+`]`, ""), false},
		{"document string", wire.OpPut, putLeaseRaw(ns, "k", `"x"`, ""), false},
		{"document number", wire.OpPut, putLeaseRaw(ns, "k", `1`, ""), false},
		{"expected_revision negative", wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"expected_revision":-1`), false},
		{"expected_revision 2^53", wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"expected_revision":9007199254740992`), false},
		{"expected_revision a string", wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"expected_revision":"1"`), false},
		{"delete without key", wire.OpDelete, `{"namespace":"service/shape"}`, false},
		{"delete expected_revision 2^53", wire.OpDelete, `{"namespace":"service/shape","key":"k","expected_revision":9007199254740992}`, false},
		{"list without namespace", wire.OpList, `{}`, false},
		{"list prefix leading slash", wire.OpList, `{"namespace":"service/shape","key_prefix":"/a"}`, false},
		{"list prefix double slash", wire.OpList, `{"namespace":"service/shape","key_prefix":"a//"}`, false},
		{"list prefix bad character", wire.OpList, `{"namespace":"service/shape","key_prefix":"a*"}`, false},
		{"list prefix ending in slash", wire.OpList, `{"namespace":"service/shape","key_prefix":"a/"}`, true},
		{"list bad after_key", wire.OpList, `{"namespace":"service/shape","after_key":"a//b"}`, false},
		{"watch without watch_id", wire.OpWatch, `{"namespace":"service/shape"}`, false},
		{"watch with empty watch_id", wire.OpWatch, `{"watch_id":"","namespace":"service/shape"}`, false},
		{"watch_id with a dot", wire.OpWatch, `{"watch_id":"a.b","namespace":"service/shape"}`, false},
		{"watch_id 65 bytes", wire.OpWatch, `{"watch_id":"` + wid64 + `x","namespace":"service/shape"}`, false},
		{"watch without namespace", wire.OpWatch, `{"watch_id":"s"}`, false},
		{"watch bad prefix", wire.OpWatch, `{"watch_id":"s","namespace":"service/shape","key_prefix":"a//"}`, false},
		{"unwatch without watch_id", wire.OpUnwatch, `{}`, false},
		{"unwatch bad watch_id", wire.OpUnwatch, `{"watch_id":"a>b"}`, false},
		{"ack without watch_id", wire.OpAck, `{"applied_sequence":0}`, false},
		{"ack without applied_sequence", wire.OpAck, `{"watch_id":"s"}`, false},
		{"ack applied_sequence null", wire.OpAck, `{"watch_id":"s","applied_sequence":null}`, false},
		{"ack applied_sequence negative", wire.OpAck, `{"watch_id":"s","applied_sequence":-1}`, false},
		{"ack applied_sequence 2^53", wire.OpAck, `{"watch_id":"s","applied_sequence":9007199254740992}`, false},
		{"watch_id 64 bytes", wire.OpWatch, `{"watch_id":"` + wid64 + `","namespace":"service/shape"}`, true},
		{"unwatch watch_id 64 bytes", wire.OpUnwatch, `{"watch_id":"` + wid64 + `"}`, true},
	}
	for _, tc := range cases {
		r := c.call(tc.op, tc.body)
		if tc.ok {
			r.ok(t)
		} else if r.res.OK || r.res.Error.Code != wire.CodeInvalidArgument {
			t.Errorf("%s: want INVALID_ARGUMENT, got %.300s", tc.name, r.raw)
		}
	}
	// The one valid put (the 256-byte key) is the only write after the first.
	if l := c.call(wire.OpList, `{"namespace":"service/shape"}`).ok(t); *l.res.Revision != 2 || len(l.res.Entries) != 2 {
		t.Fatalf("service/shape after the shape cases: %s, want revision 2 and two entries", l.raw)
	}
	// A namespace id of 63 bytes is a valid namespace: an admin reads NOT_FOUND there.
	c.call(wire.OpGet, `{"namespace":"service/`+id63+`","key":"k"}`).code(t, wire.CodeNotFound)
}

// confCheckOrder: SPEC section 5's check order, each row a request that fails several checks at once
// and must be answered by the first: (1) shape, (2) namespace policy, (3) TTL_INVALID, TOO_LARGE,
// SCHEMA_INVALID, (4) GUARD_FAILED, then CONFLICT or NOT_FOUND. None of them changes anything.
func confCheckOrder(t *testing.T, dial func(*testing.T, string) *rawConn) {
	coord, alice := dial(t, "coordinator"), dial(t, "alice")
	const ns = "service/order"
	coord.call(wire.OpPut, putLeaseRaw(ns, "lease", smallLease, "")).ok(t) // revision 1
	coord.call(wire.OpPut, putLeaseRaw(ns, "taken", smallLease, "")).ok(t) // revision 2
	big := leaseBody(t, 16385)                                             // over max_document_bytes
	badSchema := func(doc, extra string) string {
		return fmt.Sprintf(`{"namespace":%q,"key":"k","schema":"keeppeek.nope.v1","document":%s%s}`, ns, doc, extra)
	}
	cases := []struct {
		name    string
		as      *rawConn
		op      wire.Op
		body    string
		code    wire.Code
		current int64 // -1: none
	}{
		{"shape before policy: bad key", alice, wire.OpGet, `{"namespace":"service/order","key":"a//b"}`, wire.CodeInvalidArgument, -1},
		{"shape before policy: unknown field", alice, wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"owner":"alice"`), wire.CodeInvalidArgument, -1},
		{"shape before policy: document not an object", alice, wire.OpPut, putLeaseRaw(ns, "k", `[]`, ""), wire.CodeInvalidArgument, -1},
		{"shape before policy: negative ttl", alice, wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"ttl_ms":-5`), wire.CodeInvalidArgument, -1},
		{"shape before policy: guard on the written key", alice, wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"guard":{"key":"k","revision":1}`), wire.CodeInvalidArgument, -1},
		{"shape before policy: delete expected_revision 0", alice, wire.OpDelete, `{"namespace":"service/order","key":"nope","expected_revision":0}`, wire.CodeInvalidArgument, -1},
		{"policy before ttl", alice, wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"ttl_ms":5`), wire.CodePermissionDenied, -1},
		{"policy before size", alice, wire.OpPut, putLeaseRaw(ns, "k", big, ""), wire.CodePermissionDenied, -1},
		{"policy before schema", alice, wire.OpPut, badSchema("{}", ""), wire.CodePermissionDenied, -1},
		{"policy before guard", alice, wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"guard":{"key":"nope","revision":1}`), wire.CodePermissionDenied, -1},
		{"policy before conflict", alice, wire.OpPut, putLeaseRaw(ns, "taken", smallLease, `,"expected_revision":0`), wire.CodePermissionDenied, -1},
		{"policy before not found (get)", alice, wire.OpGet, `{"namespace":"service/order","key":"nope"}`, wire.CodePermissionDenied, -1},
		{"policy before not found (delete)", alice, wire.OpDelete, `{"namespace":"service/order","key":"nope"}`, wire.CodePermissionDenied, -1},
		{"policy: system is nobody's to write", coord, wire.OpPut, `{"namespace":"system","key":"k","schema":"keeppeek.nope.v1","document":{},"ttl_ms":5}`, wire.CodePermissionDenied, -1},
		{"policy: delete in system", coord, wire.OpDelete, `{"namespace":"system","key":"nope"}`, wire.CodePermissionDenied, -1},
		{"policy: another user's namespace", alice, wire.OpList, `{"namespace":"user/bob"}`, wire.CodePermissionDenied, -1},
		{"ttl before size and schema", coord, wire.OpPut, badSchema(big, `,"ttl_ms":999`), wire.CodeTTLInvalid, -1},
		{"size before schema", coord, wire.OpPut, badSchema(big, ""), wire.CodeTooLarge, -1},
		{"schema: unregistered", coord, wire.OpPut, badSchema("{}", ""), wire.CodeSchemaInvalid, -1},
		{"schema: outside its namespaces", coord, wire.OpPut, `{"namespace":"service/order","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, wire.CodeSchemaInvalid, -1},
		{"schema: missing property", coord, wire.OpPut, putLeaseRaw(ns, "k", `{"holder":"w1"}`, ""), wire.CodeSchemaInvalid, -1},
		{"schema: forbidden content", coord, wire.OpPut, putLeaseRaw(ns, "k", `{"holder":"w1","claimed_at_ms":1,"purpose":"-----BEGIN KEY"}`, ""), wire.CodeSchemaInvalid, -1},
		{"ttl before guard", coord, wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"ttl_ms":1,"guard":{"key":"nope","revision":1}`), wire.CodeTTLInvalid, -1},
		{"schema before conflict", coord, wire.OpPut, `{"namespace":"service/order","key":"taken","schema":"keeppeek.nope.v1","document":{},"expected_revision":0}`, wire.CodeSchemaInvalid, -1},
		{"guard before conflict", coord, wire.OpPut, putLeaseRaw(ns, "taken", smallLease, `,"expected_revision":0,"guard":{"key":"lease","revision":7}`), wire.CodeGuardFailed, 1},
		{"guard before not found", coord, wire.OpDelete, `{"namespace":"service/order","key":"nope","guard":{"key":"lease","revision":7}}`, wire.CodeGuardFailed, 1},
		{"guard before conflict (delete)", coord, wire.OpDelete, `{"namespace":"service/order","key":"taken","expected_revision":9,"guard":{"key":"missing","revision":1}}`, wire.CodeGuardFailed, 0},
		{"conflict after a passing guard", coord, wire.OpPut, putLeaseRaw(ns, "taken", smallLease, `,"expected_revision":0,"guard":{"key":"lease","revision":1}`), wire.CodeConflict, 2},
		{"not found after a passing guard", coord, wire.OpDelete, `{"namespace":"service/order","key":"nope","expected_revision":3,"guard":{"key":"lease","revision":1}}`, wire.CodeNotFound, -1},
	}
	for _, tc := range cases {
		r := tc.as.call(tc.op, tc.body)
		if r.res.OK || r.res.Error.Code != tc.code {
			t.Errorf("%s: want %s, got %.300s", tc.name, tc.code, r.raw)
			continue
		}
		if tc.current >= 0 && *r.res.Error.CurrentRevision != uint64(tc.current) {
			t.Errorf("%s: want current_revision %d, got %.300s", tc.name, tc.current, r.raw)
		}
	}
	if l := coord.call(wire.OpList, `{"namespace":"service/order"}`).ok(t); *l.res.Revision != 2 || len(l.res.Entries) != 2 {
		t.Fatalf("service/order after the refused requests: %s, want revision 2 and two entries", l.raw)
	}
}

// confExpectedRevision: every row of SPEC section 5's expected_revision table, for put and delete,
// with the current_revision each CONFLICT carries, and NOT_FOUND for a delete of a missing key
// whatever its expected_revision.
func confExpectedRevision(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/cas"
	put := func(key, extra string) reply { return c.call(wire.OpPut, putLeaseRaw(ns, key, smallLease, extra)) }
	del := func(key, extra string) reply {
		return c.call(wire.OpDelete, fmt.Sprintf(`{"namespace":%q,"key":%q%s}`, ns, key, extra))
	}
	rev := func(r reply, want uint64) {
		t.Helper()
		r.ok(t)
		got := uint64(0)
		if r.res.Entry != nil {
			got = r.res.Entry.Revision
		} else if r.res.Revision != nil {
			got = *r.res.Revision
		}
		if got != want {
			t.Fatalf("want revision %d, got %.300s", want, r.raw)
		}
	}
	rev(put("a", ""), 1)                                                 // absent: blind create
	rev(put("a", ""), 2)                                                 // absent: blind replacement
	put("a", `,"expected_revision":0`).current(t, wire.CodeConflict, 2)  // 0 on an existing key
	rev(put("b", `,"expected_revision":0`), 3)                           // 0 on a missing key: create
	rev(put("b", `,"expected_revision":3`), 4)                           // N matching
	put("b", `,"expected_revision":3`).current(t, wire.CodeConflict, 4)  // N stale
	put("b", `,"expected_revision":99`).current(t, wire.CodeConflict, 4) // N ahead
	put("c", `,"expected_revision":4`).current(t, wire.CodeConflict, 0)  // N on a missing key: 0
	del("a", `,"expected_revision":0`).code(t, wire.CodeInvalidArgument)
	del("c", `,"expected_revision":0`).code(t, wire.CodeInvalidArgument)
	del("a", `,"expected_revision":1`).current(t, wire.CodeConflict, 2)
	rev(del("a", `,"expected_revision":2`), 5)
	del("a", `,"expected_revision":5`).code(t, wire.CodeNotFound) // missing, whatever N
	del("a", `,"expected_revision":1`).code(t, wire.CodeNotFound)
	del("a", "").code(t, wire.CodeNotFound)
	c.call(wire.OpGet, `{"namespace":"service/cas","key":"a"}`).code(t, wire.CodeNotFound)
	rev(del("b", ""), 6) // absent: blind delete
	rev(put("a", `,"expected_revision":0`), 7)
	got := c.call(wire.OpGet, `{"namespace":"service/cas","key":"a"}`).ok(t)
	if e := got.res.Entry; e.Revision != 7 || e.Owner != "coordinator" || e.Namespace != ns || e.Key != "a" ||
		e.CreatedAtMs == 0 || e.UpdatedAtMs < e.CreatedAtMs || string(e.Document) != smallLease {
		t.Fatalf("get after the expected_revision rows: %s", got.raw)
	}
	// Failed and rejected calls advanced nothing: 7 commits, revision 7.
	if l := c.call(wire.OpList, `{"namespace":"service/cas"}`).ok(t); *l.res.Revision != 7 {
		t.Fatalf("service/cas revision: %s, want 7", l.raw)
	}
}

// confGuard: SPEC section 5's fencing guard on put and delete.
func confGuard(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/fence"
	guard := func(key string, rev int64) string { return fmt.Sprintf(`,"guard":{"key":%q,"revision":%d}`, key, rev) }
	c.call(wire.OpPut, putLeaseRaw(ns, "leases/a", smallLease, "")).ok(t) // revision 1
	if r := c.call(wire.OpPut, putLeaseRaw(ns, "work", smallLease, guard("leases/a", 1))).ok(t); r.res.Entry.Revision != 2 {
		t.Fatalf("guarded put: %s", r.raw)
	}
	c.call(wire.OpPut, putLeaseRaw(ns, "work", leaseBody(t, 60), guard("leases/a", 2))).current(t, wire.CodeGuardFailed, 1)
	c.call(wire.OpPut, putLeaseRaw(ns, "work", leaseBody(t, 60), guard("leases/missing", 1))).current(t, wire.CodeGuardFailed, 0)
	c.call(wire.OpDelete, `{"namespace":"service/fence","key":"work"`+guard("leases/a", 3)+`}`).current(t, wire.CodeGuardFailed, 1)
	for _, bad := range []string{
		guard("work", 1),                       // the written key itself
		guard("leases/a", 0),                   // revision under 1
		guard("leases/a", -1),                  //
		`,"guard":{"key":"leases/a"}`,          // revision missing
		`,"guard":{"revision":1}`,              // key missing
		`,"guard":{"key":"","revision":1}`,     // key empty
		`,"guard":{"key":"a//b","revision":1}`, // key invalid
		`,"guard":{"key":"leases/a","revision":1,"namespace":"service/x"}`, // unknown field
		`,"guard":{"key":"leases/a","revision":9007199254740992}`,
		`,"guard":"leases/a"`,
		`,"guard":null,"guard":{"key":"leases/a","revision":1}`, // duplicate field
	} {
		c.call(wire.OpPut, putLeaseRaw(ns, "work", smallLease, bad)).code(t, wire.CodeInvalidArgument)
		c.call(wire.OpDelete, `{"namespace":"service/fence","key":"work"`+bad+`}`).code(t, wire.CodeInvalidArgument)
	}
	// Nothing changed: work is still the guarded put's document at revision 2.
	if r := c.call(wire.OpGet, `{"namespace":"service/fence","key":"work"}`).ok(t); r.res.Entry.Revision != 2 || string(r.res.Entry.Document) != smallLease {
		t.Fatalf("work after the refused guards: %s", r.raw)
	}
	// The lease moves on: the old fencing token no longer writes, the new one does, on delete too.
	c.call(wire.OpPut, putLeaseRaw(ns, "leases/a", smallLease, "")).ok(t) // revision 3
	c.call(wire.OpPut, putLeaseRaw(ns, "work", smallLease, guard("leases/a", 1))).current(t, wire.CodeGuardFailed, 3)
	if r := c.call(wire.OpDelete, `{"namespace":"service/fence","key":"work"`+guard("leases/a", 3)+`}`).ok(t); *r.res.Revision != 4 {
		t.Fatalf("guarded delete: %s", r.raw)
	}
	// A guard names a key of the written namespace only: the same key elsewhere does not count.
	c.call(wire.OpPut, putLeaseRaw("service/fence2", "work", smallLease, guard("leases/a", 3))).current(t, wire.CodeGuardFailed, 0)
}

// confTTL: SPEC section 6 over the wire: the TTL ranges, the clamp, the stored ttl_ms and
// expires_at_ms, a put without ttl_ms dropping the lease, and an elapsing lease: one EXPIRE update
// (key only, the next revision) not before its deadline, NOT_FOUND, gone from list, snapshot and
// guards, the namespace revision advanced by exactly one.
func confTTL(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/ttl"
	put := func(key, extra string) reply { return c.call(wire.OpPut, putLeaseRaw(ns, key, smallLease, extra)) }
	for _, ttl := range []string{"1", "500", "999"} {
		put("k", `,"ttl_ms":`+ttl).code(t, wire.CodeTTLInvalid)
	}
	for _, ttl := range []string{"-1", "-1000", "9007199254740992", "1.5", `"1000"`} {
		put("k", `,"ttl_ms":`+ttl).code(t, wire.CodeInvalidArgument)
	}
	lease := func(r reply, ttl int64) {
		t.Helper()
		e := r.ok(t).res.Entry
		if e.TTLMs != ttl || e.ExpiresAtMs != e.UpdatedAtMs+ttl {
			t.Fatalf("want ttl_ms %d and expires_at_ms = updated_at_ms + %d: %s", ttl, ttl, r.raw)
		}
	}
	noLease := func(r reply) {
		t.Helper()
		r.ok(t)
		e, _ := r.obj["entry"].(map[string]any)
		if _, has := e["ttl_ms"]; has {
			t.Fatalf("want an entry without a lease: %s", r.raw)
		}
	}
	lease(put("k", `,"ttl_ms":1000`), 1000)
	lease(put("k", `,"ttl_ms":86400000`), 86_400_000)
	lease(put("k", `,"ttl_ms":86400001`), 86_400_000)
	lease(put("k", `,"ttl_ms":9007199254740991`), 86_400_000)
	lease(c.call(wire.OpGet, `{"namespace":"service/ttl","key":"k"}`), 86_400_000)
	noLease(put("k", "")) // a put without ttl_ms removes the lease
	noLease(c.call(wire.OpGet, `{"namespace":"service/ttl","key":"k"}`))
	lease(put("k", `,"ttl_ms":5000`), 5000)
	noLease(put("k", `,"ttl_ms":0`))
	noLease(put("k", `,"ttl_ms":null`))
	// Revision 8 so far (8 puts); now a lease that elapses, watched.
	sub := c.subscribeWatch("ttl")
	c.call(wire.OpWatch, `{"watch_id":"ttl","namespace":"service/ttl","key_prefix":"short/"}`).ok(t)
	c.call(wire.OpPut, putLeaseRaw(ns, "guarded", smallLease, "")).ok(t) // revision 9
	short := put("short/a", `,"ttl_ms":1000`).ok(t).res.Entry            // revision 10
	if m := nextWatchMsg(t, sub).m; m.Kind != wire.UpdatePut || m.WatchSequence != 1 || m.Revision != 10 {
		t.Fatalf("first update %+v", m)
	}
	c.call(wire.OpAck, `{"watch_id":"ttl","applied_sequence":1}`).ok(t)
	exp := nextWatchMsg(t, sub)
	if now := time.Now().UnixMilli(); now < short.ExpiresAtMs {
		t.Fatalf("EXPIRE at %d, before the deadline %d", now, short.ExpiresAtMs)
	}
	if m := exp.m; m.Kind != wire.UpdateExpire || m.WatchSequence != 2 || m.Revision != 11 || m.Key != "short/a" || m.WatchID != "ttl" {
		t.Fatalf("expiry update %s, want EXPIRE of short/a at revision 11, watch_sequence 2", exp.raw)
	}
	c.call(wire.OpGet, `{"namespace":"service/ttl","key":"short/a"}`).code(t, wire.CodeNotFound)
	c.call(wire.OpPut, putLeaseRaw(ns, "guarded", smallLease, `,"guard":{"key":"short/a","revision":10}`)).current(t, wire.CodeGuardFailed, 0)
	c.call(wire.OpDelete, `{"namespace":"service/ttl","key":"short/a"}`).code(t, wire.CodeNotFound)
	l := c.call(wire.OpList, `{"namespace":"service/ttl"}`).ok(t)
	if *l.res.Revision != 11 || len(l.res.Entries) != 2 {
		t.Fatalf("list after the expiry: %s, want revision 11 and two entries", l.raw)
	}
	w := c.call(wire.OpWatch, `{"watch_id":"ttl2","namespace":"service/ttl","key_prefix":"short/"}`).ok(t)
	if w.res.Watch.SnapshotRevision != 11 || len(w.res.Watch.Entries) != 0 {
		t.Fatalf("snapshot after the expiry: %s", w.raw)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"ttl2"}`).ok(t)
	c.call(wire.OpUnwatch, `{"watch_id":"ttl"}`).ok(t)
	noMessage(t, sub, "after the EXPIRE")
}

// confList: SPEC section 5's list: bytewise key order, key_prefix, after_key paging with
// next_after_key present only when more entries follow, limit 1 to 256 (0 or absent: 100), and the
// namespace revision (0 if never written, kept when the namespace is empty again).
func confList(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/list"
	keys := []string{"b", "a_b", "a/b", "a.b", "a-b", "a", "B", "9", "a/b/c"}
	for _, k := range keys {
		c.call(wire.OpPut, putLeaseRaw(ns, k, smallLease, "")).ok(t)
	}
	sorted := []string{"9", "B", "a", "a-b", "a.b", "a/b", "a/b/c", "a_b", "b"} // bytewise
	page := func(body string, want []string, next string) {
		t.Helper()
		r := c.call(wire.OpList, body).ok(t)
		var got []string
		for _, e := range r.res.Entries {
			got = append(got, e.Key)
		}
		_, hasNext := r.obj["next_after_key"]
		if fmt.Sprint(got) != fmt.Sprint(want) || r.res.NextAfterKey != next || hasNext != (next != "") || *r.res.Revision != uint64(len(keys)) {
			t.Fatalf("list %s: got %v next %q revision %d, want %v next %q revision %d", body, got, r.res.NextAfterKey, *r.res.Revision, want, next, len(keys))
		}
	}
	page(`{"namespace":"service/list"}`, sorted, "")
	page(`{"namespace":"service/list","limit":0}`, sorted, "")
	page(`{"namespace":"service/list","limit":9}`, sorted, "") // exactly the rest: no next_after_key
	page(`{"namespace":"service/list","limit":4}`, sorted[:4], "a-b")
	page(`{"namespace":"service/list","limit":4,"after_key":"a-b"}`, sorted[4:8], "a_b")
	page(`{"namespace":"service/list","limit":4,"after_key":"a_b"}`, sorted[8:], "")
	page(`{"namespace":"service/list","limit":1,"after_key":"a_b"}`, sorted[8:], "")
	page(`{"namespace":"service/list","after_key":"b"}`, nil, "")
	page(`{"namespace":"service/list","after_key":"zzz"}`, nil, "")
	page(`{"namespace":"service/list","after_key":"a.a"}`, sorted[4:], "") // after_key need not exist
	page(`{"namespace":"service/list","key_prefix":"a"}`, sorted[2:8], "")
	page(`{"namespace":"service/list","key_prefix":"a/"}`, []string{"a/b", "a/b/c"}, "")
	page(`{"namespace":"service/list","key_prefix":"a/","limit":1}`, []string{"a/b"}, "a/b")
	page(`{"namespace":"service/list","key_prefix":"a/","limit":1,"after_key":"a/b"}`, []string{"a/b/c"}, "")
	page(`{"namespace":"service/list","key_prefix":"a.","after_key":"a"}`, []string{"a.b"}, "")
	page(`{"namespace":"service/list","key_prefix":"a/","after_key":"0"}`, []string{"a/b", "a/b/c"}, "") // after_key before the prefix
	page(`{"namespace":"service/list","key_prefix":"a/","after_key":"b"}`, nil, "")                      // after it
	page(`{"namespace":"service/list","key_prefix":"c"}`, nil, "")
	page(`{"namespace":"service/list","limit":256}`, sorted, "")
	c.call(wire.OpList, `{"namespace":"service/list","limit":257}`).code(t, wire.CodeInvalidArgument)
	c.call(wire.OpList, `{"namespace":"service/list","limit":-1}`).code(t, wire.CodeInvalidArgument)
	c.call(wire.OpList, `{"namespace":"service/list","limit":9007199254740992}`).code(t, wire.CodeInvalidArgument)
	// Never written: revision 0. Emptied: the revision stays.
	if r := c.call(wire.OpList, `{"namespace":"service/never"}`).ok(t); *r.res.Revision != 0 || len(r.res.Entries) != 0 {
		t.Fatalf("list of a namespace never written: %s", r.raw)
	}
	c.call(wire.OpPut, putLeaseRaw("service/emptied", "k", smallLease, "")).ok(t)
	c.call(wire.OpDelete, `{"namespace":"service/emptied","key":"k"}`).ok(t)
	if r := c.call(wire.OpList, `{"namespace":"service/emptied"}`).ok(t); *r.res.Revision != 2 || len(r.res.Entries) != 0 {
		t.Fatalf("list of an emptied namespace: %s", r.raw)
	}

	// The default limit is 100, and 256 is the most one page holds: 101 entries in another namespace.
	const big = "service/list101"
	putAll(t, c, big, 101, func(i int) string { return fmt.Sprintf("k%03d", i) })
	r := c.call(wire.OpList, `{"namespace":"service/list101"}`).ok(t)
	if len(r.res.Entries) != 100 || r.res.NextAfterKey != "k099" || r.res.Entries[99].Key != "k099" {
		t.Fatalf("list of 101 without a limit: %d entries, next_after_key %q", len(r.res.Entries), r.res.NextAfterKey)
	}
	r = c.call(wire.OpList, `{"namespace":"service/list101","after_key":"k099"}`).ok(t)
	if len(r.res.Entries) != 1 || r.res.Entries[0].Key != "k100" || r.res.NextAfterKey != "" {
		t.Fatalf("second page: %.300s", r.raw)
	}
	r = c.call(wire.OpList, `{"namespace":"service/list101","limit":256}`).ok(t)
	if len(r.res.Entries) != 101 || r.res.NextAfterKey != "" {
		t.Fatalf("list of 101 with limit 256: %d entries, next_after_key %q", len(r.res.Entries), r.res.NextAfterKey)
	}
}

// putAll puts n small leases into ns, keys named by key, a few at a time (they share commits).
func putAll(t *testing.T, c *rawConn, ns string, n int, key func(int) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := putLeaseRaw(ns, key(i), smallLease, "")
			msg, err := c.nc.Request(wire.StateSubject(wire.DefaultPrefix, c.principal, wire.OpPut), []byte(body), timeout)
			if err != nil {
				errs <- err.Error()
				return
			}
			var r wire.Result
			if err := json.Unmarshal(msg.Data, &r); err != nil || !r.OK {
				errs <- string(msg.Data)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("put into %s: %s", ns, e)
	}
}

// confWatch: SPEC section 7 over the wire: the snapshot (entries under the prefix, snapshot_revision,
// key_prefix echoed), updates in revision order on the delivery subject with watch_sequence from 1 by
// one (a revision skip for other keys is no sequence skip), PUT with its entry, DELETE with the key
// only, acks and their bounds, WATCH_EXISTS per principal, unwatch and NOT_FOUND after it, the id
// free again with nothing of the old registration delivered, PERMISSION_DENIED on what the principal
// may not read.
func confWatch(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c, ops, alice := dial(t, "coordinator"), dial(t, "ops"), dial(t, "alice")
	const ns = "service/watch"
	put := func(key string) reply { return c.call(wire.OpPut, putLeaseRaw(ns, key, smallLease, "")).ok(t) }
	put("p/a") // 1
	put("p/b") // 2
	put("q/x") // 3
	sub := c.subscribeWatch("w1")
	r := c.call(wire.OpWatch, `{"watch_id":"w1","namespace":"service/watch","key_prefix":"p/"}`).ok(t)
	ws := r.res.Watch
	if ws.WatchID != "w1" || ws.Namespace != ns || ws.KeyPrefix != "p/" || ws.SnapshotRevision != 3 || len(ws.Entries) != 2 ||
		ws.Entries[0].Key != "p/a" || ws.Entries[0].Revision != 1 || ws.Entries[1].Key != "p/b" || ws.Entries[1].Revision != 2 ||
		ws.Entries[0].Owner != "coordinator" {
		t.Fatalf("snapshot %s", r.raw)
	}
	put("p/c")                                                               // 4
	put("q/y")                                                               // 5: not under the prefix
	c.call(wire.OpDelete, `{"namespace":"service/watch","key":"p/a"}`).ok(t) // 6
	m := nextWatchMsg(t, sub)
	if m.m.WatchID != "w1" || m.m.Kind != wire.UpdatePut || m.m.WatchSequence != 1 || m.m.Revision != 4 || m.m.Key != "p/c" ||
		m.m.Entry.Owner != "coordinator" || string(m.m.Entry.Document) != smallLease {
		t.Fatalf("first update %s", m.raw)
	}
	if m = nextWatchMsg(t, sub); m.m.Kind != wire.UpdateDelete || m.m.WatchSequence != 2 || m.m.Revision != 6 || m.m.Key != "p/a" {
		t.Fatalf("second update %s, want DELETE of p/a at revision 6, watch_sequence 2", m.raw)
	}

	ack := func(as *rawConn, id, seq string) reply {
		return as.call(wire.OpAck, fmt.Sprintf(`{"watch_id":%q,"applied_sequence":%s}`, id, seq))
	}
	if r := ack(c, "w1", "0").ok(t); r.res.WatchID != "w1" || *r.res.AppliedSequence != 0 {
		t.Fatalf("ack 0: %s", r.raw)
	}
	if r := ack(c, "w1", "1").ok(t); r.res.WatchID != "w1" || *r.res.AppliedSequence != 1 {
		t.Fatalf("ack 1: %s", r.raw)
	}
	ack(c, "w1", "1").ok(t)                              // the same again is no step back
	ack(c, "w1", "0").code(t, wire.CodeInvalidArgument)  // below an earlier ack
	ack(c, "w1", "3").code(t, wire.CodeInvalidArgument)  // above the highest sent
	ack(c, "w1", "-1").code(t, wire.CodeInvalidArgument) //
	ack(c, "w1", `"2"`).code(t, wire.CodeInvalidArgument)
	ack(c, "w1", "2").ok(t)
	ack(ops, "w1", "2").code(t, wire.CodeNotFound) // another principal's watch is unknown to ops
	ops.call(wire.OpUnwatch, `{"watch_id":"w1"}`).code(t, wire.CodeNotFound)
	ack(c, "nope", "0").code(t, wire.CodeNotFound)

	c.call(wire.OpWatch, `{"watch_id":"w1","namespace":"service/other"}`).code(t, wire.CodeWatchExists)
	ops.subscribeWatch("w1")
	ops.call(wire.OpWatch, `{"watch_id":"w1","namespace":"service/watch"}`).ok(t) // ids are per principal
	ops.call(wire.OpUnwatch, `{"watch_id":"w1"}`).ok(t)

	if r := c.call(wire.OpUnwatch, `{"watch_id":"w1"}`).ok(t); r.res.WatchID != "w1" {
		t.Fatalf("unwatch: %s", r.raw)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"w1"}`).code(t, wire.CodeNotFound)
	ack(c, "w1", "2").code(t, wire.CodeNotFound)
	put("p/d") // 7: after the unwatch, delivered to nobody
	r = c.call(wire.OpWatch, `{"watch_id":"w1","namespace":"service/watch"}`).ok(t)
	if ws := r.res.Watch; ws.KeyPrefix != "" || ws.SnapshotRevision != 7 || len(ws.Entries) != 5 {
		t.Fatalf("second registration's snapshot: %s", r.raw)
	}
	put("p/e") // 8
	if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdatePut || m.m.WatchSequence != 1 || m.m.Revision != 8 || m.m.Key != "p/e" {
		t.Fatalf("first message after the id was reused: %s, want PUT of p/e at revision 8, watch_sequence 1", m.raw)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"w1"}`).ok(t)

	// A namespace never written: snapshot_revision 0, no entries.
	c.subscribeWatch("fresh")
	if r := c.call(wire.OpWatch, `{"watch_id":"fresh","namespace":"service/never-watched"}`).ok(t); r.res.Watch.SnapshotRevision != 0 || len(r.res.Watch.Entries) != 0 {
		t.Fatalf("watch of a namespace never written: %s", r.raw)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"fresh"}`).ok(t)
	// Reading is the namespace policy's: alice may watch her own namespace only.
	alice.call(wire.OpWatch, `{"watch_id":"a","namespace":"service/watch"}`).code(t, wire.CodePermissionDenied)
	alice.call(wire.OpWatch, `{"watch_id":"a","namespace":"user/bob"}`).code(t, wire.CodePermissionDenied)
	alice.call(wire.OpWatch, `{"watch_id":"a","namespace":"system"}`).code(t, wire.CodePermissionDenied)
	alice.subscribeWatch("a")
	alice.call(wire.OpWatch, `{"watch_id":"a","namespace":"user/alice","key_prefix":"none/"}`).ok(t)
	alice.call(wire.OpUnwatch, `{"watch_id":"a"}`).ok(t)
	c.subscribeWatch("sys")
	c.call(wire.OpWatch, `{"watch_id":"sys","namespace":"system","key_prefix":"workers/"}`).ok(t)
	c.call(wire.OpUnwatch, `{"watch_id":"sys"}`).ok(t)
	noMessage(t, sub, "after the last unwatch")
}

// confOverflow: SPEC section 7.6 at the default max_pending_updates (32): 32 unacknowledged updates
// arrive, the 33rd closes the watch with one CLOSED OVERFLOW and nothing follows it; ack and unwatch
// answer NOT_FOUND; the id is free again.
func confOverflow(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/overflow"
	sub := c.subscribeWatch("ovf")
	c.call(wire.OpWatch, `{"watch_id":"ovf","namespace":"service/overflow"}`).ok(t)
	for i := 1; i <= 33; i++ {
		c.call(wire.OpPut, putLeaseRaw(ns, fmt.Sprintf("k%02d", i), smallLease, "")).ok(t)
	}
	for i := 1; i <= 32; i++ {
		if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdatePut || m.m.WatchSequence != uint64(i) || m.m.Revision != uint64(i) {
			t.Fatalf("update %d: %s", i, m.raw)
		}
	}
	m := nextWatchMsg(t, sub)
	if m.m.Kind != wire.UpdateClosed || m.m.Reason != wire.CloseOverflow || m.m.WatchID != "ovf" || m.m.Message == "" {
		t.Fatalf("after 32 pending updates: %s, want CLOSED OVERFLOW", m.raw)
	}
	c.call(wire.OpAck, `{"watch_id":"ovf","applied_sequence":32}`).code(t, wire.CodeNotFound)
	c.call(wire.OpUnwatch, `{"watch_id":"ovf"}`).code(t, wire.CodeNotFound)
	c.call(wire.OpPut, putLeaseRaw(ns, "k34", smallLease, "")).ok(t) // 34: to nobody
	r := c.call(wire.OpWatch, `{"watch_id":"ovf","namespace":"service/overflow","key_prefix":"k3"}`).ok(t)
	if r.res.Watch.SnapshotRevision != 34 || len(r.res.Watch.Entries) != 5 {
		t.Fatalf("watch again after the OVERFLOW close: %.300s", r.raw)
	}
	c.call(wire.OpPut, putLeaseRaw(ns, "k35", smallLease, "")).ok(t)
	if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdatePut || m.m.WatchSequence != 1 || m.m.Key != "k35" {
		t.Fatalf("first message of the new registration: %s", m.raw)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"ovf"}`).ok(t)
}

// confDocumentBytes: max_document_bytes (16,384) at its limit and one past it, measured on the
// document's compact encoding: a document with whitespace around it is measured without it, and
// stored compact. A refused put stores nothing.
func confDocumentBytes(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns = "service/docsize"
	at := leaseBody(t, 16384)
	r := c.call(wire.OpPut, putLeaseRaw(ns, "at", at, "")).ok(t)
	if string(r.res.Entry.Document) != at {
		t.Fatal("the stored document differs from the put's")
	}
	c.call(wire.OpPut, putLeaseRaw(ns, "past", leaseBody(t, 16385), "")).code(t, wire.CodeTooLarge)
	c.call(wire.OpGet, `{"namespace":"service/docsize","key":"past"}`).code(t, wire.CodeNotFound)
	spaced := strings.Replace(strings.Replace(at, `{"holder":"w1",`, "{\n  \"holder\" : \"w1\" ,\n  ", 1), `}`, "\n}\n", 1)
	r = c.call(wire.OpPut, putLeaseRaw(ns, "spaced", spaced, "")).ok(t)
	if string(r.res.Entry.Document) != at {
		t.Fatalf("a document with whitespace is stored as %d bytes, want its compact %d", len(r.res.Entry.Document), len(at))
	}
	spacedPast := strings.Replace(leaseBody(t, 16385), `{"holder"`, "{ \"holder\"", 1)
	c.call(wire.OpPut, putLeaseRaw(ns, "spaced", spacedPast, "")).code(t, wire.CodeTooLarge)
	if g := c.call(wire.OpGet, `{"namespace":"service/docsize","key":"spaced"}`).ok(t); g.res.Entry.Revision != 2 {
		t.Fatalf("the refused replacement changed the entry: revision %d", g.res.Entry.Revision)
	}
}

// confSnapshotBytes: max_snapshot_entries (64) and max_snapshot_bytes (65,536) at their limits and one
// past. The bytes bound is on the encoded reply, request_id included: a reply of exactly 65,536 bytes
// is sent (and is that long on the wire); the same watch with a request_id one digit longer is
// WATCH_TOO_BROAD.
func confSnapshotBytes(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	c.subscribeWatch(">")
	// Entries: 65 under e/, then 64.
	putAll(t, c, "service/snapn", 65, func(i int) string { return fmt.Sprintf("e/%02d", i) })
	c.call(wire.OpWatch, `{"watch_id":"n","namespace":"service/snapn","key_prefix":"e/"}`).code(t, wire.CodeWatchTooBroad)
	c.call(wire.OpWatch, `{"watch_id":"n","namespace":"service/snapn"}`).code(t, wire.CodeWatchTooBroad)
	c.call(wire.OpDelete, `{"namespace":"service/snapn","key":"e/64"}`).ok(t)
	if r := c.call(wire.OpWatch, `{"watch_id":"n","namespace":"service/snapn","key_prefix":"e/"}`).ok(t); len(r.res.Watch.Entries) != 64 {
		t.Fatalf("snapshot of 64 entries: %d", len(r.res.Watch.Entries))
	}
	c.call(wire.OpUnwatch, `{"watch_id":"n"}`).ok(t)

	// Bytes: five documents of about 12.8 kB; the last is resized until the reply is 65,536 bytes.
	const ns = "service/snapb"
	for i := range 4 {
		c.call(wire.OpPut, putLeaseRaw(ns, fmt.Sprintf("b/%d", i), leaseBody(t, 12800), "")).ok(t)
	}
	size := 12800
	watch := func(id string) reply {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return c.send(wire.OpWatch, withID(`{"watch_id":"b","namespace":"service/snapb","key_prefix":"b/"}`, id), n)
	}
	for range 4 {
		c.call(wire.OpPut, putLeaseRaw(ns, "b/4", leaseBody(t, size), "")).ok(t)
		r := watch("1")
		if r.res.OK {
			c.call(wire.OpUnwatch, `{"watch_id":"b"}`).ok(t)
			if len(r.raw) == 65536 {
				break
			}
			size += 65536 - len(r.raw)
			continue
		}
		r.code(t, wire.CodeWatchTooBroad)
		size -= 600 // too broad: shrink below the limit, and measure again
	}
	r := watch("1").ok(t)
	if len(r.raw) != 65536 {
		t.Fatalf("could not make a snapshot reply of exactly 65,536 bytes: %d", len(r.raw))
	}
	c.call(wire.OpUnwatch, `{"watch_id":"b"}`).ok(t)
	watch("10").code(t, wire.CodeWatchTooBroad) // one byte more
	watch("9").ok(t)
	c.call(wire.OpUnwatch, `{"watch_id":"b"}`).ok(t)
}

// confWatchCounts: SPEC section 7.7 at the default bounds: 256 live watches per principal, the 257th
// RESOURCE_EXHAUSTED; four principals at 256 fill max_watches (1,024) and a fifth principal's first
// watch is RESOURCE_EXHAUSTED until one ends. Check order (4): WATCH_EXISTS before
// RESOURCE_EXHAUSTED before WATCH_TOO_BROAD.
func confWatchCounts(t *testing.T, dial func(*testing.T, string) *rawConn) {
	owners := []struct{ id, ns string }{{"coordinator", "service/wc"}, {"alice", "user/alice"}, {"bob", "user/bob"}, {"carol", "user/carol"}}
	conns := map[string]*rawConn{}
	for _, o := range owners {
		conns[o.id] = dial(t, o.id)
		conns[o.id].subscribeWatch(">")
	}
	ops := dial(t, "ops")
	ops.subscribeWatch(">")
	// alice's namespace holds 65 entries: a watch of all of it is too broad.
	alice := conns["alice"]
	var wg sync.WaitGroup
	for i := range 65 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"namespace":"user/alice","key":"p/%02d","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, i)
			if msg, err := alice.nc.Request(wire.StateSubject(wire.DefaultPrefix, "alice", wire.OpPut), []byte(body), timeout); err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
				t.Errorf("alice's put %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	alice.call(wire.OpWatch, `{"watch_id":"broad","namespace":"user/alice"}`).code(t, wire.CodeWatchTooBroad)

	open := func(c *rawConn, ns string, from, to int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + w; i < to; i += 4 {
					body := fmt.Sprintf(`{"request_id":%d,"watch_id":"w%03d","namespace":%q,"key_prefix":"none/"}`, i+1, i, ns)
					msg, err := c.nc.Request(wire.StateSubject(wire.DefaultPrefix, c.principal, wire.OpWatch), []byte(body), timeout)
					if err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
						t.Errorf("%s's watch %d: %v", c.principal, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	open(alice, "user/alice", 0, 256)
	if t.Failed() {
		t.FailNow()
	}
	alice.call(wire.OpWatch, `{"watch_id":"w256","namespace":"user/alice","key_prefix":"none/"}`).code(t, wire.CodeResourceExhausted)
	alice.call(wire.OpWatch, `{"watch_id":"w000","namespace":"user/alice"}`).code(t, wire.CodeWatchExists)        // exists, exhausted, too broad
	alice.call(wire.OpWatch, `{"watch_id":"broad","namespace":"user/alice"}`).code(t, wire.CodeResourceExhausted) // exhausted, too broad
	alice.call(wire.OpWatch, `{"watch_id":"broad","namespace":"user/bob"}`).code(t, wire.CodePermissionDenied)    // policy, exhausted
	alice.call(wire.OpWatch, `{"watch_id":"a.b","namespace":"user/bob"}`).code(t, wire.CodeInvalidArgument)       // shape, policy, exhausted
	for _, o := range owners[:1] {
		open(conns[o.id], o.ns, 0, 256)
	}
	for _, o := range owners[2:] {
		open(conns[o.id], o.ns, 0, 256)
	}
	if t.Failed() {
		t.FailNow()
	}
	// 1,024 live: ops has none, and still gets none.
	ops.call(wire.OpWatch, `{"watch_id":"x","namespace":"service/wc"}`).code(t, wire.CodeResourceExhausted)
	conns["carol"].call(wire.OpUnwatch, `{"watch_id":"w000"}`).ok(t)
	ops.call(wire.OpWatch, `{"watch_id":"x","namespace":"service/wc"}`).ok(t)
	ops.call(wire.OpWatch, `{"watch_id":"y","namespace":"service/wc"}`).code(t, wire.CodeResourceExhausted)
	ops.call(wire.OpUnwatch, `{"watch_id":"x"}`).ok(t)
	conns["carol"].call(wire.OpWatch, `{"watch_id":"w000","namespace":"user/carol","key_prefix":"none/"}`).ok(t)

	// Free every slot for the other groups.
	for _, o := range owners {
		c := conns[o.id]
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < 256; i += 4 {
					body := fmt.Sprintf(`{"watch_id":"w%03d"}`, i)
					msg, err := c.nc.Request(wire.StateSubject(wire.DefaultPrefix, c.principal, wire.OpUnwatch), []byte(body), timeout)
					if err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
						t.Errorf("%s's unwatch %d: %v", c.principal, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

// confInfo: info answers any principal with server_id, version, epoch, the store's feature and the
// bounds by their section 8 names (checkReply checks the names), here the defaults.
func confInfo(t *testing.T, dial func(*testing.T, string) *rawConn) {
	for _, p := range []string{"alice", "coordinator"} {
		c := dial(t, p)
		r := c.call(wire.OpInfo, `{}`).ok(t)
		if r.res.ServerID == "" || r.res.Version == "" || r.res.Epoch == "" || len(r.res.Features) != 1 || r.res.Features[0] != wire.FeatureStateStore {
			t.Fatalf("info as %s: %s", p, r.raw)
		}
		if *r.res.Bounds != wire.DefaultBounds() {
			t.Fatalf("info bounds %+v, want the defaults %+v", *r.res.Bounds, wire.DefaultBounds())
		}
		if r := c.send(wire.OpInfo, ``, 0).ok(t); r.res.Epoch == "" {
			t.Fatalf("info with an empty body: %s", r.raw)
		}
	}
}

// confGoClient: the same rules through the Go client (store/client), which must surface the codes and
// current_revision the server sent, and page a list as the raw replies do.
func confGoClient(t *testing.T, s *e2e.Stated) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := client.Connect(s.URL(), "coordinator", natsUser(confPrincipals, "coordinator"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "coordinator", client.WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	const ns = "service/goclient"
	doc := json.RawMessage(smallLease)
	zero, stale := int64(0), int64(5)
	e, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "a", Schema: wire.SchemaLease, Document: doc, ExpectedRevision: &zero})
	if err != nil || e.Revision != 1 || e.Owner != "coordinator" {
		t.Fatalf("create: %+v %v", e, err)
	}
	var we *wire.Error
	_, err = c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "a", Schema: wire.SchemaLease, Document: doc, ExpectedRevision: &zero})
	if !errors.As(err, &we) || we.Code != wire.CodeConflict || we.CurrentRevision == nil || *we.CurrentRevision != 1 {
		t.Fatalf("second create: %v", err)
	}
	_, err = c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "b", Schema: wire.SchemaLease, Document: doc, Guard: &wire.Guard{Key: "missing", Revision: 1}})
	if !errors.As(err, &we) || we.Code != wire.CodeGuardFailed || we.CurrentRevision == nil || *we.CurrentRevision != 0 {
		t.Fatalf("guarded put: %v", err)
	}
	if _, err := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "missing", ExpectedRevision: &stale}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("delete of a missing key: %v", err)
	}
	ttl := int64(999)
	if _, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "b", Schema: wire.SchemaLease, Document: doc, TTLMs: &ttl}); !errors.Is(err, wire.ErrTTLInvalid) {
		t.Fatalf("ttl 999: %v", err)
	}
	ttl = 86_400_001
	if e, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: "b", Schema: wire.SchemaLease, Document: doc, TTLMs: &ttl}); err != nil || e.TTLMs != 86_400_000 || e.ExpiresAtMs != e.UpdatedAtMs+86_400_000 {
		t.Fatalf("ttl clamp: %+v %v", e, err)
	}
	for _, k := range []string{"c", "d"} {
		if _, err := c.Put(ctx, wire.PutRequest{Namespace: ns, Key: k, Schema: wire.SchemaLease, Document: doc}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		l, err := c.List(ctx, wire.ListRequest{Namespace: ns, AfterKey: after, Limit: 3})
		if err != nil || l.Revision != 4 {
			t.Fatalf("list: %+v %v", l, err)
		}
		for _, e := range l.Entries {
			keys = append(keys, e.Key)
		}
		if l.NextAfterKey == "" {
			if pages != 1 {
				t.Fatalf("4 entries in pages of 3 took %d pages", pages+1)
			}
			break
		}
		after = l.NextAfterKey
	}
	if fmt.Sprint(keys) != "[a b c d]" {
		t.Fatalf("paged keys %v", keys)
	}
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "go", Namespace: ns, KeyPrefix: "a"})
	if err != nil || w.Snapshot().SnapshotRevision != 4 || len(w.Snapshot().Entries) != 1 {
		t.Fatalf("watch: %v", err)
	}
	defer func() { _ = w.Stop(ctx) }()
	if _, err := c.Watch(ctx, wire.WatchRequest{WatchID: "go", Namespace: ns}); !errors.Is(err, wire.ErrWatchExists) {
		t.Fatalf("second watch with the same id: %v", err)
	}
	if _, err := c.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: "a"}); err != nil {
		t.Fatal(err)
	}
	m := nextWatchMessage(t, w)
	if m.Kind != wire.UpdateDelete || m.WatchSequence != 1 || m.Revision != 5 || m.Key != "a" || m.Entry != nil {
		t.Fatalf("delete update %+v", m)
	}
	if err := w.Ack(ctx, 2); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("ack above the highest sent: %v", err)
	}
	if err := w.Ack(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// confWatchRace: SPEC section 7.1 over the wire: watches registered while puts commit see each put
// either in their snapshot or as one later update, never neither and never both, updates in revision
// order above the snapshot's, watch_sequence from 1 by one.
func confWatchRace(t *testing.T, dial func(*testing.T, string) *rawConn) {
	writer, watcher := dial(t, "coordinator"), dial(t, "coordinator")
	const ns, n, watches = "service/race", 30, 10
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			body := putLeaseRaw(ns, fmt.Sprintf("r/%02d", i), smallLease, "")
			if _, err := writer.nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), []byte(body), timeout); err != nil {
				t.Errorf("put %d: %v", i, err)
				return
			}
		}
	}()
	type reg struct {
		snap *wire.WatchState
		sub  *nats.Subscription
	}
	var regs []reg
	for i := range watches {
		id := fmt.Sprintf("race%d", i)
		sub := watcher.subscribeWatch(id)
		r := watcher.call(wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":%q,"key_prefix":"r/"}`, id, ns)).ok(t)
		regs = append(regs, reg{r.res.Watch, sub})
	}
	<-done
	writer.call(wire.OpPut, putLeaseRaw(ns, "r/zz", smallLease, "")).ok(t)
	for i, g := range regs {
		seen := map[string]string{}
		for _, e := range g.snap.Entries {
			seen[e.Key] = "snapshot"
			if e.Revision > g.snap.SnapshotRevision {
				t.Fatalf("watch %d: snapshot entry %s at %d above snapshot_revision %d", i, e.Key, e.Revision, g.snap.SnapshotRevision)
			}
		}
		last := g.snap.SnapshotRevision
		for seq := uint64(1); ; seq++ {
			msg, err := g.sub.NextMsg(timeout)
			if err != nil {
				t.Fatalf("watch %d: update %d: %v (seen %v)", i, seq, err, seen)
			}
			m := checkWatchMsg(t, msg.Data).m
			if m.Kind != wire.UpdatePut || m.WatchSequence != seq || m.Revision <= last {
				t.Fatalf("watch %d: %+v after revision %d, want PUT with watch_sequence %d", i, m, last, seq)
			}
			if was, dup := seen[m.Key]; dup {
				t.Fatalf("watch %d: %s both in the %s and as update %d", i, m.Key, was, seq)
			}
			seen[m.Key] = "update"
			last = m.Revision
			if m.Key == "r/zz" {
				break
			}
		}
		if len(seen) != n+1 {
			t.Fatalf("watch %d saw %d keys, want %d: %v", i, len(seen), n+1, seen)
		}
		watcher.call(wire.OpUnwatch, fmt.Sprintf(`{"watch_id":"race%d"}`, i)).ok(t)
	}
}

// confBigPages: a list page whose documents would not fit one NATS message (max_payload, 1 MiB) is
// shortened, with next_after_key naming its last entry, so paging still returns every entry once, in
// order.
func confBigPages(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c := dial(t, "coordinator")
	const ns, n = "service/bigpages", 70
	doc := leaseBody(t, 16384)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := putLeaseRaw(ns, fmt.Sprintf("k%02d", i), doc, "")
			msg, err := c.nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), []byte(body), timeout)
			if err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
				t.Errorf("put %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var keys []string
	after, pages := "", 0
	for {
		body := `{"namespace":"service/bigpages","limit":256}`
		if after != "" {
			body = fmt.Sprintf(`{"namespace":"service/bigpages","limit":256,"after_key":%q}`, after)
		}
		r := c.call(wire.OpList, body).ok(t)
		pages++
		if len(r.raw) > 1<<20 {
			t.Fatalf("a list reply of %d bytes", len(r.raw))
		}
		for _, e := range r.res.Entries {
			keys = append(keys, e.Key)
		}
		if r.res.NextAfterKey == "" {
			break
		}
		if r.res.NextAfterKey != keys[len(keys)-1] {
			t.Fatalf("next_after_key %q is not the page's last key %q", r.res.NextAfterKey, keys[len(keys)-1])
		}
		after = r.res.NextAfterKey
	}
	if pages < 2 || len(keys) != n {
		t.Fatalf("%d pages, %d keys; want at least 2 pages and %d keys", pages, len(keys), n)
	}
	for i, k := range keys {
		if k != fmt.Sprintf("k%02d", i) {
			t.Fatalf("key %d is %s", i, k)
		}
	}
}

// confSettings: SPEC section 6 on a settings-backed namespace: every ttl_ms above 0 is TTL_INVALID
// (after the policy check), and otherwise it behaves as any namespace: revisions, expected_revision,
// guards, deletes, watches.
func confSettings(t *testing.T, dial func(*testing.T, string) *rawConn) {
	c, alice := dial(t, "coordinator"), dial(t, "alice")
	const ns = "service/settings"
	for _, ttl := range []string{"1", "999", "1000", "86400001"} {
		c.call(wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"ttl_ms":`+ttl)).code(t, wire.CodeTTLInvalid)
	}
	alice.call(wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"ttl_ms":5000`)).code(t, wire.CodePermissionDenied)
	alice.call(wire.OpGet, `{"namespace":"service/settings","key":"k"}`).code(t, wire.CodePermissionDenied)
	c.call(wire.OpGet, `{"namespace":"service/settings","key":"k"}`).code(t, wire.CodeNotFound)
	sub := c.subscribeWatch("settings")
	c.call(wire.OpWatch, `{"watch_id":"settings","namespace":"service/settings"}`).ok(t)
	if r := c.call(wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"ttl_ms":0,"expected_revision":0`)).ok(t); r.res.Entry.Revision != 1 || r.res.Entry.TTLMs != 0 {
		t.Fatalf("settings put: %s", r.raw)
	}
	c.call(wire.OpPut, putLeaseRaw(ns, "k", smallLease, `,"expected_revision":0`)).current(t, wire.CodeConflict, 1)
	c.call(wire.OpPut, putLeaseRaw(ns, "j", smallLease, `,"guard":{"key":"k","revision":1}`)).ok(t)
	c.call(wire.OpDelete, `{"namespace":"service/settings","key":"j","expected_revision":1}`).current(t, wire.CodeConflict, 2)
	if r := c.call(wire.OpDelete, `{"namespace":"service/settings","key":"j","expected_revision":2}`).ok(t); *r.res.Revision != 3 {
		t.Fatalf("settings delete: %s", r.raw)
	}
	c.call(wire.OpDelete, `{"namespace":"service/settings","key":"j"}`).code(t, wire.CodeNotFound)
	for i, want := range []struct {
		kind wire.UpdateKind
		key  string
	}{{wire.UpdatePut, "k"}, {wire.UpdatePut, "j"}, {wire.UpdateDelete, "j"}} {
		if m := nextWatchMsg(t, sub).m; m.Kind != want.kind || m.Key != want.key || m.WatchSequence != uint64(i+1) || m.Revision != uint64(i+1) {
			t.Fatalf("settings update %d: %+v, want %s of %s", i+1, m, want.kind, want.key)
		}
	}
	c.call(wire.OpUnwatch, `{"watch_id":"settings"}`).ok(t)
	if l := c.call(wire.OpList, `{"namespace":"service/settings"}`).ok(t); *l.res.Revision != 3 || len(l.res.Entries) != 1 {
		t.Fatalf("settings list: %s", l.raw)
	}
}
