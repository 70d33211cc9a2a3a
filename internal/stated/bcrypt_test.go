package stated

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// nats-server takes a password that starts like a bcrypt hash ($2a$10$...) as one, and compares what
// a client sends against it as a hash. A truncated hash (a paste cut short) or a plain password of that
// shape can therefore never authenticate: its principal would be locked out with no word at start or
// at SIGHUP. Such a password is refused by name; a whole hash, and a plain password that only starts
// with "$", are taken.
func TestLoadConfigRefusesAPasswordNATSWouldTakeForABrokenBcryptHash(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	broken := string(hash[:40]) // cut short
	// What nats-server does with it: nobody logs in, not even with the configured text itself.
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{{Name: "alice", Password: broken}}})
	if nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("alice", broken), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("NATS took the truncated hash as a plain password: nothing to refuse")
	}
	principal := func(pw string) string {
		return "[[principals]]\nid = \"alice\"\npassword = '" + pw + "'\n"
	}
	for _, pw := range []string{broken, string(hash[:59]), "$2a$10$", "$2y$99$abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabc"} {
		_, err := LoadConfig(writeConfig(t, principal(pw)))
		if err == nil || !strings.Contains(err.Error(), `"alice"`) || !strings.Contains(err.Error(), "bcrypt") {
			t.Errorf("password %q: %v, want it refused as a broken bcrypt hash, naming the principal", pw, err)
		}
	}
	for _, pw := range []string{string(hash), "$ecret", "$2", "$2a", "plain"} {
		if _, err := LoadConfig(writeConfig(t, principal(pw))); err != nil {
			t.Errorf("password %q refused: %v", pw, err)
		}
	}
}
