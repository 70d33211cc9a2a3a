package server_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/syncbuf"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// edgeLease is a lease document of exactly size bytes (its compact encoding), its purpose padded with
// pad (repeated, then cut to fit: pad must be one byte, or size must leave room for whole copies).
func edgeLease(t *testing.T, size int, pad string) string {
	t.Helper()
	base := `{"holder":"w1","claimed_at_ms":1,"purpose":""}`
	n := size - len(base)
	if n < 0 || n%len(pad) != 0 {
		t.Fatalf("a lease document of %d bytes cannot be padded with %q", size, pad)
	}
	return `{"holder":"w1","claimed_at_ms":1,"purpose":"` + strings.Repeat(pad, n/len(pad)) + `"}`
}

func putBody(ns, key, doc, extra string) string {
	return fmt.Sprintf(`{"namespace":%q,"key":%q,"schema":"keeppeek.lease.v1","document":%s%s}`, ns, key, doc, extra)
}

func okReply(t *testing.T, r wire.Result, what string) wire.Result {
	t.Helper()
	if !r.OK {
		t.Fatalf("%s: %+v %+v", what, r, r.Error)
	}
	return r
}

func listRevision(t *testing.T, nc *nats.Conn, principal, ns string) (uint64, int) {
	t.Helper()
	r := okReply(t, request(t, nc, principal, wire.OpList, fmt.Sprintf(`{"namespace":%q,"limit":256}`, ns)), "list "+ns)
	return *r.Revision, len(r.Entries)
}

// SPEC section 1 over the wire: a principal id of 63 bytes is a principal (subjects, inbox, its user
// namespace, its watch subject with a watch_id of 64 bytes, a worker id of 64 bytes in its
// heartbeats); a key and a key_prefix of 256 bytes are taken, 257 refused; a multi-byte character in
// any identifier is refused, and nothing changes.
func TestIdentifiersAtTheirLimitsOverNATS(t *testing.T) {
	id63 := "p" + strings.Repeat("x", 62)
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: id63}}})
	nc := env.Connect(t, id63)
	ns := "user/" + id63
	wid := strings.Repeat("W", 64)
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, id63, wid))
	if err != nil {
		t.Fatal(err)
	}
	key256 := strings.Repeat("a/", 127) + "bb" // 256 bytes
	if len(key256) != 256 {
		t.Fatal(len(key256))
	}
	prefix256 := key256
	okReply(t, request(t, nc, id63, wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":%q,"key_prefix":%q}`, wid, ns, prefix256)), "watch 256 prefix")
	put := func(key string) wire.Result {
		return request(t, nc, id63, wire.OpPut, fmt.Sprintf(`{"namespace":%q,"key":%q,"schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, ns, key))
	}
	okReply(t, put(key256), "put 256 key")
	m, err := sub.NextMsg(timeout)
	if err != nil {
		t.Fatal(err)
	}
	var u wire.WatchMessage
	if err := json.Unmarshal(m.Data, &u); err != nil || u.Kind != wire.UpdatePut || u.Key != key256 {
		t.Fatalf("update %s %v", m.Data, err)
	}
	for _, bad := range []string{key256 + "c", "é", "a/é", "ａ", strings.Repeat("é", 128)} {
		wantErr(t, put(bad), wire.CodeInvalidArgument)
		wantErr(t, request(t, nc, id63, wire.OpList, fmt.Sprintf(`{"namespace":%q,"key_prefix":%q}`, ns, bad)), wire.CodeInvalidArgument)
	}
	wantErr(t, request(t, nc, id63, wire.OpList, fmt.Sprintf(`{"namespace":%q,"key_prefix":%q}`, ns, strings.Repeat("a/", 126)+"bbb/")), wire.CodeInvalidArgument)
	okReply(t, request(t, nc, id63, wire.OpList, fmt.Sprintf(`{"namespace":%q,"key_prefix":%q}`, ns, strings.Repeat("a/", 126)+"bb/")), "prefix 255 ending in /")
	for _, bad := range []string{wid + "X", "é", strings.Repeat("é", 32), "w.x"} {
		wantErr(t, request(t, nc, id63, wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":%q}`, bad, ns)), wire.CodeInvalidArgument)
	}
	if rev, n := listRevision(t, nc, id63, ns); rev != 1 || n != 1 {
		t.Fatalf("revision %d, %d entries", rev, n)
	}

	// Heartbeats: a worker id of 65 bytes is dropped, one of 64 kept, under the principal of 63.
	admin := env.Connect(t, "coordinator")
	sys, err := admin.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	okReply(t, request(t, admin, "coordinator", wire.OpWatch, `{"watch_id":"sys","namespace":"system"}`), "watch system")
	for _, w := range []string{wid + "X", wid} {
		body := fmt.Sprintf(`{"worker_id":%q,"service":%q,"sequence":1,"sent_at_ms":1,"interval_ms":1000,"status":"ready","leases":[%q]}`, w, id63, key256)
		if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, id63, w), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	m, err = sys.NextMsg(timeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Data, &u); err != nil || u.Kind != wire.UpdatePut || u.Key != wire.WorkerKey(id63, wid) || u.WatchSequence != 1 {
		t.Fatalf("first system update %s, want the 64-byte worker's entry", m.Data)
	}
	if rev, n := listRevision(t, admin, "coordinator", "system"); rev != 1 || n != 1 {
		t.Fatalf("system: revision %d, %d entries", rev, n)
	}
}

// max_document_bytes is on the compact encoding, in bytes: multi-byte characters count their bytes,
// an escape its six.
func TestDocumentBytesCountUTF8Bytes(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	const ns = "service/utf8"
	at := edgeLease(t, 16384-2, "é")
	at = strings.Replace(at, `"w1"`, `"w1x"`, 1)
	at = strings.Replace(at, `"claimed_at_ms":1`, `"claimed_at_ms":12`, 1)
	if len(at) != 16384 {
		t.Fatalf("len %d", len(at))
	}
	r := okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "at", at, "")), "put at")
	if string(r.Entry.Document) != at {
		t.Fatal("stored differs")
	}
	over := strings.Replace(at, `"claimed_at_ms":12`, `"claimed_at_ms":123`, 1)
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "over", over, "")), wire.CodeTooLarge)
	esc := strings.Replace(at, "é", `\u00e9`, 1) // 6 bytes for 2: 4 more
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "esc", esc, "")), wire.CodeTooLarge)
	esc = strings.Replace(esc, "éé", "", 2) // 8 bytes fewer
	esc = strings.Replace(esc, `"claimed_at_ms":12`, `"claimed_at_ms":123456`, 1)
	if len(esc) != 16384 {
		t.Fatalf("len %d", len(esc))
	}
	r = okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "esc", esc, "")), "put escaped")
	if string(r.Entry.Document) != esc {
		t.Fatalf("escaped stored as %d bytes", len(r.Entry.Document))
	}
	if rev, n := listRevision(t, nc, "coordinator", ns); rev != 2 || n != 2 {
		t.Fatalf("revision %d, %d entries", rev, n)
	}
}

// nextMessage reads the next watch message on sub.
func nextMessage(t *testing.T, sub *nats.Subscription) wire.WatchMessage {
	t.Helper()
	m, err := sub.NextMsg(timeout)
	if err != nil {
		t.Fatalf("no message on %s: %v", sub.Subject, err)
	}
	var u wire.WatchMessage
	if err := json.Unmarshal(m.Data, &u); err != nil {
		t.Fatalf("watch message %s: %v", m.Data, err)
	}
	return u
}

// With max_watches = 1 (so max_watches_per_principal too), max_pending_updates = 1 and
// max_snapshot_entries = 1: the one slot is taken by one watch and refused to every other, a refused
// watch (too broad, exhausted) takes no slot, and a watch closed for any reason (OVERFLOW after its
// first unacknowledged update, SNAPSHOT_FAILED, unwatch) frees its slot by the time its CLOSED message
// arrives.
func TestSmallestWatchBoundsOverNATS(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxWatches, b.MaxWatchesPerPrincipal, b.MaxPendingUpdates, b.MaxSnapshotEntries = 1, 1, 1, 1
	env := testenv.Start(t, testenv.Options{Bounds: &b})
	nc, alice := env.Connect(t, "coordinator"), env.Connect(t, "alice")
	const ns = "service/small"
	put := func(key string) {
		t.Helper()
		okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, key, lease, "")), "put "+key)
	}
	put("a/1")
	put("a/2")
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "*"))
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"broad","namespace":"service/small"}`), wire.CodeWatchTooBroad)
	okReply(t, request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"one","namespace":"service/small","key_prefix":"a/1"}`), "watch one")
	wantErr(t, request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"two","namespace":"service/small","key_prefix":"b"}`), wire.CodeResourceExhausted)
	wantErr(t, request(t, alice, "alice", wire.OpWatch, `{"watch_id":"two","namespace":"user/alice"}`), wire.CodeResourceExhausted)

	// OVERFLOW: the first update is sent, the second closes the watch.
	put("a/1")
	if u := nextMessage(t, sub); u.Kind != wire.UpdatePut || u.WatchSequence != 1 {
		t.Fatalf("first update %+v", u)
	}
	put("a/1")
	if u := nextMessage(t, sub); u.Kind != wire.UpdateClosed || u.Reason != wire.CloseOverflow {
		t.Fatalf("second update %+v, want CLOSED OVERFLOW", u)
	}
	okReply(t, request(t, alice, "alice", wire.OpWatch, `{"watch_id":"two","namespace":"user/alice"}`), "alice's watch after the close")
	wantErr(t, request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"one","namespace":"service/small","key_prefix":"a/1"}`), wire.CodeResourceExhausted)
	okReply(t, request(t, alice, "alice", wire.OpUnwatch, `{"watch_id":"two"}`), "alice's unwatch")

	// SNAPSHOT_FAILED: a watch request without a reply subject registers, cannot deliver its
	// snapshot, and closes.
	if err := nc.Publish(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpWatch), []byte(`{"watch_id":"mute","namespace":"service/small","key_prefix":"a/2"}`)); err != nil {
		t.Fatal(err)
	}
	if u := nextMessage(t, sub); u.Kind != wire.UpdateClosed || u.WatchID != "mute" || u.Reason != wire.CloseSnapshotFailed {
		t.Fatalf("watch without a reply subject: %+v, want CLOSED SNAPSHOT_FAILED", u)
	}
	okReply(t, request(t, alice, "alice", wire.OpWatch, `{"watch_id":"two","namespace":"user/alice"}`), "alice's watch after SNAPSHOT_FAILED")
	if rev, n := listRevision(t, nc, "coordinator", ns); rev != 4 || n != 2 {
		t.Fatalf("revision %d, %d entries", rev, n)
	}
}

// max_pending_updates at its largest (4,096): every one of 4,096 unacknowledged updates is sent, the
// 4,097th closes the watch with OVERFLOW.
func TestLargestPendingUpdatesOverNATS(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxPendingUpdates = wire.MaxPendingUpdatesLimit
	env := testenv.Start(t, testenv.Options{Bounds: &b})
	nc := env.Connect(t, "coordinator")
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	okReply(t, request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"big","namespace":"service/big"}`), "watch")
	const n = wire.MaxPendingUpdatesLimit + 1
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), []byte(putBody("service/big", fmt.Sprintf("k%02d", i%100), lease, "")), timeout)
			if err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
				t.Errorf("put %d: %v %s", i, err, msgData(msg))
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for seq := uint64(1); seq <= wire.MaxPendingUpdatesLimit; seq++ {
		if u := nextMessage(t, sub); u.Kind != wire.UpdatePut || u.WatchSequence != seq {
			t.Fatalf("update %d: %+v", seq, u)
		}
	}
	if u := nextMessage(t, sub); u.Kind != wire.UpdateClosed || u.Reason != wire.CloseOverflow {
		t.Fatalf("after %d pending updates: %+v, want CLOSED OVERFLOW", wire.MaxPendingUpdatesLimit, u)
	}
}

// request_id at 2^53-1 is echoed by every refusal, whichever check answers, and 2^53 is refused and
// answered with 0.
func TestRequestIDEdgesOnEveryRefusal(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	big := `{"request_id":9007199254740991,"watch_id":"w","applied_sequence":0,"pad":"` + strings.Repeat("x", 5000) + `"}`
	for _, tc := range []struct {
		as   string
		op   wire.Op
		body string
		code wire.Code
	}{
		{"coordinator", wire.OpGet, `{"request_id":9007199254740991,"namespace":"service/x","key":"a//b"}`, wire.CodeInvalidArgument},
		{"coordinator", wire.OpGet, `{"request_id":9007199254740991,"namespace":"service/x","key":"a","bogus":1}`, wire.CodeInvalidArgument},
		{"coordinator", wire.OpPut, `{"request_id":9007199254740991,"namespace":"service/x","key":"a","schema":"keeppeek.lease.v1","document":[]}`, wire.CodeInvalidArgument},
		{"coordinator", wire.OpPut, `{"request_id":9007199254740991,"namespace":"service/x","key":"a","schema":"keeppeek.lease.v1","document":{},"ttl_ms":999}`, wire.CodeTTLInvalid},
		{"coordinator", wire.OpPut, `{"request_id":9007199254740991,"namespace":"system","key":"a","schema":"keeppeek.lease.v1","document":{}}`, wire.CodePermissionDenied},
		{"coordinator", wire.OpGet, `{"request_id":9007199254740991,"namespace":"service/x","key":"a"}`, wire.CodeNotFound},
		{"coordinator", wire.OpAck, `{"request_id":9007199254740991,"watch_id":"w","applied_sequence":0}`, wire.CodeNotFound},
		{"coordinator", wire.OpAck, big, wire.CodeInvalidArgument},
		{"coordinator", wire.OpUnwatch, `{"request_id":9007199254740991,"watch_id":"w.x"}`, wire.CodeInvalidArgument},
		{"coordinator", wire.OpList, `{"request_id":9007199254740991,"namespace":"service/x","limit":257}`, wire.CodeInvalidArgument},
		{"mallory", wire.OpGet, `{"request_id":9007199254740991,"namespace":"user/mallory","key":"a"}`, wire.CodePermissionDenied},
		{"mallory", wire.OpAck, `{"request_id":9007199254740991,"watch_id":"w","applied_sequence":0}`, wire.CodePermissionDenied},
	} {
		r := request(t, nc, tc.as, tc.op, tc.body)
		if r.OK || r.Error == nil || r.Error.Code != tc.code || r.RequestID != wire.MaxSafeInteger {
			t.Errorf("%s %.120s: %+v %v, want %s with request_id 2^53-1", tc.op, tc.body, r, r.Error, tc.code)
		}
		over := strings.Replace(tc.body, "9007199254740991", "9007199254740992", 1)
		r = request(t, nc, tc.as, tc.op, over)
		if r.OK || r.Error == nil || r.RequestID != 0 {
			t.Errorf("%s %.120s: %+v %v, want an error with request_id 0", tc.op, over, r, r.Error)
		}
	}
}

// The other key fields at 256 and 257 bytes: a list's after_key and a guard's key.
func TestAfterKeyAndGuardKeyAtTheirLimits(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	const ns = "service/keys"
	key256 := strings.Repeat("a/", 127) + "bb"
	okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, key256, lease, "")), "put")
	okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "z", lease, "")), "put z")
	r := okReply(t, request(t, nc, "coordinator", wire.OpList, fmt.Sprintf(`{"namespace":%q,"after_key":%q}`, ns, key256)), "after_key 256")
	if len(r.Entries) != 1 || r.Entries[0].Key != "z" {
		t.Fatalf("after a 256-byte after_key: %+v", r.Entries)
	}
	wantErr(t, request(t, nc, "coordinator", wire.OpList, fmt.Sprintf(`{"namespace":%q,"after_key":%q}`, ns, key256+"c")), wire.CodeInvalidArgument)
	okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "z", lease, fmt.Sprintf(`,"guard":{"key":%q,"revision":1}`, key256))), "guarded by a 256-byte key")
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "z", lease, fmt.Sprintf(`,"guard":{"key":%q,"revision":1}`, key256+"c"))), wire.CodeInvalidArgument)
	wantErr(t, request(t, nc, "coordinator", wire.OpDelete, fmt.Sprintf(`{"namespace":%q,"key":"z","guard":{"key":%q,"revision":1}}`, ns, key256+"c")), wire.CodeInvalidArgument)
	if rev, n := listRevision(t, nc, "coordinator", ns); rev != 3 || n != 2 {
		t.Fatalf("revision %d, %d entries", rev, n)
	}
}

// A put refused at a bound, or by its expected_revision or guard, with a lease changes nothing: the
// entry it would have replaced keeps no lease (it does not expire when the refused lease would have),
// the counters stay (a put that fits afterwards still fits), and the watch sees only what committed.
func TestRefusedLeasedPutsLeaveNoDeadline(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxTotalValueBytes = 100
	env := testenv.Start(t, testenv.Options{Bounds: &b})
	nc := env.Connect(t, "coordinator")
	const ns = "service/refused"
	okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "k", edgeLease(t, 60, "a"), "")), "put k")
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "w"))
	if err != nil {
		t.Fatal(err)
	}
	okReply(t, request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"w","namespace":"service/refused"}`), "watch")
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "k", edgeLease(t, 101, "a"), `,"ttl_ms":1000`)), wire.CodeQuotaExceeded)
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "k", edgeLease(t, 60, "a"), `,"ttl_ms":1000,"expected_revision":7`)), wire.CodeConflict)
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "k", edgeLease(t, 60, "a"), `,"ttl_ms":1000,"guard":{"key":"g","revision":1}`)), wire.CodeGuardFailed)
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "k", edgeLease(t, 16385, "a"), `,"ttl_ms":1000`)), wire.CodeTooLarge)
	// A lease that does commit, after the refused ones: when its EXPIRE arrives, theirs would be due.
	okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "later", `{"holder":"w1","claimed_at_ms":1}`, `,"ttl_ms":1000`)), "put later")
	for _, want := range []string{"PUT later", "EXPIRE later"} {
		if u := nextMessage(t, sub); fmt.Sprintf("%s %s", u.Kind, u.Key) != want {
			t.Fatalf("update %+v, want %s", u, want)
		}
	}
	g := okReply(t, request(t, nc, "coordinator", wire.OpGet, `{"namespace":"service/refused","key":"k"}`), "get k")
	if g.Entry.Revision != 1 || g.Entry.TTLMs != 0 || g.Entry.ExpiresAtMs != 0 {
		t.Fatalf("k after the refused leased puts: %+v", g.Entry)
	}
	okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, "k", edgeLease(t, 100, "a"), "")), "k grown to exactly the bound")
	if rev, n := listRevision(t, nc, "coordinator", ns); rev != 4 || n != 1 {
		t.Fatalf("revision %d, %d entries", rev, n)
	}
}

// A heartbeat whose worker status cannot fit max_document_bytes (long ids, a small bound: not even
// without its leases) is refused by a bound as one past max_workers_per_principal is: counted
// "refused" and warned about, naming the bound, not dropped at debug level as a malformed one, so an
// operator learns why the worker has no entry. A worker whose status fits is kept.
func TestHeartbeatOverMaxDocumentBytesIsRefusedAndWarned(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxDocumentBytes = 300
	id63 := "p" + strings.Repeat("x", 62)
	logs := &syncbuf.Buffer{}
	env := testenv.Start(t, testenv.Options{Bounds: &b, Metrics: true, Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: id63}},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	coord, nc := env.Connect(t, "coordinator"), env.Connect(t, id63)
	beat := func(id string) {
		t.Helper()
		body := fmt.Sprintf(`{"worker_id":%q,"service":%q,"sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"starting","leases":["l"]}`, id, id63)
		if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, id63, id), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("w", 64)
	beat(long)
	waitUntil(t, "the long worker's heartbeat is refused", func() bool {
		return counter(t, env.Metrics.Heartbeats.WithLabelValues("refused")) == 1
	})
	if n := counter(t, env.Metrics.Heartbeats.WithLabelValues("dropped")); n != 0 {
		t.Fatalf("%v heartbeats dropped, want 0", n)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "max_document_bytes") {
		t.Fatalf("no warning naming max_document_bytes:\n%s", l)
	}
	beat("w1")
	waitUntil(t, "the short worker is kept", func() bool {
		return request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, wire.WorkerKey(id63, "w1"))).OK
	})
	wantErr(t, request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, wire.WorkerKey(id63, long))), wire.CodeNotFound)
}
