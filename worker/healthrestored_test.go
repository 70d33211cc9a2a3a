package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/stated"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// NATS keeps the last asynchronous error of a connection (Conn.LastError) until it reconnects. A
// worker whose heartbeats were refused, and whose permissions are then put right by a reload (SPEC
// section 9: a changed principal keeps its connection with the new permissions), heartbeats again:
// Healthy must say so, not report the old refusal for as long as the connection lives.
func TestWorkerHealthyAgainOnceHeartbeatsAreAllowed(t *testing.T) {
	ns, connect := deniedAlice(t)
	beats, err := connect("watcher").SubscribeSync(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-30"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Options{Conn: connect("alice"), Principal: "alice", WorkerID: "tx-30",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runReady(t, w)
	deadline := time.Now().Add(10 * time.Second)
	for w.Healthy() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a worker whose heartbeats are refused is healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ns.Reload([]natsserver.User{watcher, aliceAs("alice")}); err != nil {
		t.Fatal(err)
	}
	// The heartbeats now go through.
	for {
		m, err := beats.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no heartbeat after the permissions were put right: %v", err)
		}
		var hb wire.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil && hb.Status == wire.StatusReady {
			break
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		err := w.Healthy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats go through again, yet Healthy still says: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// aliceAs is the NATS user alice with the permissions of principal.
func aliceAs(principal string) natsserver.User {
	return natsserver.User{Name: "alice", Password: "alice-pw",
		Permissions: stated.Permissions(wire.DefaultPrefix, stated.PrincipalConfig{ID: principal})}
}

// watcher is a NATS user that may publish and subscribe anywhere.
var watcher = natsserver.User{Name: "watcher", Password: "watcher-pw"}

// deniedAlice starts a NATS server whose user alice has the permissions of bob, so that alice's
// heartbeats are refused, and returns it with a function that connects a user of it.
func deniedAlice(t *testing.T) (*natsserver.Server, func(user string) *nats.Conn) {
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{watcher, aliceAs("bob")}})
	return ns, func(user string) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, user+"-pw"),
			nats.CustomInboxPrefix(wire.InboxPrefix(user)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// Another refusal on the worker's connection (a publish of some other part of the process outside
// its permissions) takes the place of the heartbeat's refusal as Conn.LastError: the heartbeats are
// still refused, and Healthy must go on saying so.
func TestWorkerUnhealthyWhileHeartbeatsAreDeniedAfterAnotherError(t *testing.T) {
	_, connect := deniedAlice(t)
	nc := connect("alice")
	refused := make(chan struct{}, 16) // one per refused heartbeat
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if strings.Contains(err.Error(), "kp.heartbeat.v1.alice.tx-31") {
			refused <- struct{}{}
		}
	})
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-31",
		HeartbeatInterval: time.Minute}) // no periodic heartbeat during the test: only the checked ones
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Two heartbeats go out: "starting" at once and "ready" when the (absent) components have started.
	for range 2 {
		select {
		case <-refused:
		case <-time.After(10 * time.Second):
			t.Fatal("the heartbeats were not refused")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Healthy() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a worker whose heartbeats are refused is healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := nc.Publish(wire.DefaultPrefix+".media.v1.carol.subscribe", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.LastError(); err == nil || !strings.Contains(err.Error(), "carol") {
		t.Fatalf("last error %v, want the refusal of the other publish", err)
	}
	if err := w.Healthy(); err == nil {
		t.Fatal("healthy while its heartbeats are refused, once another error came after their refusal")
	}
}
