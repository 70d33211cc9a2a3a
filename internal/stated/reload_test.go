package stated

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// A reload of the NATS users (SPEC section 9): principals that stay, changed or not, keep their
// connections whatever their credential (password, bcrypt hash, nkey) and get the new permissions,
// including on subscriptions made before; a removed principal is disconnected.
func TestReloadKeepsPrincipalsThatStay(t *testing.T) {
	ps, creds := matrixPrincipals(t)
	cfg := DefaultConfig()
	cfg.Principals = ps
	ns := natstest.Start(t, natsserver.Options{Users: natsUsers(cfg, "internal-pw")})
	conns := map[string]*nats.Conn{}
	gone := map[string]chan struct{}{}
	for _, p := range ps {
		ch := make(chan struct{}, 4)
		gone[p.ID] = ch
		nc, err := nats.Connect(ns.ClientURL(), creds[p.ID], nats.NoReconnect(),
			nats.DisconnectErrHandler(func(*nats.Conn, error) { ch <- struct{}{} }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[p.ID] = nc
	}
	// The media principal listens to every principal's media commands, and then loses the media role.
	before, err := conns["media"].SubscribeSync("kp.media.v1.*.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := conns["media"].Flush(); err != nil {
		t.Fatal(err)
	}
	next := DefaultConfig()
	next.Principals = append([]PrincipalConfig(nil), ps[:3]...)
	next.Principals[0].Admin = true  // alice: promoted
	next.Principals[1].Admin = false // ops: demoted (bcrypt)
	next.Principals[2].Media = false // media: no longer the media server (nkey)
	// mediadmin: removed
	if err := ns.Reload(natsUsers(next, "internal-pw")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone["mediadmin"]:
	case <-time.After(permTimeout):
		t.Fatal("the removed principal is still connected")
	}
	for _, p := range next.Principals {
		if err := conns[p.ID].FlushTimeout(permTimeout); err != nil {
			t.Fatalf("%s after the reload: %v", p.ID, err)
		}
		select {
		case <-gone[p.ID]:
			t.Fatalf("%s was disconnected by the reload", p.ID)
		default:
		}
	}
	probe := newPermProbe(t, ns.ClientURL(), nats.UserInfo(internalUser, "internal-pw"))
	for _, p := range next.Principals {
		checkPrincipalPermissions(t, probe, conns[p.ID], p, "bob")
	}
	// The subscription made under the media role delivers nothing more: a message published after it
	// is followed by one on media's inbox, which arrives alone.
	inbox, err := conns["media"].SubscribeSync("_INBOX.media.after")
	if err != nil {
		t.Fatal(err)
	}
	if err := conns["media"].Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"kp.media.v1.bob.subscribe", "_INBOX.media.after"} {
		if err := probe.observer.Publish(subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inbox.NextMsg(permTimeout); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := before.Pending(); n != 0 {
		t.Fatalf("a subscription the reload took away still delivers (%d pending)", n)
	}
}
