package wire_test

import (
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
		if got := wire.AppendEntry(nil, &e); string(got) != string(want) {
			t.Fatalf("AppendEntry\n got %s\nwant %s", got, want)
		}
	})
}
