package server_test

import (
	"testing"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/stated"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// A principal may publish only under its own subjects (SPEC section 9), but the reply subject of a
// request is its own choice, and the server publishes replies as itself. A reply subject in another
// principal's space (its watch subjects, its inbox), in the server's own (heartbeats, media commands,
// capabilities, requests) or anywhere else but an inbox would let a principal make the server publish
// there for it: into bob's watch, which then ends on a message that is not an update, or on another
// application's subjects. Such a request is not served.
func TestReplySubjectOutsideTheRequestersSpaceIsRefused(t *testing.T) {
	users := []natsserver.User{}
	for _, id := range []string{"alice", "bob"} {
		users = append(users, natsserver.User{Name: id, Password: id + "-pw",
			Permissions: stated.Permissions(wire.DefaultPrefix, stated.PrincipalConfig{ID: id})})
	}
	users = append(users, natsserver.User{Name: "observer", Password: "observer-pw"}) // may subscribe anywhere
	env := testenv.Start(t, testenv.Options{NATSUsers: users})
	alice := env.Connect(t, "alice")
	observer := env.Connect(t, "observer")
	var spoofed []string
	for _, subject := range []string{
		wire.WatchSubject(wire.DefaultPrefix, "bob", "w"), // bob's watch
		wire.InboxPrefix("bob") + ".abc.1",                // bob's inbox
		wire.CapsChangedSubject(wire.DefaultPrefix),
		"$SYS.REQ.SERVER.PING",
		"orders.created", // another application's
	} {
		sub, err := observer.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		if err := observer.Flush(); err != nil {
			t.Fatal(err)
		}
		// Acks of one principal are handled in order: once the second is answered, the first was.
		if err := alice.PublishRequest(wire.StateSubject(wire.DefaultPrefix, "alice", wire.OpAck), subject,
			[]byte(`{"request_id":1,"watch_id":"w","applied_sequence":1}`)); err != nil {
			t.Fatal(err)
		}
		r := request(t, alice, "alice", wire.OpAck, `{"request_id":2,"watch_id":"w","applied_sequence":1}`)
		wantErr(t, r, wire.CodeNotFound)
		// Whatever the server sent the observer before that reply reached alice is in its buffer once a ping
		// round trip on his connection is done.
		if err := observer.Flush(); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := sub.Pending(); n > 0 {
			m, _ := sub.NextMsg(0)
			spoofed = append(spoofed, subject+": "+string(msgData(m)))
		}
		_ = sub.Unsubscribe()
	}
	for _, s := range spoofed {
		t.Errorf("alice made the server publish on %s", s)
	}
	// A reply to her own inbox is answered as ever (the request helper uses it).
	if r := request(t, alice, "alice", wire.OpInfo, `{"request_id":3}`); !r.OK || r.RequestID != 3 {
		t.Fatalf("info %+v", r)
	}
}
