package stated

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// The media principal answers requests that any principal sends, to the reply subject the requester
// chose. With NATS's allow_responses that could be any subject: alice, asking the media server on her
// own subjects, could have its answer published on bob's watch subject (or any other principal's),
// which section 9 lets no one but stated publish on. The media principal may now answer only into
// inboxes (_INBOX.<principal>.>, where every requester's reply subject is), as stated does, and on
// its own announcement subject (caps.v1.changed), which the media server must refuse as a reply
// subject itself (see Permissions).
func TestMediaPrincipalAnswersOnlyIntoInboxes(t *testing.T) {
	ps, creds := matrixPrincipals(t)
	cfg := DefaultConfig()
	cfg.Principals = append(ps, PrincipalConfig{ID: "bob", Password: "bob-pw"})
	ns := natstest.Start(t, natsserver.Options{Users: natsUsers(cfg, "internal-pw")})
	connect := func(o nats.Option) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	media, alice, bob := connect(creds["media"]), connect(creds["alice"]), connect(nats.UserInfo("bob", "bob-pw"))
	observer := connect(nats.UserInfo(internalUser, "internal-pw"))
	for _, request := range []string{"kp.media.v1.alice.subscribe", "kp.caps.v1.get"} {
		reqs, err := media.SubscribeSync(request)
		if err != nil {
			t.Fatal(err)
		}
		if err := media.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			reply string
			sub   *nats.Conn // who may read the reply subject
			want  bool
		}{
			{"kp.watch.v1.bob.intents", bob, false},
			{"_INBOX.alice.r1", alice, true},
			{"_INBOX.bob.r2", bob, true},
		} {
			got, err := c.sub.SubscribeSync(c.reply)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.sub.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := alice.PublishRequest(request, c.reply, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			m, err := reqs.NextMsg(permTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Respond([]byte("answer")); err != nil {
				t.Fatal(err)
			}
			if err := media.Flush(); err != nil {
				t.Fatal(err)
			}
			// A marker from the observer follows on the same subject: the answer, if it passed, is first.
			if err := observer.Publish(c.reply, []byte("marker")); err != nil {
				t.Fatal(err)
			}
			first, err := got.NextMsg(permTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if passed := string(first.Data) == "answer"; passed != c.want {
				t.Errorf("a request on %s by alice with reply %s: the media server's answer passed %v, want %v",
					request, c.reply, passed, c.want)
			}
			_ = got.Unsubscribe()
		}
		_ = reqs.Unsubscribe()
	}
}
