package sim_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// TestAnswersOnlyIntoInboxes: a request whose reply subject is no inbox (caps.v1.changed, say) gets
// no answer and, for a command, is not carried out. The media principal may publish announcements
// on caps.v1.changed, and NATS cannot tell an answer there from one: an answer to a request naming
// it would reach every tracker, which would each fetch the whole capabilities again.
func TestAnswersOnlyIntoInboxes(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door")})
	const prefix = capabilities.DefaultPrefix
	changed := capabilities.ChangedSubject(prefix)
	announced := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(changed, announced)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	before := len(s.Commands())
	session, _, _ := s.SessionID("front-door")
	body := `{"session_id":"` + session + `","stream_id":"video","variant_id":"cv-640","output_profile":"cv-h264-360p","recording_mode":"inherit"}`
	for _, m := range []*nats.Msg{
		{Subject: capabilities.GetSubject(prefix), Reply: changed},
		{Subject: capabilities.CommandSubject(prefix, "alice", capabilities.CommandStartPublication), Reply: changed, Data: []byte(body)},
	} {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Each subject is served in arrival order: once a later request of each is answered, the
	// earlier ones were handled.
	fetch(t, nc, prefix)
	request(t, nc, prefix, "bob", capabilities.CommandStartPublication, `{}`)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-announced:
		t.Fatalf("an answer reached %s: %s", changed, m.Data)
	default:
	}
	for _, r := range s.Commands()[before:] {
		if r.Principal == "alice" {
			t.Fatalf("a command whose answer nobody could read was carried out: %+v", r)
		}
	}
}
