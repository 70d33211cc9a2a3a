package server

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// entryFloor is never more than an entry's encoding (else cutPage would drop entries that fit), for
// entries with and without leases, escapes, invalid UTF-8, the widest numbers and an empty document.
func TestEntryFloorIsALowerBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	docs := []string{"", `{}`, `{"a":"<&>"}`, `{"n":` + strings.Repeat("1", 30) + `}`}
	for i := range 2000 {
		e := wire.Entry{Namespace: "service/x", Key: fmt.Sprintf("k/%d", r.IntN(1e9)), Schema: "keeppeek.lease.v1",
			Owner: []string{"a", "coordinator", "bad\xffutf8", "<html>"}[r.IntN(4)], Revision: r.Uint64N(wire.MaxSafeInteger),
			CreatedAtMs: r.Int64N(wire.MaxSafeInteger), UpdatedAtMs: r.Int64N(10)}
		if r.IntN(2) == 0 {
			e.TTLMs, e.ExpiresAtMs = 1000, r.Int64N(wire.MaxSafeInteger)
		}
		if d := docs[i%len(docs)]; d != "" {
			e.Document = json.RawMessage(d)
		}
		if floor, enc := entryFloor(&e), int64(len(wire.AppendEntry(nil, &e))); floor > enc {
			t.Fatalf("entryFloor %d > encoding %d of %+v", floor, enc, e)
		}
	}
}

// cutPage keeps a page whose encoding fits the limit whole, cuts one that cannot fit to the entries
// that may, naming its last key as the next page's start, and keeps at least one entry.
func TestCutPage(t *testing.T) {
	doc := json.RawMessage(`{"holder":"` + strings.Repeat("x", 1000) + `"}`)
	page := func() wire.Result {
		rev := uint64(9)
		res := wire.Result{OK: true, Revision: &rev}
		for i := range 10 {
			res.Entries = append(res.Entries, wire.Entry{Namespace: "service/x", Key: fmt.Sprintf("k%02d", i), Schema: "keeppeek.lease.v1",
				Owner: "a", Revision: uint64(i + 1), CreatedAtMs: 1, UpdatedAtMs: 1, Document: doc})
		}
		return res
	}
	full := page()
	whole := int64(len(wire.AppendResult(nil, &full)))
	cutPage(&full, whole)
	if len(full.Entries) != 10 || full.NextAfterKey != "" {
		t.Fatalf("a page that fits was cut to %d entries, next %q", len(full.Entries), full.NextAfterKey)
	}
	half := page()
	cutPage(&half, whole/2)
	if n := len(half.Entries); n < 4 || n > 5 || half.NextAfterKey != half.Entries[n-1].Key {
		t.Fatalf("a page cut to half its size kept %d entries, next %q", n, half.NextAfterKey)
	}
	tiny := page()
	cutPage(&tiny, 10)
	if len(tiny.Entries) != 1 || tiny.NextAfterKey != "k00" {
		t.Fatalf("a page over a tiny limit kept %d entries, next %q", len(tiny.Entries), tiny.NextAfterKey)
	}
}
