package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// ls reads every page: a namespace of more keys than the largest page (256) comes back whole, each
// key once and in order, whatever the page size, and --json stays one document.
func TestLsOverMoreThanOnePageOfTheLargestSize(t *testing.T) {
	e := start(t, "")
	c := e.client("coordinator", "coord-pw")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	const n = 300
	for i := range n {
		req := wire.PutRequest{Namespace: "service/many", Key: fmt.Sprintf("k%04d", i), Schema: leaseSchema, Document: json.RawMessage(leaseDoc)}
		if _, err := c.Put(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []string{"0", "256", "7"} {
		r := e.ok("ls", "service/many", "--json", "--limit", limit)
		var res wire.Result
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if err := dec.Decode(&res); err != nil || dec.More() {
			t.Fatalf("ls --limit %s: not one document (%v)", limit, err)
		}
		if len(res.Entries) != n || res.Revision == nil || *res.Revision != n {
			t.Fatalf("ls --limit %s: %d entries at revision %v, want %d at %d", limit, len(res.Entries), res.Revision, n, n)
		}
		for i, en := range res.Entries {
			if want := fmt.Sprintf("k%04d", i); en.Key != want {
				t.Fatalf("ls --limit %s: entry %d is %s, want %s (every key once, in order)", limit, i, en.Key, want)
			}
		}
	}
}
