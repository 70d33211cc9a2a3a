package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// STATECTL_PASSWORD is the password of STATECTL_USER (or of the default user). A --user given on the
// command line is another identity: the environment's password is not sent for it (etcdctl and the
// nats CLI never pair one user's secret with another user), and the connection error says why.
func TestEnvironmentPasswordGoesOnlyWithTheEnvironmentUser(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{
		{Name: "open"}, // a user without a password: sending one fails authorization
		{Name: "alice", Password: "alice-pw"},
	}})
	url := ns.ClientURL()
	statectl := func(env map[string]string, args ...string) (int, string) {
		for k, v := range map[string]string{"STATECTL_USER": "", "STATECTL_PASSWORD": ""} {
			t.Setenv(k, v)
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out, errb strings.Builder
		code := run(ctx, append([]string{"--nats-url", url, "--timeout", "2s"}, args...), strings.NewReader(""), &out, &errb)
		return code, errb.String()
	}
	aliceEnv := map[string]string{"STATECTL_USER": "alice", "STATECTL_PASSWORD": "alice-pw"}
	// The environment user with its password connects (no stated answers: UNAVAILABLE, not CONNECTION).
	if code, stderr := statectl(aliceEnv, "info"); code == exitConnection {
		t.Fatalf("alice from the environment: exit %d, %s", code, stderr)
	}
	// So does the same user named on the command line.
	if code, stderr := statectl(aliceEnv, "--user", "alice", "info"); code == exitConnection {
		t.Fatalf("--user alice with alice's environment password: exit %d, %s", code, stderr)
	}
	// Another user on the command line does not get alice's password.
	if code, stderr := statectl(aliceEnv, "--user", "open", "info"); code == exitConnection {
		t.Fatalf("--user open was sent STATECTL_PASSWORD, which belongs to STATECTL_USER=alice: exit %d, %s", code, stderr)
	}
	// A password for the default user is not sent for --user alice either; the error says so.
	code, stderr := statectl(map[string]string{"STATECTL_PASSWORD": "alice-pw"}, "--user", "alice", "info")
	if code != exitConnection || !strings.Contains(stderr, "statectl: CONNECTION: ") || !strings.Contains(stderr, "STATECTL_PASSWORD") {
		t.Fatalf("--user alice with a password for the default user: exit %d, %s", code, stderr)
	}
	// --password on the command line always applies.
	if code, stderr := statectl(aliceEnv, "--user", "open", "--password", "", "info"); code == exitConnection {
		t.Fatalf("--password '': exit %d, %s", code, stderr)
	}
	// A server without authorization (stated's dev mode) takes the user name without a password.
	open := natstest.Start(t, natsserver.Options{})
	url = open.ClientURL()
	if code, stderr := statectl(nil, "info"); code == exitConnection {
		t.Fatalf("dev on a server without authorization: exit %d, %s", code, stderr)
	}
}
