package main_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// These tests play a hostile principal that holds valid credentials (SPEC sections 2, 9 and 11)
// against the real stated binary.

// TestE2EHostileReplySubjectsAreNotServed: alice chooses the reply subjects of her own requests, and
// stated publishes its replies as itself. A put or a watch whose reply subject lies in bob's inbox,
// on bob's watch subject, in an admin's inbox or on the capability announcements is not served at all:
// the put is not committed, the watch not registered, and nothing reaches anyone. A reply subject
// with wildcard tokens in the inbox space (_INBOX.*.x, _INBOX.>) reaches no principal's
// subscription either.
func TestE2EHostileReplySubjectsAreNotServed(t *testing.T) {
	s := startStated(t)
	alice, _ := conn(t, s, "alice")
	bob, _ := conn(t, s, "bob")
	coord, _ := conn(t, s, "coordinator")
	var listeners []*nats.Subscription
	listen := func(nc *nats.Conn, subject string) {
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, sub)
	}
	listen(bob, wire.InboxPrefix("bob")+".>")
	listen(bob, wire.WatchSubject(wire.DefaultPrefix, "bob", "*"))
	listen(coord, wire.InboxPrefix("coordinator")+".>")
	listen(coord, wire.CapsChangedSubject(wire.DefaultPrefix))

	refused := func(op wire.Op) float64 {
		return value(scrape(t, s), "state_requests_total", map[string]string{"op": string(op), "code": "REPLY_REFUSED"})
	}
	for i, reply := range []string{
		wire.InboxPrefix("bob") + ".r.1",
		wire.InboxPrefix("bob"),
		wire.WatchSubject(wire.DefaultPrefix, "bob", "w"),
		wire.InboxPrefix("coordinator") + ".r.1",
		wire.CapsChangedSubject(wire.DefaultPrefix),
	} {
		key := fmt.Sprintf("spoof-%d", i)
		for _, c := range []struct {
			op   wire.Op
			body string
		}{
			{wire.OpPut, fmt.Sprintf(`{"request_id":7,"namespace":"user/alice","key":%q,"schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, key)},
			{wire.OpWatch, fmt.Sprintf(`{"request_id":8,"watch_id":%q,"namespace":"user/alice"}`, key)},
		} {
			before := refused(c.op)
			if err := alice.PublishRequest(wire.StateSubject(wire.DefaultPrefix, "alice", c.op), reply, []byte(c.body)); err != nil {
				t.Fatal(err)
			}
			natstest.Poll(t, timeout, fmt.Sprintf("alice's %s with reply %s", c.op, reply), func() (bool, string) {
				n := refused(c.op)
				return n > before, fmt.Sprintf("%v refused", n)
			})
		}
		if r := request(t, alice, "alice", wire.OpGet, fmt.Sprintf(`{"namespace":"user/alice","key":%q}`, key)); r.OK || r.Error.Code != wire.CodeNotFound {
			t.Errorf("the put with reply %s was committed: %+v", reply, r)
		}
		r := request(t, alice, "alice", wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":"user/alice"}`, key))
		if !r.OK {
			t.Errorf("the watch with reply %s was registered: the same id now answers %+v", reply, r)
		}
	}
	// Wildcard tokens in an inbox reply: served, and delivered to nobody but wildcard subscribers,
	// which no principal may hold; one under bob's inbox is bob's, and refused.
	refusedInfo := refused(wire.OpInfo)
	for i, reply := range []string{"_INBOX.*.x", "_INBOX.>", "_INBOX.*.*.*", "_INBOX.bob.*"} {
		if err := alice.PublishRequest(wire.StateSubject(wire.DefaultPrefix, "alice", wire.OpInfo), reply, []byte(fmt.Sprintf(`{"request_id":%d}`, 100+i))); err != nil {
			t.Fatal(err)
		}
	}
	// Acks are answered in their principal's order, and stated publishes in order: once this reply
	// has reached alice, whatever stated published before it has reached the NATS server, and a
	// round trip on each listener's connection delivers what the server queued for it.
	for i, reply := range []string{"_INBOX.bob.x", "_INBOX.*.x"} {
		if err := alice.PublishRequest(wire.StateSubject(wire.DefaultPrefix, "alice", wire.OpAck), reply,
			[]byte(fmt.Sprintf(`{"request_id":%d,"watch_id":"none","applied_sequence":1}`, 200+i))); err != nil {
			t.Fatal(err)
		}
	}
	r := request(t, alice, "alice", wire.OpAck, `{"request_id":300,"watch_id":"none","applied_sequence":1}`)
	if r.OK || r.Error.Code != wire.CodeNotFound {
		t.Fatalf("alice's own ack: %+v", r)
	}
	natstest.Poll(t, timeout, "the info requests with wildcard replies", func() (bool, string) {
		n := value(scrape(t, s), "state_requests_total", map[string]string{"op": "info", "code": "OK"})
		return n >= 3 && refused(wire.OpInfo) > refusedInfo, fmt.Sprintf("%v answered", n)
	})
	// One more of alice's requests after the last info was answered: its reply follows them.
	request(t, alice, "alice", wire.OpAck, `{"request_id":301,"watch_id":"none","applied_sequence":1}`)
	for _, nc := range []*nats.Conn{bob, coord} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range listeners {
		noMessage(t, sub, "a listener on "+sub.Subject)
	}
}

// TestE2EAnotherPrincipalsWatchAndWorkersAreOutOfReach: alice cannot ack or unwatch bob's watch (the
// watch id is bob's, not hers: NOT_FOUND, and bob's watch goes on), nor touch his worker status. Her
// heartbeat for a worker id bob uses keeps a status of her own, under her principal; one whose body
// names bob as its principal, and one whose subject's worker token is a wildcard, are dropped.
func TestE2EAnotherPrincipalsWatchAndWorkersAreOutOfReach(t *testing.T) {
	s := startStated(t)
	alice, _ := conn(t, s, "alice")
	bob, _ := conn(t, s, "bob")
	coord, _ := conn(t, s, "coordinator")
	updates, err := bob.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "bob", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if r := request(t, bob, "bob", wire.OpWatch, `{"watch_id":"w","namespace":"user/bob"}`); !r.OK {
		t.Fatalf("bob's watch: %+v", r)
	}
	put := func(nc *nats.Conn, who, key string) {
		t.Helper()
		body := fmt.Sprintf(`{"namespace":"user/%s","key":%q,"schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, who, key)
		if r := request(t, nc, who, wire.OpPut, body); !r.OK {
			t.Fatalf("%s's put: %+v", who, r)
		}
	}
	put(bob, "bob", "a")
	if _, err := updates.NextMsg(timeout); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op   wire.Op
		body string
	}{
		{wire.OpAck, `{"watch_id":"w","applied_sequence":1}`},
		{wire.OpAck, `{"watch_id":"w","applied_sequence":0}`},
		{wire.OpUnwatch, `{"watch_id":"w"}`},
	} {
		if r := request(t, alice, "alice", c.op, c.body); r.OK || r.Error.Code != wire.CodeNotFound {
			t.Errorf("alice's %s %s on bob's watch id: %+v, want NOT_FOUND", c.op, c.body, r)
		}
	}
	put(bob, "bob", "b")
	msg, err := updates.NextMsg(timeout)
	if err != nil {
		t.Fatalf("bob's watch after alice's acks and unwatch: %v", err)
	}
	var m wire.WatchMessage
	if err := json.Unmarshal(msg.Data, &m); err != nil || m.Kind != wire.UpdatePut || m.WatchSequence != 2 {
		t.Fatalf("bob's watch after alice's acks and unwatch: %s (%v)", msg.Data, err)
	}
	if r := request(t, bob, "bob", wire.OpAck, `{"watch_id":"w","applied_sequence":2}`); !r.OK {
		t.Fatalf("bob's own ack: %+v", r)
	}

	// Worker statuses: the coordinator watches every worker.
	workers, err := coord.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "workers"))
	if err != nil {
		t.Fatal(err)
	}
	if r := request(t, coord, "coordinator", wire.OpWatch, `{"watch_id":"workers","namespace":"system","key_prefix":"workers/"}`); !r.OK {
		t.Fatalf("coordinator's watch: %+v", r)
	}
	beat := func(nc *nats.Conn, subject, body string) {
		t.Helper()
		if err := nc.Publish(subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	hb := func(status string) string {
		return fmt.Sprintf(`{"worker_id":"w1","service":"transcoder-a","sequence":1,"sent_at_ms":1,"interval_ms":60000,"status":%q,"leases":[]}`, status)
	}
	nextWorker := func() wire.WatchMessage {
		t.Helper()
		msg, err := workers.NextMsg(timeout)
		if err != nil {
			t.Fatalf("no worker update: %v", err)
		}
		var m wire.WatchMessage
		if err := json.Unmarshal(msg.Data, &m); err != nil {
			t.Fatal(err)
		}
		if r := request(t, coord, "coordinator", wire.OpAck, fmt.Sprintf(`{"watch_id":"workers","applied_sequence":%d}`, m.WatchSequence)); !r.OK {
			t.Fatalf("coordinator's ack: %+v", r)
		}
		return m
	}
	beat(bob, wire.HeartbeatSubject(wire.DefaultPrefix, "bob", "w1"), hb("ready"))
	if m := nextWorker(); m.Key != wire.WorkerKey("bob", "w1") {
		t.Fatalf("bob's first heartbeat: %+v", m)
	}
	// Dropped: a body that names a principal (a field heartbeats do not have), wildcard worker tokens.
	before := value(scrape(t, s), "state_heartbeats_total", map[string]string{"outcome": "dropped"})
	beat(alice, wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "w1"),
		`{"worker_id":"w1","service":"transcoder-a","principal":"bob","sequence":2,"sent_at_ms":1,"interval_ms":60000,"status":"stopping","leases":[]}`)
	for _, worker := range []string{"*", ">"} {
		body := fmt.Sprintf(`{"worker_id":%q,"service":"transcoder-a","sequence":2,"sent_at_ms":1,"interval_ms":60000,"status":"stopping","leases":[]}`, worker)
		beat(alice, wire.DefaultPrefix+".heartbeat.v1.alice."+worker, body)
	}
	natstest.Poll(t, timeout, "alice's forged heartbeats", func() (bool, string) {
		n := value(scrape(t, s), "state_heartbeats_total", map[string]string{"outcome": "dropped"})
		return n >= before+3, fmt.Sprintf("%v dropped", n-before)
	})
	// Her heartbeat for the worker id bob uses is her own worker's.
	beat(alice, wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "w1"), hb("stopping"))
	m = nextWorker()
	if m.Key != wire.WorkerKey("alice", "w1") || m.Entry == nil || m.Entry.Owner != "alice" {
		t.Fatalf("alice's heartbeat for worker w1: %+v", m)
	}
	r := request(t, coord, "coordinator", wire.OpGet, fmt.Sprintf(`{"namespace":"system","key":%q}`, wire.WorkerKey("bob", "w1")))
	if !r.OK || r.Entry.Owner != "bob" {
		t.Fatalf("bob's worker status: %+v", r)
	}
	var st wire.WorkerStatus
	if err := json.Unmarshal(r.Entry.Document, &st); err != nil || st.Status != "ready" || st.Principal != "bob" {
		t.Fatalf("bob's worker status after alice's heartbeats: %s (%v)", r.Entry.Document, err)
	}
	if n, _, _ := workers.Pending(); n != 0 {
		m, _ := workers.NextMsg(0)
		t.Fatalf("an update beyond alice's own worker: %s", m.Data)
	}
}

// TestE2ESighupRotatedCredentialEndsOldSessions: a principal whose password or nkey is replaced in
// the configuration (a leaked credential rotated) loses the connections made with the old one at the
// SIGHUP, and the old credential no longer logs in; the new one does, with the principal's identity.
// (A principal whose flags only changed keeps its connection: TestReloadKeepsPrincipalsThatStay.)
func TestE2ESighupRotatedCredentialEndsOldSessions(t *testing.T) {
	oldKey, _ := nkeys.CreateUser()
	newKey, _ := nkeys.CreateUser()
	oldPub, _ := oldKey.PublicKey()
	newPub, _ := newKey.PublicKey()
	list := append(slices.Clone(principals), e2e.Principal{ID: "keyed", Nkey: oldPub})
	s := e2e.NewStated(t, e2e.Config{Principals: list})
	s.Start()
	dial := func(id string, cred nats.Option, closed chan struct{}) (*nats.Conn, error) {
		opts := []nats.Option{cred, nats.CustomInboxPrefix(wire.InboxPrefix(id)), nats.NoReconnect()}
		if closed != nil {
			opts = append(opts, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
		}
		return nats.Connect(s.URL(), opts...)
	}
	aliceGone, keyedGone, bobGone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	sessions := map[string]chan struct{}{"alice": aliceGone, "keyed": keyedGone, "bob": bobGone}
	creds := map[string]nats.Option{"alice": nats.UserInfo("alice", password("alice")), "keyed": nats.Nkey(oldPub, oldKey.Sign),
		"bob": nats.UserInfo("bob", password("bob"))}
	for id, gone := range sessions {
		nc, err := dial(id, creds[id], gone)
		if err != nil {
			t.Fatalf("%s before the rotation: %v", id, err)
		}
		t.Cleanup(nc.Close)
	}
	rotated := slices.Clone(principals)
	for i := range rotated {
		if rotated[i].ID == "alice" {
			rotated[i].Password = "alice-rotated-pw"
		}
	}
	rotated = append(rotated, e2e.Principal{ID: "keyed", Nkey: newPub})
	s.WriteConfig(e2e.Config{Principals: rotated})
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded")
	for _, id := range []string{"alice", "keyed"} {
		select {
		case <-sessions[id]:
		case <-time.After(timeout):
			t.Fatalf("%s's session of the old credential outlived the rotation", id)
		}
		if nc, err := dial(id, creds[id], nil); err == nil {
			nc.Close()
			t.Fatalf("%s's old credential still logs in", id)
		}
	}
	select {
	case <-bobGone:
		t.Fatal("bob, unchanged, was disconnected")
	default:
	}
	for id, cred := range map[string]nats.Option{"alice": nats.UserInfo("alice", "alice-rotated-pw"), "keyed": nats.Nkey(newPub, newKey.Sign)} {
		nc, err := dial(id, cred, nil)
		if err != nil {
			t.Fatalf("%s's new credential: %v", id, err)
		}
		t.Cleanup(nc.Close)
		body := fmt.Sprintf(`{"namespace":"user/%s","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, id)
		if r := request(t, nc, id, wire.OpPut, body); !r.OK || r.Entry.Owner != id {
			t.Fatalf("%s's put with the new credential: %+v", id, r)
		}
	}
}
