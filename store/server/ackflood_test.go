package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// One principal that floods acks and unwatches faster than the engine answers them must not hold back
// another principal's (issue 3: a slow client never stalls another). Every principal's acks arrive on
// one NATS subscription; a server whose hand-over of a request waits for room behind the flooder's
// backlog holds every later request of that subscription, bob's included, until the flooder's have
// all been handled (and, past nats.go's pending limits, has NATS drop them as a slow consumer's). The
// flooder's requests past its bound are answered RESOURCE_EXHAUSTED at once instead, and bob's ack is
// handed to the engine behind nobody else's.
//
// The engine is made slow without timing: a watch whose sink holds the fanout of a put holds the
// watch registry, and so every ack and unwatch, until the test lets it go.
func TestAckFloodNeverHoldsBackOtherPrincipals(t *testing.T) {
	env := testenv.Start(t, testenv.Options{WatchSweep: time.Hour}) // WatchSweep gives the Env its metrics
	alice := env.Connect(t, "alice")
	bob := env.Connect(t, "bob")
	if r := request(t, bob, "bob", wire.OpWatch, `{"request_id":1,"watch_id":"b","namespace":"user/bob"}`); !r.OK {
		t.Fatalf("bob's watch: %+v", r)
	}

	release := make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let) // before the Env stops, which waits for what the engine holds
	held := make(chan struct{})
	var heldOnce sync.Once
	admin := policy.Principal{ID: "coordinator", Admin: true}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.Store.Watch(ctx, admin, wire.WatchRequest{WatchID: "slow", Namespace: "user/carol"}, func(store.Message) {
		heldOnce.Do(func() { close(held) })
		<-release
	}); err != nil {
		t.Fatal(err)
	}
	putDone := make(chan error, 1)
	go func() {
		_, err := env.Store.Put(ctx, admin, wire.PutRequest{Namespace: "user/carol", Key: "k",
			Schema: "keeppeek.preference.v1", Document: json.RawMessage(`{"kind":"ui"}`)})
		putDone <- err
	}()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the put never reached the watch")
	}

	// Alice floods acks and unwatches of a watch she does not have, without waiting for replies.
	const flood = 3000
	var mu sync.Mutex
	codes := map[string]int{}
	refused := make(chan struct{})
	sub, err := alice.Subscribe(alice.NewInbox(), func(m *nats.Msg) {
		var r wire.Result
		code := "undecodable"
		if json.Unmarshal(m.Data, &r) == nil && r.Error != nil {
			code = string(r.Error.Code)
		}
		mu.Lock()
		defer mu.Unlock()
		codes[code]++
		if code == string(wire.CodeResourceExhausted) && codes[code] == flood/2 {
			close(refused)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	for i := range flood {
		op := wire.OpAck
		body := fmt.Sprintf(`{"request_id":%d,"watch_id":"none","applied_sequence":0}`, i+1)
		if i%2 == 1 {
			op = wire.OpUnwatch
			body = fmt.Sprintf(`{"request_id":%d,"watch_id":"none"}`, i+1)
		}
		if err := alice.PublishRequest(wire.StateSubject(wire.DefaultPrefix, "alice", op), sub.Subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := alice.Flush(); err != nil {
		t.Fatal(err)
	}
	// Bob acks behind the flood: NATS has queued all of alice's requests before his.
	bobDone := make(chan wire.Result, 1)
	go func() {
		var r wire.Result
		msg, err := bob.Request(wire.StateSubject(wire.DefaultPrefix, "bob", wire.OpAck),
			[]byte(`{"request_id":2,"watch_id":"b","applied_sequence":0}`), time.Minute)
		if err == nil {
			_ = json.Unmarshal(msg.Data, &r)
		}
		bobDone <- r
	}()

	// While the engine still holds her first requests, most of alice's are refused at once.
	select {
	case <-refused:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("alice's flood got replies %v while the engine held her first requests; want at least %d RESOURCE_EXHAUSTED: her backlog holds the subscription every principal's acks share",
			codes, flood/2)
	}

	let()
	if err := <-putDone; err != nil {
		t.Fatalf("put: %v", err)
	}
	r := <-bobDone
	if !r.OK || r.RequestID != 2 {
		t.Fatalf("bob's ack: %+v", r)
	}
	handled := func() float64 { // alice's requests the engine answered (bob's ack is OK)
		n := 0.0
		for _, op := range []wire.Op{wire.OpAck, wire.OpUnwatch} {
			var m dto.Metric
			_ = env.Metrics.Requests.WithLabelValues(string(op), string(wire.CodeNotFound)).Write(&m)
			n += m.GetCounter().GetValue()
		}
		return n
	}
	if n := handled(); n >= flood/2 {
		t.Fatalf("bob's ack was answered after the engine had handled %v of alice's %d requests: it waited behind them", n, flood)
	}
	// Every request of alice's is answered, one way or the other; none is dropped in silence.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		total := 0
		for _, n := range codes {
			total += n
		}
		got := fmt.Sprint(codes)
		nf, re := codes[string(wire.CodeNotFound)], codes[string(wire.CodeResourceExhausted)]
		mu.Unlock()
		if total == flood {
			if nf+re != flood || nf == 0 {
				t.Fatalf("alice's replies %s: want only NOT_FOUND (handled) and RESOURCE_EXHAUSTED (refused), some handled", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice got %d replies of %d: %s", total, flood, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
