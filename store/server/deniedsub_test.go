package server_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	stateserver "github.com/keeppeek/coordination/store/server"
)

// On an external NATS server the operator gives stated's user its permissions. One that may not
// subscribe to a subject the server serves (a request endpoint, heartbeats, service discovery) would
// leave the server deaf to it: NATS refuses the subscription asynchronously, and nothing would say so
// while every request went unanswered. Start fails instead, naming the subject; with every subject
// allowed it starts.
func TestStartFailsWhenNATSRefusesASubscription(t *testing.T) {
	for name, deny := range map[string][]string{
		"heartbeats":          {"kp.heartbeat.v1.*.*", `"kp.heartbeat.v1.*.*"`},
		"put endpoint":        {"kp.state.v1.*.put", `"kp.state.v1.*.put"`},
		"service discovery":   {"$SRV.>", `"$SRV.`},
		"nothing (a control)": nil,
	} {
		t.Run(name, func(t *testing.T) {
			var denied []string
			if deny != nil {
				denied = deny[:1]
			}
			perms := &server.Permissions{Subscribe: &server.SubjectPermission{Allow: []string{">"}, Deny: denied}}
			err := startAs(t, perms)
			if deny == nil {
				if err != nil {
					t.Fatalf("Start with every subscription allowed: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "Subscription to "+deny[1]) {
				t.Fatalf("Start with %s denied: %v, want an error naming the refused subscription", deny[0], err)
			}
		})
	}
}

// startAs starts a state server whose NATS user on a fresh NATS server has perms, and returns what
// Start returned. Everything is stopped at the test's end.
func startAs(t *testing.T, perms *server.Permissions) error {
	t.Helper()
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{{Name: "stated", Password: "pw", Permissions: perms}}})
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("stated", "pw"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // Start is to report them
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	_, err = startOn(t, nc, stateserver.Options{})
	return err
}

// startOn makes a state server with opts over nc and a store of its own, and returns it with what
// Start returned. The server and the store are stopped at the test's end.
func startOn(t *testing.T, nc *nats.Conn, opts stateserver.Options) (*stateserver.Server, error) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	srv, err := stateserver.New(st, nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Start()
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv, err
}
