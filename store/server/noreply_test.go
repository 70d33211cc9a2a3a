package server_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// A request published without a reply subject (nats pub rather than nats request) is served, and its
// reply, which cannot be sent, fails on the goroutine that handles it: that failure must not be
// recorded on the micro request the NATS subscription's goroutine reads once the handler has handed
// the request over (a data race under -race, which could tear the error it reads). Requests of every
// kind, state and admin, are sent so; what they do is done (the puts commit, the watch closes with
// SNAPSHOT_FAILED), each is counted as REPLY_FAILED (not as OK, which its sender never learnt), and the
// server still answers.
func TestRequestsWithoutAReplySubjectAreServed(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Metrics: true})
	nc := env.Connect(t, "coordinator")
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "mute"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		for op, body := range map[wire.Op]string{
			wire.OpPut:  putBody("service/noreply", fmt.Sprintf("k%02d", i), lease, ""),
			wire.OpGet:  `{"namespace":"service/noreply","key":"nope"}`,
			wire.OpList: `{"namespace":"service/noreply","limit":257}`,
			wire.OpInfo: `{}`,
		} {
			if err := nc.Publish(wire.StateSubject(wire.DefaultPrefix, "coordinator", op), []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Publish(wire.AdminSubject(wire.DefaultPrefix, "coordinator", wire.AdminAuditVerify), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Publish(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpWatch), []byte(`{"watch_id":"mute","namespace":"service/noreply"}`)); err != nil {
		t.Fatal(err)
	}
	if u := nextMessage(t, sub); u.Kind != wire.UpdateClosed || u.Reason != wire.CloseSnapshotFailed {
		t.Fatalf("a watch without a reply subject: %+v, want CLOSED SNAPSHOT_FAILED", u)
	}
	waitUntil(t, "every put has committed", func() bool {
		rev, entries := listRevision(t, nc, "coordinator", "service/noreply")
		return rev == n && entries == n
	})
	failed := func(op string) float64 {
		return counter(t, env.Metrics.Requests.WithLabelValues(op, server.ReplyFailed))
	}
	waitUntil(t, "every request counted", func() bool {
		return failed("put") == n && failed("get") == n && failed("list") == n && failed("info") == n &&
			failed("audit_verify") == n && failed("watch") == 1
	})
	for _, op := range []string{"put", "info", "audit_verify", "watch"} {
		if ok := counter(t, env.Metrics.Requests.WithLabelValues(op, "OK")); ok != 0 {
			t.Errorf("%v %s requests whose reply could not be sent counted OK", ok, op)
		}
	}
}

// A watch whose snapshot reply cannot be sent is closed with SNAPSHOT_FAILED, and that closure is all
// its subscriber sees: the updates committed while the reply was being made follow a snapshot the
// client never had, so they are not sent (they came before the CLOSED, which a client reads as a gap
// in a watch it never started). Writers commit to the namespace all along, and each watch's snapshot
// is large, so commits land while replies are encoded.
func TestAWatchWhoseSnapshotFailedSendsOnlyItsClosure(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	const ns = "service/noreply"
	doc := edgeLease(t, 900, "p")
	for i := range 50 { // a snapshot of some 50 kB, under max_snapshot_bytes
		okReply(t, request(t, nc, "coordinator", wire.OpPut, putBody(ns, fmt.Sprintf("big%02d", i), doc, "")), "put")
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w := range 4 {
		wc := env.Connect(t, "coordinator")
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := putBody(ns, fmt.Sprintf("w%d", w), lease, "")
				if _, err := wc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpPut), []byte(body), timeout); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	defer writers.Wait()
	defer close(stop)
	for i := range 40 {
		id := fmt.Sprintf("mute%02d", i)
		sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", id))
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"watch_id":%q,"namespace":%q}`, id, ns)
		if err := nc.Publish(wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpWatch), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if u := nextMessage(t, sub); u.Kind != wire.UpdateClosed || u.Reason != wire.CloseSnapshotFailed {
			t.Fatalf("watch %s without a reply subject: first message %+v, want CLOSED SNAPSHOT_FAILED", id, u)
		}
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
}
