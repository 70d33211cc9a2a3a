package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/stated"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// A worker whose principal is removed (stated reloaded without it) is disconnected, and nats.go closes
// the connection for good after NATS refused its login twice. Run stops and returns an error: it must
// say why the connection closed (the refusal), not only that it did: "connection closed" alone sends
// the operator looking for a network fault while the principal is gone from the configuration.
func TestWorkerRunSaysWhyItsConnectionClosed(t *testing.T) {
	user := func(id string) natsserver.User {
		return natsserver.User{Name: id, Password: id + "-pw",
			Permissions: stated.Permissions(wire.DefaultPrefix, stated.PrincipalConfig{ID: id})}
	}
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{user("alice"), user("bob")}})
	nc, err := client.Connect(ns.ClientURL(), "alice", nats.UserInfo("alice", "alice-pw"), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-1", HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if err := ns.Reload([]natsserver.User{user("bob")}); err != nil { // alice is removed
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Run = %v, want an error with nats.ErrConnectionClosed", err)
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("Run = %v; it does not say why the connection closed (the connection's last error: %v)", err, nc.LastError())
		}
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("Run did not return within 10 s of its login being refused (returned %v after cancel; connection %v, %v)",
			<-done, nc.Status(), nc.LastError())
	}
}
