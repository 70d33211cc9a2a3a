package server_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// One worker that heartbeats far faster than the store commits (a loop gone wrong: every heartbeat a
// status change, so every one a put) must not hold back another principal's worker (issue 3: a client
// never stalls another): its heartbeats waiting to be handled are replaced by its newest, so bob's
// one heartbeat is handled after a few of alice's commits, not after all of them, and alice's entry
// still ends at her last heartbeat's status.
//
// Handing a heartbeat over takes microseconds and each of alice's puts a commit with an fsync, so
// when bob's entry appears the system namespace has seen only a few of alice's puts; a server that
// queues each of them behind the others (and bob's behind them all in NATS) has committed nearly
// all of them by then.
func TestHeartbeatFloodNeverHoldsBackOtherWorkers(t *testing.T) {
	env := testenv.Start(t, testenv.Options{WatchSweep: time.Hour}) // WatchSweep gives the Env its metrics
	coord := env.Connect(t, "coordinator")
	alice := env.Connect(t, "alice")
	bob := env.Connect(t, "bob")
	const flood = 3000
	statuses := []string{"starting", "ready"}
	for i := range flood {
		status := statuses[i%2]
		if i == flood-1 {
			status = "draining"
		}
		body := fmt.Sprintf(`{"worker_id":"f","service":"svc","sequence":%d,"sent_at_ms":1,"interval_ms":60000,"status":%q,"leases":[]}`, i+1, status)
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "f"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := alice.Flush(); err != nil {
		t.Fatal(err)
	}
	body := `{"worker_id":"g","service":"svc","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`
	if err := bob.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "bob", "g"), []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := bob.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	get := func(key string) wire.Result {
		return request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, key))
	}
	for !get("workers/bob/g").OK {
		if time.Now().After(deadline) {
			t.Fatal("bob's heartbeat was not handled within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	l := request(t, coord, "coordinator", wire.OpList, `{"namespace":"system","limit":1}`)
	if !l.OK || l.Revision == nil {
		t.Fatalf("list system: %+v", l)
	}
	if *l.Revision >= flood/2 {
		t.Fatalf("bob's heartbeat was handled only after %d commits of alice's %d heartbeats: it waited behind them", *l.Revision, flood)
	}
	// Alice's newest heartbeat wins, and every heartbeat is accounted for: handled or superseded.
	for {
		r := get("workers/alice/f")
		var doc wire.WorkerStatus
		if r.OK && json.Unmarshal(r.Entry.Document, &doc) == nil && doc.Status == "draining" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's worker never reached her last heartbeat's status: %+v", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
	count := func(outcome string) float64 {
		var m dto.Metric
		_ = env.Metrics.Heartbeats.WithLabelValues(outcome).Write(&m)
		return m.GetCounter().GetValue()
	}
	for count("accepted")+count("superseded") != flood+1 {
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats: %v accepted, %v superseded, %v dropped; want %d accepted or superseded",
				count("accepted"), count("superseded"), count("dropped"), flood+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
