package stated

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// A subject prefix under _INBOX puts the service's subjects inside the principals' inboxes, which
// section 9 lets each principal read: the principal named "watch" would read every watch update. One
// under $ is NATS's own (and $SRV.> is open to admins for publishing). Both are refused; the hole is
// shown on a real server first.
func TestSubjectPrefixOutsideInboxesAndDollarSubjects(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SubjectPrefix = "_INBOX"
	cfg.Principals = []PrincipalConfig{{ID: "watch", Password: "w"}, {ID: "bob", Password: "b"}}
	ns := natstest.Start(t, natsserver.Options{Users: natsUsers(cfg, "internal-pw")})
	probe := newPermProbe(t, ns.ClientURL(), nats.UserInfo(internalUser, "internal-pw"))
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("watch", "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !probe.canSubscribe(nc, "_INBOX.watch.v1.bob.w", "_INBOX.watch.v1.bob.w", "_INBOX.watch.marker") {
		t.Fatal("under prefix _INBOX, the principal \"watch\" cannot read bob's watch subject: the probe is wrong")
	}

	for _, prefix := range []string{"_INBOX", "_INBOX.watch", "$SRV", "$SRV.kp", "$SYS", "$JS.kp"} {
		_, err := LoadConfig(writeConfig(t, "subject_prefix = \""+prefix+"\"\n"))
		if err == nil || !strings.Contains(err.Error(), "subject_prefix") {
			t.Errorf("subject_prefix %q: %v, want refused", prefix, err)
		}
	}
	for _, prefix := range []string{"kp", "acme.kp", "kp._INBOX", "inbox", "_inbox", "kp.$x"} {
		if _, err := LoadConfig(writeConfig(t, "subject_prefix = \""+prefix+"\"\n")); err != nil {
			t.Errorf("subject_prefix %q: %v", prefix, err)
		}
	}
}

// watch_sweep_ms is a count of milliseconds made a time.Duration: a value past one day is refused
// rather than wrapped around (18,446,744,073,710 ms would wrap to a sweep every half millisecond, and
// larger ones to a negative interval that stops stated at start).
func TestWatchSweepMsRange(t *testing.T) {
	for _, v := range []string{"9", "-1", "86400001", "18446744073710", "9223372036854775807"} {
		if _, err := LoadConfig(writeConfig(t, "[nats]\nwatch_sweep_ms = "+v+"\n")); err == nil ||
			!strings.Contains(err.Error(), "watch_sweep_ms") {
			t.Errorf("watch_sweep_ms = %s: %v, want refused", v, err)
		}
	}
	for _, v := range []string{"0", "10", "86400000"} {
		if _, err := LoadConfig(writeConfig(t, "[nats]\nwatch_sweep_ms = "+v+"\n")); err != nil {
			t.Errorf("watch_sweep_ms = %s: %v", v, err)
		}
	}
}
