package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 10 * time.Second

func request(t *testing.T, nc *nats.Conn, principal string, op wire.Op, body string) wire.Result {
	t.Helper()
	return natstest.Request(t, nc, principal, op, body, timeout)
}

func wantErr(t *testing.T, r wire.Result, code wire.Code) {
	t.Helper()
	if r.OK || r.Error == nil || r.Error.Code != code {
		t.Fatalf("want %s, got %+v", code, r)
	}
}

const lease = `{"holder":"w1","claimed_at_ms":1}`

func TestRequestsOverNATS(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	r := request(t, nc, "coordinator", wire.OpPut, `{"request_id":7,"namespace":"service/tx","key":"leases/a","schema":"keeppeek.lease.v1","document":`+lease+`}`)
	if !r.OK || r.RequestID != 7 || r.Entry == nil || r.Entry.Revision != 1 || r.Entry.Owner != "coordinator" {
		t.Fatalf("put reply %+v", r)
	}
	r = request(t, nc, "coordinator", wire.OpGet, `{"request_id":8,"namespace":"service/tx","key":"leases/a"}`)
	if !r.OK || r.RequestID != 8 || string(r.Entry.Document) != lease {
		t.Fatalf("get reply %+v", r)
	}
	r = request(t, nc, "coordinator", wire.OpPut, `{"request_id":9,"namespace":"service/tx","key":"leases/a","schema":"keeppeek.lease.v1","document":`+lease+`,"expected_revision":0}`)
	wantErr(t, r, wire.CodeConflict)
	if r.Error.CurrentRevision == nil || *r.Error.CurrentRevision != 1 || r.RequestID != 9 {
		t.Fatalf("conflict reply %+v", r)
	}
	wantErr(t, request(t, nc, "coordinator", wire.OpGet, `not json`), wire.CodeInvalidArgument)
	if r := request(t, nc, "coordinator", wire.OpGet, `not json`); r.RequestID != 0 {
		t.Fatalf("non-JSON request_id %d", r.RequestID)
	}
	wantErr(t, request(t, nc, "coordinator", wire.OpPut, `{"request_id":3,"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+lease+`,"owner":"alice"}`), wire.CodeInvalidArgument)
	// The principal is the subject token: alice may not write service/.
	alice := env.Connect(t, "alice")
	wantErr(t, request(t, alice, "alice", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+lease+`}`), wire.CodePermissionDenied)
	wantErr(t, request(t, alice, "mallory", wire.OpGet, `{"namespace":"user/mallory","key":"k"}`), wire.CodePermissionDenied)
	r = request(t, nc, "coordinator", wire.OpList, `{"namespace":"service/none"}`)
	if !r.OK || r.Revision == nil || *r.Revision != 0 || r.Entries == nil {
		t.Fatalf("list of an empty namespace %+v", r)
	}
	info := request(t, alice, "alice", wire.OpInfo, ``)
	if !info.OK || len(info.Features) != 1 || info.Features[0] != wire.FeatureStateStore || info.Bounds == nil || info.Epoch == "" {
		t.Fatalf("info %+v", info)
	}
}

// Replies are encoded into reused buffers: many concurrent requests with documents of many sizes, a
// reply too big to keep for reuse among them, and every reply still carries its own request's entry.
func TestConcurrentRepliesKeepTheirOwnBodies(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	const workers, each = 16, 25
	doc := func(w, i int) string {
		return fmt.Sprintf(`{"holder":"w%d-%d","claimed_at_ms":%d,"purpose":"%s"}`, w, i, w*1000+i,
			strings.TrimSpace(strings.Repeat("plain words ", (w*97+i*31)%400)))
	}
	check := func(op wire.Op, w, i int, body string) error {
		msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", op), []byte(body), timeout)
		if err != nil {
			return fmt.Errorf("%s %d/%d: %v", op, w, i, err)
		}
		var r wire.Result
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return fmt.Errorf("%s %d/%d: reply %.200s: %v", op, w, i, msg.Data, err)
		}
		key := fmt.Sprintf("leases/w%d-%d", w, i)
		if !r.OK || r.RequestID != int64(w*1000+i) || r.Entry == nil || r.Entry.Key != key || !bytes.Equal(r.Entry.Document, []byte(doc(w, i))) {
			return fmt.Errorf("%s %d/%d: reply for another request or garbled: %.300s", op, w, i, msg.Data)
		}
		return nil
	}
	run := func(op wire.Op) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					body := fmt.Sprintf(`{"request_id":%d,"namespace":"service/tx","key":"leases/w%d-%d"}`, w*1000+i, w, i)
					if op == wire.OpPut {
						body = fmt.Sprintf(`{"request_id":%d,"namespace":"service/tx","key":"leases/w%d-%d","schema":"keeppeek.lease.v1","document":%s}`,
							w*1000+i, w, i, doc(w, i))
					}
					if err := check(op, w, i, body); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	run(wire.OpPut)
	// A list reply of 256 entries is far bigger than the buffers kept for reuse.
	r := request(t, nc, "coordinator", wire.OpList, `{"namespace":"service/tx","limit":256}`)
	if !r.OK || len(r.Entries) != 256 {
		t.Fatalf("list: ok %v, %d entries", r.OK, len(r.Entries))
	}
	run(wire.OpGet)
}

func TestMicroServiceDiscoverable(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	msg, err := nc.Request("$SRV.INFO.keeppeek-state", nil, timeout)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Name    string `json:"name"`
			Subject string `json:"subject"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil || info.Name != "keeppeek-state" || len(info.Endpoints) != len(wire.Ops)+2 {
		t.Fatalf("service info %s: %v", msg.Data, err)
	}
}

func TestWatchDeliverySnapshotFirst(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "w1"))
	if err != nil {
		t.Fatal(err)
	}
	r := request(t, nc, "coordinator", wire.OpWatch, `{"request_id":1,"watch_id":"w1","namespace":"service/tx","key_prefix":"leases/"}`)
	if !r.OK || r.Watch == nil || r.Watch.SnapshotRevision != 0 || r.Watch.Entries == nil {
		t.Fatalf("watch reply %+v", r)
	}
	for i := 1; i <= 3; i++ {
		request(t, nc, "coordinator", wire.OpPut, fmt.Sprintf(`{"namespace":"service/tx","key":"leases/%d","schema":"keeppeek.lease.v1","document":%s}`, i, lease))
	}
	for i := 1; i <= 3; i++ {
		m, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatal(err)
		}
		var u wire.WatchMessage
		if err := json.Unmarshal(m.Data, &u); err != nil || u.WatchSequence != uint64(i) || u.Kind != wire.UpdatePut || u.Entry == nil {
			t.Fatalf("update %d: %s", i, m.Data)
		}
	}
	r = request(t, nc, "coordinator", wire.OpAck, `{"watch_id":"w1","applied_sequence":3}`)
	if !r.OK || r.AppliedSequence == nil || *r.AppliedSequence != 3 {
		t.Fatalf("ack %+v", r)
	}
	wantErr(t, request(t, nc, "coordinator", wire.OpAck, `{"watch_id":"w1","applied_sequence":4}`), wire.CodeInvalidArgument)
	if r := request(t, nc, "coordinator", wire.OpUnwatch, `{"watch_id":"w1"}`); !r.OK || r.WatchID != "w1" {
		t.Fatalf("unwatch %+v", r)
	}
}

func TestHeartbeatsBecomeWorkerEntries(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	alice := env.Connect(t, "alice")
	sub, _ := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "workers"))
	r := request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"workers","namespace":"system","key_prefix":"workers/"}`)
	if !r.OK {
		t.Fatalf("watch %+v", r)
	}
	next := func() wire.WatchMessage {
		t.Helper()
		m, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatal(err)
		}
		var u wire.WatchMessage
		if err := json.Unmarshal(m.Data, &u); err != nil {
			t.Fatal(err)
		}
		request(t, nc, "coordinator", wire.OpAck, fmt.Sprintf(`{"watch_id":"workers","applied_sequence":%d}`, u.WatchSequence))
		return u
	}
	hb := func(seq int, status string, worker string) {
		body := fmt.Sprintf(`{"worker_id":"w1","service":"transcoder-a","sequence":%d,"sent_at_ms":1,"interval_ms":400,"status":%q,"leases":["leases/a"]}`, seq, status)
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", worker), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	hb(1, "starting", "w1")
	u := next()
	if u.Kind != wire.UpdatePut || u.Key != "workers/alice/w1" || u.Entry.Owner != "alice" || u.Entry.TTLMs != 1200 {
		t.Fatalf("first heartbeat %+v", u)
	}
	first := u.Entry
	hb(2, "starting", "w1")           // unchanged: a keepalive, no update
	hb(3, "starting", "other-worker") // body worker_id differs from the subject's: dropped
	hb(4, "ready", "w1")              // changed: a put
	u = next()
	var doc wire.WorkerStatus
	if err := json.Unmarshal(u.Entry.Document, &doc); err != nil || u.Kind != wire.UpdatePut || doc.Status != "ready" ||
		doc.FirstSeenMs == 0 || u.Revision != first.Revision+1 || u.WatchSequence != 2 {
		t.Fatalf("changed heartbeat %+v %+v", u, doc)
	}
	// The worker stops: its entry expires as one EXPIRE.
	u = next()
	if u.Kind != wire.UpdateExpire || u.Key != "workers/alice/w1" || u.Revision != first.Revision+2 {
		t.Fatalf("after the worker stopped %+v", u)
	}
	if _, err := sub.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatalf("an extra update after the expiry")
	}
}

// A request whose time in the store runs out has an unknown outcome (a write may still commit), so it
// gets no reply rather than an error saying nothing changed; the server goes on answering others.
func TestTimedOutRequestGetsNoReply(t *testing.T) {
	env := testenv.Start(t, testenv.Options{RequestTimeout: time.Nanosecond})
	nc := env.Connect(t, "coordinator")
	body := `{"request_id":7,"namespace":"service/tx","key":"leases/a","schema":"keeppeek.lease.v1","document":` + lease + `}`
	msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), []byte(body), 500*time.Millisecond)
	if !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a put whose store time ran out was answered: %v %s", err, msgData(msg))
	}
	// Its context had ended before it was queued, so it changed nothing; a get, which does not wait
	// on the store, is answered.
	r := request(t, nc, "coordinator", wire.OpGet, `{"request_id":8,"namespace":"service/tx","key":"leases/a"}`)
	wantErr(t, r, wire.CodeNotFound)
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// A worker holding more leases than a worker status can list (max_document_bytes) is still seen alive:
// its entry lists the leases that fit, and steady heartbeats stay keepalives (no update, no revision).
func TestHeartbeatWithManyLeasesIsKept(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	alice := env.Connect(t, "alice")
	sub, _ := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "workers"))
	if r := request(t, nc, "coordinator", wire.OpWatch, `{"watch_id":"workers","namespace":"system","key_prefix":"workers/"}`); !r.OK {
		t.Fatalf("watch %+v", r)
	}
	next := func() wire.WatchMessage {
		t.Helper()
		m, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatal(err)
		}
		var u wire.WatchMessage
		if err := json.Unmarshal(m.Data, &u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	leases := make([]string, 400)
	for i := range leases {
		leases[i] = fmt.Sprintf("leases/front-door-video-browser-h264-720p-%04d", i)
	}
	hb := func(seq int64, status string) {
		body, _ := json.Marshal(wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", Sequence: seq, SentAtMs: 1,
			IntervalMs: 1000, Status: status, Leases: leases})
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "w1"), body); err != nil {
			t.Fatal(err)
		}
	}
	hb(1, "ready")
	first := next()
	var doc wire.WorkerStatus
	if first.Kind != wire.UpdatePut || json.Unmarshal(first.Entry.Document, &doc) != nil {
		t.Fatalf("first heartbeat: %+v", first)
	}
	if int64(len(first.Entry.Document)) > wire.DefaultBounds().MaxDocumentBytes || len(doc.Leases) == 0 ||
		len(doc.Leases) >= len(leases) || doc.Leases[0] != leases[0] {
		t.Fatalf("worker status of %d bytes lists %d of %d leases", len(first.Entry.Document), len(doc.Leases), len(leases))
	}
	for seq := range int64(3) {
		hb(2+seq, "ready") // the same: keepalives
	}
	hb(5, "draining") // a change: the next update, one revision on
	if u := next(); u.Kind != wire.UpdatePut || u.Revision != first.Revision+1 || u.WatchSequence != 2 {
		t.Fatalf("after steady heartbeats and a change: %+v, want the change at revision %d", u, first.Revision+1)
	}
}
