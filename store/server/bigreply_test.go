package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// A list page of large documents can be bigger than the NATS server lets one message be (1 MiB
// embedded, 100 entries of 16 KiB by default). The page is shortened to fit, with next_after_key
// naming where the next page starts, so paging through the namespace still returns every entry
// once, in key order; the reply is never dropped.
func TestListPageOverMaxPayloadIsShortened(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	const n = 120
	purpose := strings.TrimSpace(strings.Repeat("plain words ", 1300)) // about 15.6 KiB of document
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"namespace":"service/tx","key":"leases/%03d","schema":"keeppeek.lease.v1","document":{"holder":"w1","claimed_at_ms":1,"purpose":%q}}`, i, purpose)
			msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), []byte(body), timeout)
			if err != nil {
				errs <- fmt.Sprintf("put %d: %v", i, err)
				return
			}
			var r wire.Result
			if err := json.Unmarshal(msg.Data, &r); err != nil || !r.OK {
				errs <- fmt.Sprintf("put %d: %s", i, msg.Data)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	var keys []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatalf("paging does not end: %d keys so far", len(keys))
		}
		r := request(t, nc, "coordinator", wire.OpList, fmt.Sprintf(`{"request_id":%d,"namespace":"service/tx","limit":256,"after_key":%q}`, pages+1, after))
		if !r.OK || r.RequestID != int64(pages+1) || len(r.Entries) == 0 && r.NextAfterKey != "" {
			t.Fatalf("page %d: ok %v, %d entries, next %q, %+v", pages, r.OK, len(r.Entries), r.NextAfterKey, r.Error)
		}
		for _, e := range r.Entries {
			keys = append(keys, e.Key)
		}
		if r.NextAfterKey == "" {
			break
		}
		if r.NextAfterKey != r.Entries[len(r.Entries)-1].Key {
			t.Fatalf("page %d: next_after_key %q is not its last key %q", pages, r.NextAfterKey, r.Entries[len(r.Entries)-1].Key)
		}
		after = r.NextAfterKey
	}
	if len(keys) != n {
		t.Fatalf("paging returned %d keys, want %d", len(keys), n)
	}
	for i, k := range keys {
		if want := fmt.Sprintf("leases/%03d", i); k != want {
			t.Fatalf("key %d is %q, want %q", i, k, want)
		}
	}
}
