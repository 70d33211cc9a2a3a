package main_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2ELargestBoundsOverTheWire runs the real stated with every bound of its [bounds] table at the
// largest value the configuration takes with the embedded NATS server (whose max_payload is 1 MiB):
// max_document_bytes 1 MiB less the 8 KiB a message needs besides its document, max_snapshot_bytes
// 1 MiB, max_pending_updates 4,096, ack_deadline_ms one day, every other bound 2^53-1. It starts and
// reports them; a document of exactly max_document_bytes is stored, read back and delivered as a watch
// update, one byte more is TOO_LARGE; a snapshot reply of exactly 1 MiB (max_payload itself) is
// delivered, and one byte more is WATCH_TOO_BROAD; a list page with the largest document fits.
func TestE2ELargestBoundsOverTheWire(t *testing.T) {
	const maxDoc = natsserver.MaxPayload - 8192
	const maxSnap = natsserver.MaxPayload
	extra := fmt.Sprintf("[bounds]\nmax_document_bytes = %d\nmax_snapshot_bytes = %d\nmax_pending_updates = %d\nack_deadline_ms = %d\n",
		maxDoc, maxSnap, wire.MaxPendingUpdatesLimit, wire.MaxAckDeadlineMs)
	for _, name := range []string{"max_entries_per_namespace", "max_namespaces", "max_total_value_bytes", "max_snapshot_entries",
		"max_watches", "max_watches_per_principal", "max_workers_per_principal"} {
		extra += fmt.Sprintf("%s = %d\n", name, int64(wire.MaxSafeInteger))
	}
	s := e2e.NewStated(t, e2e.Config{Principals: confPrincipals, Extra: extra})
	s.Start()
	c := dialRaw(t, s, confPrincipals, "coordinator")
	want := wire.Bounds{MaxDocumentBytes: maxDoc, MaxSnapshotBytes: maxSnap, MaxPendingUpdates: wire.MaxPendingUpdatesLimit,
		AckDeadlineMs: wire.MaxAckDeadlineMs, MaxEntriesPerNamespace: wire.MaxSafeInteger, MaxNamespaces: wire.MaxSafeInteger,
		MaxTotalValueBytes: wire.MaxSafeInteger, MaxSnapshotEntries: wire.MaxSafeInteger, MaxWatches: wire.MaxSafeInteger,
		MaxWatchesPerPrincipal: wire.MaxSafeInteger, MaxWorkersPerPrincipal: wire.MaxSafeInteger}
	if r := c.call(wire.OpInfo, `{}`).ok(t); *r.res.Bounds != want {
		t.Fatalf("info bounds %+v, want %+v", *r.res.Bounds, want)
	}

	const ns = "service/largest"
	key := strings.Repeat("k/", 127) + "kk" // 256 bytes
	sub := c.subscribeWatch("big")
	c.call(wire.OpWatch, fmt.Sprintf(`{"watch_id":"big","namespace":%q,"key_prefix":"k/"}`, ns)).ok(t)
	at := leaseBody(t, maxDoc)
	if r := c.call(wire.OpPut, putLeaseRaw(ns, key, at, "")).ok(t); r.res.Entry.Revision != 1 || len(r.res.Entry.Document) != maxDoc {
		t.Fatalf("put of %d bytes: revision %d, document %d bytes", maxDoc, r.res.Entry.Revision, len(r.res.Entry.Document))
	}
	if m := nextWatchMsg(t, sub); m.m.Kind != wire.UpdatePut || m.m.Key != key || string(m.m.Entry.Document) != at {
		t.Fatalf("update of the largest document: %.300s", m.raw)
	}
	if r := c.call(wire.OpGet, fmt.Sprintf(`{"namespace":%q,"key":%q}`, ns, key)).ok(t); string(r.res.Entry.Document) != at {
		t.Fatal("get: the largest document differs from the put's")
	}
	c.call(wire.OpPut, putLeaseRaw(ns, key, leaseBody(t, maxDoc+1), "")).code(t, wire.CodeTooLarge)
	c.call(wire.OpPut, putLeaseRaw(ns, "k/other", leaseBody(t, maxDoc+1), "")).code(t, wire.CodeTooLarge)
	c.call(wire.OpUnwatch, `{"watch_id":"big"}`).ok(t)
	noMessage(t, sub, "after the refused puts")

	// A snapshot reply of exactly max_payload: the largest document and one more, resized until the
	// reply is 1 MiB.
	size := 100
	watch := func(id string) reply {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return c.send(wire.OpWatch, withID(fmt.Sprintf(`{"watch_id":"snap","namespace":%q,"key_prefix":"k/"}`, ns), id), n)
	}
	for range 3 {
		c.call(wire.OpPut, putLeaseRaw(ns, "k/small", leaseBody(t, size), "")).ok(t)
		r := watch("1").ok(t)
		c.call(wire.OpUnwatch, `{"watch_id":"snap"}`).ok(t)
		if len(r.raw) == maxSnap {
			break
		}
		size += maxSnap - len(r.raw)
	}
	if r := watch("1").ok(t); len(r.raw) != maxSnap || len(r.res.Watch.Entries) != 2 {
		t.Fatalf("a snapshot reply of %d bytes with %d entries, want %d bytes", len(r.raw), len(r.res.Watch.Entries), maxSnap)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"snap"}`).ok(t)
	watch("10").code(t, wire.CodeWatchTooBroad) // one byte more
	c.call(wire.OpUnwatch, `{"watch_id":"snap"}`).code(t, wire.CodeNotFound)

	// A list of both: a page of 256 cannot carry them in one message; paging returns each once.
	var keys []string
	after := ""
	for pages := 0; pages < 3; pages++ {
		body := fmt.Sprintf(`{"namespace":%q,"limit":256}`, ns)
		if after != "" {
			body = fmt.Sprintf(`{"namespace":%q,"limit":256,"after_key":%q}`, ns, after)
		}
		r := c.call(wire.OpList, body).ok(t)
		for _, e := range r.res.Entries {
			keys = append(keys, e.Key)
		}
		if after = r.res.NextAfterKey; after == "" {
			break
		}
	}
	if len(keys) != 2 || keys[0] != key || keys[1] != "k/small" || after != "" {
		t.Fatalf("paged keys %v (next %q)", keys, after)
	}
}

// TestE2EExternalNATSWithASmallMaxPayload: with an external NATS server whose max_payload is 64 KiB,
// the default bounds just fit (max_document_bytes 16 KiB with 8 KiB beside it, max_snapshot_bytes
// 64 KiB, max_payload itself): stated serves, a snapshot reply of exactly max_payload is delivered,
// one byte more is WATCH_TOO_BROAD, and a list page of documents that would not fit one message is
// shortened to what does. A max_snapshot_bytes one past max_payload, or a max_document_bytes one past
// what fits beside the rest of a message, stops the start with an error naming the bound and
// max_payload.
func TestE2EExternalNATSWithASmallMaxPayload(t *testing.T) {
	const maxPayload = 65536
	ns := startRawNATS(t, &server.Options{MaxPayload: maxPayload})
	for _, bad := range []string{
		fmt.Sprintf("max_snapshot_bytes = %d", maxPayload+1),
		fmt.Sprintf("max_document_bytes = %d", maxPayload-8192+1),
	} {
		s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL(), Extra: "[bounds]\n" + bad + "\n"})
		out, err := runStated(t, "--config", s.ConfigPath)
		name, _, _ := strings.Cut(bad, " ")
		if err == nil || !strings.Contains(out, name) || !strings.Contains(out, "max_payload") {
			t.Fatalf("stated with %s on a max_payload of %d: %v\n%s", bad, maxPayload, err, out)
		}
	}

	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	s.Start()
	c := dialRaw(t, s, nil, "dev")
	c.subscribeWatch(">")
	const ns1 = "service/small-payload"
	for i := range 3 {
		c.call(wire.OpPut, putLeaseRaw(ns1, fmt.Sprintf("b/%d", i), leaseBody(t, 16384), "")).ok(t)
	}
	watch := func(id string) reply {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return c.send(wire.OpWatch, withID(fmt.Sprintf(`{"watch_id":"snap","namespace":%q,"key_prefix":"b/"}`, ns1), id), n)
	}
	// Four documents of 16 KiB and their envelopes pass 64 KiB: the fourth is sized so that the reply
	// is exactly max_payload (the reply grows byte for byte with it).
	c.call(wire.OpPut, putLeaseRaw(ns1, "b/3", leaseBody(t, 100), "")).ok(t)
	r := watch("1").ok(t)
	c.call(wire.OpUnwatch, `{"watch_id":"snap"}`).ok(t)
	c.call(wire.OpPut, putLeaseRaw(ns1, "b/3", leaseBody(t, 100+maxPayload-len(r.raw)), "")).ok(t)
	if r := watch("1").ok(t); len(r.raw) != maxPayload {
		t.Fatalf("a snapshot reply of %d bytes, want exactly %d", len(r.raw), maxPayload)
	}
	c.call(wire.OpUnwatch, `{"watch_id":"snap"}`).ok(t)
	watch("10").code(t, wire.CodeWatchTooBroad)

	var keys []string
	after := ""
	for pages := 0; pages < 8; pages++ {
		body := fmt.Sprintf(`{"namespace":%q,"limit":256}`, ns1)
		if after != "" {
			body = fmt.Sprintf(`{"namespace":%q,"limit":256,"after_key":%q}`, ns1, after)
		}
		r := c.call(wire.OpList, body).ok(t)
		if len(r.raw) > maxPayload {
			t.Fatalf("a list reply of %d bytes", len(r.raw))
		}
		for _, e := range r.res.Entries {
			keys = append(keys, e.Key)
		}
		if after = r.res.NextAfterKey; after == "" {
			break
		}
	}
	if fmt.Sprint(keys) != "[b/0 b/1 b/2 b/3]" || after != "" {
		t.Fatalf("paged keys %v (next %q)", keys, after)
	}
}
