package server_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openWatch subscribes to the watch's delivery subject, then opens it, as a client does.
func openWatch(t *testing.T, nc *nats.Conn, principal, id, ns string) chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe(wire.WatchSubject(wire.DefaultPrefix, principal, id), ch); err != nil {
		t.Fatal(err)
	}
	if r := request(t, nc, principal, wire.OpWatch, `{"watch_id":"`+id+`","namespace":"`+ns+`"}`); !r.OK {
		t.Fatalf("watch %s: %+v", id, r)
	}
	return ch
}

// A watch whose client went away without unwatching is dropped once its delivery subject has had no
// subscriber at two sweeps running, which frees its slot; a watch whose client is still there is
// kept, sweep after sweep, and still delivers.
func TestSweepDropsWatchesWhoseSubscriberIsGone(t *testing.T) {
	env := testenv.Start(t, testenv.Options{WatchSweep: 20 * time.Millisecond})
	alice := env.Connect(t, "alice")
	kept := openWatch(t, alice, "alice", "kept", "user/alice")

	bob, err := nats.Connect(env.URL, nats.CustomInboxPrefix(wire.InboxPrefix("bob")), nats.Name("bob"))
	if err != nil {
		t.Fatal(err)
	}
	openWatch(t, bob, "bob", "gone", "user/bob")
	if n := len(env.Store.LiveWatches()); n != 2 {
		t.Fatalf("%d live watches, want 2", n)
	}
	bob.Close() // gone without unwatching

	waitUntil(t, "bob's watch is dropped", func() bool { return counter(t, env.Metrics.WatchesDropped) == 1 })
	refs := env.Store.LiveWatches()
	if len(refs) != 1 || refs[0].Principal != "alice" || refs[0].WatchID != "kept" {
		t.Fatalf("live watches after the drop: %+v", refs)
	}
	sweeps := counter(t, env.Metrics.WatchSweeps)
	waitUntil(t, "three more sweeps", func() bool { return counter(t, env.Metrics.WatchSweeps) >= sweeps+3 })
	if refs := env.Store.LiveWatches(); len(refs) != 1 || counter(t, env.Metrics.WatchesDropped) != 1 {
		t.Fatalf("live watches after more sweeps: %+v", refs)
	}
	r := request(t, alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"display","layout":"grid"}}`)
	if !r.OK {
		t.Fatalf("put: %+v", r)
	}
	select {
	case m := <-kept:
		var u wire.WatchMessage
		if err := wire.DecodeWatchMessage(m.Data, &u); err != nil || u.Kind != wire.UpdatePut || u.Key != "k" {
			t.Fatalf("kept watch got %s (%v)", m.Data, err)
		}
	case <-time.After(timeout):
		t.Fatal("the kept watch got no update")
	}

	// bob's slot is free: he can watch under the same id again.
	bob2 := env.Connect(t, "bob")
	openWatch(t, bob2, "bob", "gone", "user/bob")
}
