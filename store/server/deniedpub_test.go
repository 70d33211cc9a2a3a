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

// stated's user on an external NATS server must also be allowed to publish where the server answers:
// replies into the requesters' inboxes (_INBOX.>) and watch updates on the watch subjects. A user that
// may subscribe to everything stated serves but not publish there (as an operator who gave it only the
// subjects under the prefix and $SRV.> would have it) leaves the server mute: NATS refuses every reply
// and update asynchronously, and every request went unanswered while the log said "stated ready".
// Start fails instead, naming the refused subject; allowed to publish on the principals' inboxes and
// the watch subjects, and nowhere else, it starts.
func TestStartFailsWhenNATSRefusesToCarryItsReplies(t *testing.T) {
	for name, c := range map[string]struct {
		allow []string
		deny  []string
		want  string
	}{
		"only the prefix and $SRV":           {allow: []string{"kp.>", "$SRV.>"}, want: `Publish to "_INBOX.`},
		"just what it publishes (a control)": {allow: []string{"_INBOX.*.>", "kp.watch.v1.>"}},
		"every inbox, no watch":              {allow: []string{"_INBOX.*.>", "$SRV.>", "kp.state.v1.>", "kp.admin.v1.>", "kp.heartbeat.v1.>"}, want: `Publish to "kp.watch.v1.`},
		"no watch updates":                   {allow: []string{">"}, deny: []string{"kp.watch.v1.>"}, want: `Publish to "kp.watch.v1.`},
	} {
		t.Run(name, func(t *testing.T) {
			perms := &server.Permissions{Publish: &server.SubjectPermission{Allow: c.allow, Deny: c.deny},
				Subscribe: &server.SubjectPermission{Allow: []string{">"}}}
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
			if c.want == "" {
				if err != nil {
					t.Fatalf("Start allowed to publish where it answers: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Start: %v, want an error naming the refused publish (%s)", err, c.want)
			}
		})
	}
}
