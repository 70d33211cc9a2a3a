package server_test

import (
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
			ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{{Name: "stated", Password: "pw", Permissions: perms}}})
			nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("stated", "pw"),
				nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // Start is to report them
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			srv, err := stateserver.New(st, nc, stateserver.Options{})
			if err != nil {
				t.Fatal(err)
			}
			err = srv.Start()
			defer func() { _ = srv.Stop(t.Context()) }()
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
