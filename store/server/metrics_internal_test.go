package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// gathered returns the metric of family name whose labels include labels, as reg gathers it (what
// /metrics shows), or nil.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

func counterOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	if m := gathered(t, reg, name, labels); m != nil {
		return m.GetCounter().GetValue()
	}
	return 0
}

// The admin calls are requests like the state operations: each is counted in state_requests_total
// under its op (the last token of its subject, as a state op's is: backup, audit_verify) and its
// code, a refused reply subject included (REPLY_REFUSED, as the README says), and observed in
// state_request_duration_seconds.
func TestAdminRequestsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, Options{Metrics: NewMetrics(reg),
		Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "alice"}}})
	defer func() { _ = s.Stop(context.Background()) }()
	nc := s.nc
	call := func(principal string, op wire.Op, body string) wire.AdminResult {
		t.Helper()
		msg, err := nc.Request(wire.AdminSubject(wire.DefaultPrefix, principal, op), []byte(body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var r wire.AdminResult
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Refused for its reply subject (no inbox): no reply. The endpoint takes its requests in order,
	// so it has been counted once the next one on the endpoint is answered.
	if err := nc.PublishRequest(wire.AdminSubject(wire.DefaultPrefix, "coordinator", wire.AdminAuditVerify),
		"orders.created", []byte(`{"request_id":1}`)); err != nil {
		t.Fatal(err)
	}
	if r := call("coordinator", wire.AdminAuditVerify, `{"request_id":2}`); !r.OK {
		t.Fatalf("audit_verify %+v", r.Error)
	}
	if r := call("alice", wire.AdminAuditVerify, `{"request_id":3}`); r.OK || r.Error.Code != wire.CodePermissionDenied {
		t.Fatalf("audit_verify of a non-admin %+v", r)
	}
	open := call("coordinator", wire.AdminBackup, `{"request_id":4,"step":"open"}`)
	if !open.OK {
		t.Fatalf("backup open %+v", open.Error)
	}
	if r := call("coordinator", wire.AdminBackup, `{"request_id":5,"step":"read","backup_id":"nope"}`); r.OK || r.Error.Code != wire.CodeNotFound {
		t.Fatalf("read of no backup %+v", r)
	}
	if r := call("coordinator", wire.AdminBackup, fmt.Sprintf(`{"request_id":6,"step":"close","backup_id":%q}`, open.BackupID)); !r.OK {
		t.Fatalf("backup close %+v", r.Error)
	}
	for _, c := range []struct {
		op, code string
		want     float64
	}{
		{"audit_verify", ReplyRefused, 1},
		{"audit_verify", "OK", 1},
		{"audit_verify", string(wire.CodePermissionDenied), 1},
		{"backup", "OK", 2},
		{"backup", string(wire.CodeNotFound), 1},
	} {
		if got := counterOf(t, reg, "state_requests_total", map[string]string{"op": c.op, "code": c.code}); got != c.want {
			t.Errorf("state_requests_total{op=%q,code=%q} = %v, want %v", c.op, c.code, got, c.want)
		}
	}
	for op, want := range map[string]uint64{"audit_verify": 3, "backup": 3} {
		m := gathered(t, reg, "state_request_duration_seconds", map[string]string{"op": op})
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("state_request_duration_seconds{op=%q} observed %d requests, want %d", op, got, want)
		}
	}
}

// MaxConcurrentRequests bounds the admin calls too (README: stated handles at most so many requests
// at once, acks and unwatches apart): past it, an admin request waits in NATS like any other.
func TestAdminRequestsWaitForAConcurrencySlot(t *testing.T) {
	s := startServer(t, Options{MaxConcurrentRequests: 1})
	defer func() { _ = s.Stop(context.Background()) }()
	nc := s.nc
	subject := wire.AdminSubject(wire.DefaultPrefix, "coordinator", wire.AdminAuditVerify)
	s.slots <- struct{}{} // a request being handled holds the only slot
	reply, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(subject, reply.Subject, []byte(`{"request_id":1}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := reply.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("audit_verify answered with no free slot: %s", m.Data)
	}
	<-s.slots // that request ends
	m, err := reply.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the waiting admin request was not answered once a slot freed: %v", err)
	}
	if !strings.Contains(string(m.Data), `"request_id":1`) || !strings.Contains(string(m.Data), `"ok":true`) {
		t.Fatalf("reply %s", m.Data)
	}
}

// Requests past MaxConcurrentRequests wait in NATS, which drops them past the endpoint
// subscription's pending limits (nats.go's defaults: 64 MiB) as a slow consumer's. An operator sees
// them in state_requests_dropped_total, by op: every request sent is either answered or counted
// there.
func TestRequestsDroppedByNATSAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	// 8 MiB wait in the subscription: far below the NATS server's own bound on the server's
	// connection (three quarters of 64 MiB), past which it would drop requests the server never sees.
	s := startServer(t, Options{MaxConcurrentRequests: 1, Metrics: NewMetrics(reg), pendingBytes: 8 << 20})
	defer func() { _ = s.Stop(context.Background()) }()
	nc, err := nats.Connect(s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	replies, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	replies.SetPendingLimits(-1, -1)
	s.slots <- struct{}{} // a request being handled holds the only slot
	// Requests of almost a MiB each (a valid info request, padded with spaces): the first waits for
	// the slot in the handler, the next 8 or so wait in the subscription, the rest are dropped. 30 in
	// all: what waits on the NATS server for the server's connection never reaches its own bound.
	const sent = 30
	pad := strings.Repeat(" ", int(nc.MaxPayload())-1024)
	subject := wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpInfo)
	for i := range sent {
		if err := nc.PublishRequest(subject, replies.Subject, []byte(fmt.Sprintf(`{"request_id":%d}%s`, i+1, pad))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 {
		return counterOf(t, reg, "state_requests_dropped_total", map[string]string{"op": "info"})
	}
	deadline := time.Now().Add(20 * time.Second)
	for dropped() == 0 {
		if time.Now().After(deadline) {
			<-s.slots
			t.Fatal("state_requests_dropped_total{op=\"info\"} stayed 0 while NATS dropped requests")
		}
		time.Sleep(20 * time.Millisecond) // polling a metric: no event says it changed
	}
	<-s.slots // that request ends: the ones that waited are answered
	answered := 0
	for {
		d := int(dropped())
		if answered+d == sent {
			break
		}
		if answered+d > sent {
			t.Fatalf("%d answered and %d counted dropped of %d sent", answered, d, sent)
		}
		if _, err := replies.NextMsg(20 * time.Second); err != nil {
			t.Fatalf("%d answered and %d counted dropped of %d sent: %v", answered, d, sent, err)
		}
		answered++
	}
	if answered == 0 {
		t.Fatal("no request answered")
	}
	// Nothing more comes: what was counted dropped was not answered.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := replies.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a request counted dropped was answered: %.40s", m.Data)
	}
}

// Heartbeats NATS drops past the heartbeat subscription's pending limits, before the server took
// them, are counted dropped in state_heartbeats_total, as SPEC section 11 says dropped heartbeats
// are: every heartbeat sent is counted under one outcome.
func TestHeartbeatsDroppedByNATSAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, Options{Metrics: NewMetrics(reg), pendingBytes: 8 << 20}) // as for requests above
	defer func() { _ = s.Stop(context.Background()) }()
	nc, err := nats.Connect(s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The handler reads the principals before it hands a heartbeat over: holding them holds it, and
	// the heartbeats after the one it holds wait in the subscription, past whose 8 MiB NATS drops
	// the rest.
	s.mu.Lock()
	held := true
	defer func() {
		if held {
			s.mu.Unlock()
		}
	}()
	const sent = 400 // 24 MB: over the subscription's 8 MiB, under the NATS server's own bound
	body := []byte(`{"worker_id":"w1","service":"tx","sequence":1,"sent_at_ms":1,"interval_ms":1000,"status":"ready"}` +
		strings.Repeat(" ", 60_000))
	for range sent {
		if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "coordinator", "w1"), body); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil { // the server's connection has read every heartbeat sent
		t.Fatal(err)
	}
	s.mu.Unlock()
	held = false
	counted := func() (total, dropped float64) {
		for _, outcome := range []string{"accepted", "superseded", "refused", "dropped"} {
			n := counterOf(t, reg, "state_heartbeats_total", map[string]string{"outcome": outcome})
			total += n
			if outcome == "dropped" {
				dropped = n
			}
		}
		return total, dropped
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		total, dropped := counted()
		if total == sent && dropped > 0 {
			break
		}
		if total > sent || time.Now().After(deadline) {
			t.Fatalf("%v heartbeats counted (%v dropped) of %d sent", total, dropped, sent)
		}
		time.Sleep(20 * time.Millisecond) // polling a metric: no event says it changed
	}
}
