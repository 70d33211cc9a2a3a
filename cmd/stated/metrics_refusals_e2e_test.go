package main_test

import (
	"fmt"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// requestCounts are the series of state_requests_total, by op and code.
func requestCounts(m map[string]*dto.MetricFamily) map[[2]string]float64 {
	out := map[[2]string]float64{}
	for _, s := range m["state_requests_total"].GetMetric() {
		var op, code string
		for _, l := range s.GetLabel() {
			switch l.GetName() {
			case "op":
				op = l.GetValue()
			case "code":
				code = l.GetValue()
			}
		}
		out[[2]string{op, code}] = s.GetCounter().GetValue()
	}
	return out
}

// TestE2EMetricsCountRefusals drives refused and failed traffic through stated and checks that
// /metrics counts each exactly once, under the code the client got (or REPLY_REFUSED for a request
// that got no reply because of its reply subject), that every counted request has one latency
// observation, and that refused heartbeats, ACK_TIMEOUT closes and the sweeps of watches whose
// client is gone are counted as the README says.
func TestE2EMetricsCountRefusals(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals, WatchSweepMs: 20,
		Extra: "[bounds]\nmax_watches_per_principal = 1\nmax_workers_per_principal = 1\nack_deadline_ms = 200\n"})
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	alice, _ := conn(t, s, "alice")
	base := requestCounts(scrape(t, s))

	want := map[[2]string]float64{}
	expect := func(r wire.Result, op wire.Op, code wire.Code) {
		t.Helper()
		if r.OK || r.Error == nil || r.Error.Code != code {
			t.Fatalf("%s: %+v, want %s", op, r, code)
		}
		want[[2]string{string(op), string(code)}]++
	}
	expect(request(t, alice, "alice", wire.OpGet, `not json`), wire.OpGet, wire.CodeInvalidArgument)
	expect(request(t, alice, "alice", wire.OpGet, `{"namespace":"service/tx","key":"k"}`), wire.OpGet, wire.CodePermissionDenied)
	expect(request(t, alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"},"ttl_ms":5}`),
		wire.OpPut, wire.CodeTTLInvalid)
	expect(request(t, alice, "alice", wire.OpDelete, `{"namespace":"user/alice","key":"nothing"}`), wire.OpDelete, wire.CodeNotFound)
	expect(request(t, alice, "alice", wire.OpAck, `{"watch_id":"none","applied_sequence":1}`), wire.OpAck, wire.CodeNotFound)
	expect(request(t, alice, "alice", wire.OpUnwatch, `{"watch_id":"none"}`), wire.OpUnwatch, wire.CodeNotFound)

	// A request whose reply would land in another principal's inbox gets no reply and is counted.
	if err := alice.PublishRequest(wire.StateSubject(wire.DefaultPrefix, "alice", wire.OpGet), wire.InboxPrefix("bob")+".x",
		[]byte(`{"namespace":"user/alice","key":"k"}`)); err != nil {
		t.Fatal(err)
	}
	want[[2]string{"get", "REPLY_REFUSED"}]++

	// One watch per principal: the second is RESOURCE_EXHAUSTED; the first, never acknowledged,
	// closes with ACK_TIMEOUT.
	sub, err := coord.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if r := request(t, coord, "coordinator", wire.OpWatch, `{"watch_id":"w","namespace":"service/tx"}`); !r.OK {
		t.Fatalf("watch: %+v", r)
	}
	want[[2]string{"watch", "OK"}]++
	expect(request(t, coord, "coordinator", wire.OpWatch, `{"watch_id":"w2","namespace":"service/tx"}`), wire.OpWatch, wire.CodeResourceExhausted)
	if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
		t.Fatalf("put: %+v", r)
	}
	want[[2]string{"put", "OK"}]++
	if m := nextWatchMsg(t, sub).m; m.Kind != wire.UpdatePut {
		t.Fatalf("first watch message %+v, want the PUT", m)
	}
	if m := nextWatchMsg(t, sub).m; m.Kind != wire.UpdateClosed || m.Reason != wire.CloseAckTimeout {
		t.Fatalf("second watch message %+v, want CLOSED ACK_TIMEOUT", m)
	}

	// Two workers of alice, who may have one: the second's heartbeat is refused.
	hb := `{"worker_id":%q,"service":"tx","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`
	for _, w := range []string{"w1", "w2"} {
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", w), fmt.Appendf(nil, hb, w)); err != nil {
			t.Fatal(err)
		}
		if err := alice.Flush(); err != nil {
			t.Fatal(err)
		}
		// The next worker's heartbeat is sent once this one's is handled: its outcome is then
		// known whatever the lanes' order.
		awaitMetrics(t, s, "the heartbeat of "+w+" handled", func(m map[string]*dto.MetricFamily) bool {
			return value(m, "state_heartbeats_total", map[string]string{"outcome": "accepted"})+
				value(m, "state_heartbeats_total", map[string]string{"outcome": "refused"}) >= map[string]float64{"w1": 1, "w2": 2}[w]
		})
	}

	// A watch of a client that went away: dropped by the sweep.
	gone, _ := conn(t, s, "alice")
	if _, err := gone.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "alice", "gone")); err != nil {
		t.Fatal(err)
	}
	if r := request(t, gone, "alice", wire.OpWatch, `{"watch_id":"gone","namespace":"user/alice"}`); !r.OK {
		t.Fatalf("watch: %+v", r)
	}
	want[[2]string{"watch", "OK"}]++
	gone.Close()

	m := awaitMetrics(t, s, "every request counted and the watch dropped", func(m map[string]*dto.MetricFamily) bool {
		got := requestCounts(m)
		for k, n := range want {
			if got[k]-base[k] < n {
				return false
			}
		}
		// The gauge too: one scrape reads the metrics one after another, not at one instant, and
		// may read the live watches just before the sweep drops one and counts it.
		return value(m, "state_watches_dropped_total", nil) >= 1 && value(m, "state_watches", nil) == 0
	})
	got := requestCounts(m)
	for k := range got {
		if d := got[k] - base[k]; d != want[k] {
			t.Errorf("state_requests_total{op=%q,code=%q} rose by %v, want %v", k[0], k[1], d, want[k])
		}
	}
	for _, op := range wire.Ops {
		var n float64
		for k, c := range got {
			if k[0] == string(op) {
				n += c
			}
		}
		h, _ := sample(m, "state_request_duration_seconds", map[string]string{"op": string(op)})
		if got := float64(h.GetHistogram().GetSampleCount()); got != n {
			t.Errorf("state_request_duration_seconds{op=%q} holds %v observations, want one per counted request (%v)", op, got, n)
		}
	}
	for outcome, n := range map[string]float64{"accepted": 1, "refused": 1, "dropped": 0, "superseded": 0} {
		if got := value(m, "state_heartbeats_total", map[string]string{"outcome": outcome}); got != n {
			t.Errorf("state_heartbeats_total{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
	if n := value(m, "state_watch_closures_total", map[string]string{"reason": "ACK_TIMEOUT"}); n != 1 {
		t.Errorf("state_watch_closures_total{reason=ACK_TIMEOUT} = %v, want 1", n)
	}
	if got := countedLabels(m, "state_watch_closures_total", "reason"); fmt.Sprint(got) != "[ACK_TIMEOUT]" {
		t.Errorf("closure reasons %v, want only ACK_TIMEOUT (a dropped watch is no closure)", got)
	}
	if n := value(m, "state_watches_dropped_total", nil); n != 1 {
		t.Errorf("state_watches_dropped_total = %v, want 1", n)
	}
	if n := value(m, "state_watch_sweeps_total", nil); n < 2 {
		t.Errorf("state_watch_sweeps_total = %v, want at least the two looks that dropped the watch", n)
	}
	if n := value(m, "state_watches", nil); n != 0 {
		t.Errorf("state_watches = %v, want 0", n)
	}
	if n := value(m, "state_commit_failures_total", nil); n != 0 {
		t.Errorf("state_commit_failures_total = %v, want 0", n)
	}
}
