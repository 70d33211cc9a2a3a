package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// The bounds on what waits in a principal's queues (an ack or unwatch of 4 KiB, a heartbeat of 64 KiB)
// count a message's headers too: nats.go keeps a message's body in the same buffer as its headers (and
// decodes the headers into a map beside it), so a well-formed ack or heartbeat carrying a header of
// nearly NATS's max_payload holds that much while it waits. A principal could otherwise have a
// thousand such heartbeats, 2 GiB of stated's memory, wait behind a slow disk.
func TestOversizedHeadersOfQueuedRequestsAreRefused(t *testing.T) {
	env := testenv.Start(t, testenv.Options{WatchSweep: time.Hour}) // WatchSweep gives the Env its metrics
	alice := env.Connect(t, "alice")
	coord := env.Connect(t, "coordinator")
	pad := nats.Header{"X-Pad": []string{strings.Repeat("a", 200_000)}}
	for _, op := range []wire.Op{wire.OpAck, wire.OpUnwatch} {
		body := `{"request_id":7,"watch_id":"w1","applied_sequence":1}`
		if op == wire.OpUnwatch {
			body = `{"request_id":7,"watch_id":"w1"}`
		}
		msg, err := alice.RequestMsg(&nats.Msg{Subject: wire.StateSubject(wire.DefaultPrefix, "alice", op), Header: pad,
			Data: []byte(body)}, timeout)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var r wire.Result
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.OK || r.Error == nil || r.Error.Code != wire.CodeInvalidArgument || r.RequestID != 7 {
			t.Fatalf("%s with a 200 KB header: %+v %+v", op, r, r.Error)
		}
		// The same request with a small header reaches the engine: no such watch.
		msg, err = alice.RequestMsg(&nats.Msg{Subject: wire.StateSubject(wire.DefaultPrefix, "alice", op),
			Header: nats.Header{"Trace": []string{"abc"}}, Data: []byte(body)}, timeout)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		r = wire.Result{}
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		wantErr(t, r, wire.CodeNotFound)
	}

	hb := func(id string, h nats.Header) {
		body := fmt.Sprintf(`{"worker_id":%q,"service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`, id)
		if err := alice.PublishMsg(&nats.Msg{Subject: wire.HeartbeatSubject(wire.DefaultPrefix, "alice", id), Header: h, Data: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		if err := alice.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	hb("big", pad)
	waitUntil(t, "the heartbeat with an oversized header is dropped", func() bool {
		return counter(t, env.Metrics.Heartbeats.WithLabelValues("dropped")) == 1
	})
	hb("small", nats.Header{"Trace": []string{"abc"}})
	has := func(id string) bool {
		return request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, wire.WorkerKey("alice", id))).OK
	}
	waitUntil(t, "the heartbeat with a small header is kept", func() bool { return has("small") })
	if has("big") {
		t.Fatal("the heartbeat with an oversized header made a worker entry")
	}
}
