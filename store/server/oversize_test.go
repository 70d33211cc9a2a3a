package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// Acks, unwatches and heartbeats wait in per-principal queues that hold their bodies: one padded far
// beyond what it can need is refused (INVALID_ARGUMENT, answered) or dropped (a heartbeat, counted)
// before it waits, and its well-formed twin is still handled.
func TestOversizedQueuedRequestsAreRefused(t *testing.T) {
	env := testenv.Start(t, testenv.Options{WatchSweep: time.Hour}) // WatchSweep gives the Env its metrics
	alice := env.Connect(t, "alice")
	coord := env.Connect(t, "coordinator")
	pad := strings.Repeat(" ", 8192)
	for _, op := range []wire.Op{wire.OpAck, wire.OpUnwatch} {
		body := fmt.Sprintf(`{"request_id":7,"watch_id":"w1",%s"applied_sequence":1}`, pad)
		if op == wire.OpUnwatch {
			body = fmt.Sprintf(`{"request_id":7,%s"watch_id":"w1"}`, pad)
		}
		r := request(t, alice, "alice", op, body)
		if r.OK || r.Error == nil || r.Error.Code != wire.CodeInvalidArgument || r.RequestID != 7 || !strings.Contains(r.Error.Message, "at most 4096 bytes") {
			t.Fatalf("padded %s: %+v %+v", op, r, r.Error)
		}
		// The same request without the padding reaches the engine: no such watch.
		r = request(t, alice, "alice", op, strings.Replace(body, pad, "", 1))
		if r.OK || r.Error == nil || r.Error.Code != wire.CodeNotFound {
			t.Fatalf("%s: %+v %+v", op, r, r.Error)
		}
	}

	hb := func(id, extra string) {
		body := fmt.Sprintf(`{"worker_id":%q,"service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready",%s"leases":[]}`, id, extra)
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", id), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := alice.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	hb("big", strings.Repeat(" ", 70000))
	waitUntil(t, "the oversized heartbeat is dropped", func() bool {
		return counter(t, env.Metrics.Heartbeats.WithLabelValues("dropped")) == 1
	})
	hb("small", "")
	has := func(id string) bool {
		return request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, wire.WorkerKey("alice", id))).OK
	}
	waitUntil(t, "the small heartbeat is kept", func() bool { return has("small") })
	if has("big") {
		t.Fatal("the oversized heartbeat made a worker entry")
	}
}
