package server_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// stated's user on an external NATS server must also be allowed to publish where the server answers:
// replies into the requesters' inboxes (_INBOX.>) and watch updates on the watch subjects. A user that
// may subscribe to everything stated serves but not publish there (as an operator who gave it only the
// subjects under the prefix and $SRV.> would have it) leaves the server mute: NATS refuses every reply
// and update asynchronously, and every request went unanswered while the log said "stated ready".
// Start fails instead, naming the refused subject; allowed to publish on the principals' inboxes, the
// watch subjects and its look for another server of the service ($SRV.INFO.keeppeek-state), and
// nowhere else, it starts.
func TestStartFailsWhenNATSRefusesToCarryItsReplies(t *testing.T) {
	for name, c := range map[string]struct {
		allow []string
		deny  []string
		want  string
	}{
		"only the prefix and $SRV":           {allow: []string{"kp.>", "$SRV.>"}, want: `Publish to "_INBOX.`},
		"just what it publishes (a control)": {allow: []string{"_INBOX.*.>", "kp.watch.v1.>", "$SRV.INFO.keeppeek-state"}},
		"no look for another server":         {allow: []string{"_INBOX.*.>", "kp.watch.v1.>"}, want: `Publish to "$SRV.INFO.keeppeek-state"`},
		"every inbox, no watch":              {allow: []string{"_INBOX.*.>", "$SRV.>", "kp.state.v1.>", "kp.admin.v1.>", "kp.heartbeat.v1.>"}, want: `Publish to "kp.watch.v1.`},
		"no watch updates":                   {allow: []string{">"}, deny: []string{"kp.watch.v1.>"}, want: `Publish to "kp.watch.v1.`},
	} {
		t.Run(name, func(t *testing.T) {
			perms := &server.Permissions{Publish: &server.SubjectPermission{Allow: c.allow, Deny: c.deny},
				Subscribe: &server.SubjectPermission{Allow: []string{">"}}}
			err := startAs(t, perms)
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
