package wire_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

func FuzzAppendEntryMatchesMarshal(f *testing.F) {
	f.Add("service/x", "a/b", "keeppeek.lease.v1", "alice", uint64(3), int64(5), int64(0), []byte(`{"a":[1,"x"]}`))
	f.Add("user/a", "k", "s<>&\u2028\"\\\n\x01\xff", "o", uint64(0), int64(-1), int64(7), []byte(`{}`))
	f.Fuzz(func(t *testing.T, ns, key, schema, owner string, rev uint64, created, ttl int64, doc []byte) {
		compact, err := wire.CompactDocument(doc)
		if err != nil {
			return
		}
		e := wire.Entry{Namespace: ns, Key: key, Schema: schema, Owner: owner, Revision: rev, CreatedAtMs: created,
			UpdatedAtMs: created + 1, TTLMs: ttl, ExpiresAtMs: ttl * 2, Document: compact}
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		if got := htmlEscaped(wire.AppendEntry(nil, &e)); string(got) != string(want) {
			t.Fatalf("AppendEntry\n got %s\nwant %s", got, want)
		}
	})
}

func FuzzAppendResultMatchesMarshal(f *testing.F) {
	f.Add(int64(3), true, uint8(0), "k", uint64(5), "next", []byte(`{"a":1}`))
	f.Add(int64(0), false, uint8(1), "", uint64(0), "", []byte(`{}`))
	f.Add(int64(9), true, uint8(2), "a/b", uint64(7), "x", []byte(`{"s":"<&>"}`))
	f.Add(int64(9), true, uint8(3), "w-1", uint64(2), "", []byte(`{"n":[]}`))
	f.Fuzz(func(t *testing.T, id int64, ok bool, shape uint8, key string, n uint64, s string, doc []byte) {
		compact, err := wire.CompactDocument(doc)
		if err != nil {
			return
		}
		e := wire.Entry{Namespace: "service/x", Key: key, Schema: "keeppeek.lease.v1", Owner: "o", Revision: n, Document: compact}
		r := wire.Result{RequestID: id, OK: ok}
		switch shape % 6 {
		case 0:
			r.Entry = &e
		case 1:
			r.Error = wire.RevisionError(wire.CodeConflict, n, "%s", s)
		case 2:
			r.Entries, r.NextAfterKey, r.Revision = []wire.Entry{e, e}, s, &n
		case 3:
			r.Watch = &wire.WatchState{WatchID: key, Namespace: "user/a", KeyPrefix: s, SnapshotRevision: n, Entries: []wire.Entry{e}}
		case 4:
			r.WatchID, r.AppliedSequence = key, &n
		case 5:
			b := wire.DefaultBounds()
			r.ServerID, r.Version, r.Epoch, r.Features, r.Bounds = s, key, s, []string{wire.FeatureStateStore}, &b
			r.Entries = []wire.Entry{}
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := htmlEscaped(wire.AppendResult(nil, &r)); string(got) != string(want) {
			t.Fatalf("AppendResult\n got %s\nwant %s", got, want)
		}
	})
}

// htmlEscaped is b as json.Marshal would write it: Marshal HTML-escapes inside raw documents too,
// which AppendEntry leaves as stored (the same JSON value either way).
func htmlEscaped(b []byte) []byte {
	var out bytes.Buffer
	json.HTMLEscape(&out, b)
	return out.Bytes()
}

// EncodeRequest gives what json.Marshal gives (but for HTML escaping inside the document), and fails
// where it fails.
func FuzzEncodeRequestMatchesMarshal(f *testing.F) {
	f.Add(int64(3), "user/alice", "k", "keeppeek.lease.v1", []byte(`{"a":[1,"x"]}`), int64(2), int64(5000), "g", true, int64(9))
	f.Add(int64(0), "s<>&\u2028\"\\\n\x01\xff", "", "", []byte(" { \"a\" : \"<b>\" } "), int64(-1), int64(0), "", false, int64(-4))
	f.Add(int64(1), "n", "k", "s", []byte(`{"a":`), int64(0), int64(0), "", false, int64(0))
	f.Add(int64(1), "n", "k", "s", []byte(nil), int64(0), int64(0), "", false, int64(0))
	f.Fuzz(func(t *testing.T, id int64, ns, key, schema string, doc []byte, exp, ttl int64, guardKey string, withPtrs bool, seq int64) {
		put := wire.PutRequest{RequestID: id, Namespace: ns, Key: key, Schema: schema, Document: doc}
		ack := wire.AckRequest{RequestID: id, WatchID: key}
		if withPtrs {
			put.ExpectedRevision, put.TTLMs, put.Guard = &exp, &ttl, &wire.Guard{Key: guardKey, Revision: exp}
			ack.AppliedSequence = &seq
		}
		for _, req := range []any{&put, &ack} {
			got, gerr := wire.EncodeRequest(req)
			want, werr := json.Marshal(req)
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("%+v: EncodeRequest error %v, Marshal error %v", req, gerr, werr)
			}
			if gerr == nil && string(htmlEscaped(got)) != string(want) {
				t.Fatalf("EncodeRequest\n got %s\nwant %s", got, want)
			}
		}
	})
}
