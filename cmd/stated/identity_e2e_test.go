package main_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2EIdentityBcryptAndNkey: a principal may be configured with a bcrypt hash of its password or
// with an nkey; either way the subject token is its identity and its permissions are its own.
func TestE2EIdentityBcryptAndNkey(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	s := e2e.NewStated(t, e2e.Config{Principals: []e2e.Principal{
		{ID: "hashed", Password: string(hash)},
		{ID: "keyed", Admin: true, Nkey: pub},
	}})
	s.Start()

	hashed, err := nats.Connect(s.URL(), nats.UserInfo("hashed", "s3cret"), nats.CustomInboxPrefix(wire.InboxPrefix("hashed")))
	if err != nil {
		t.Fatalf("bcrypt principal: %v", err)
	}
	t.Cleanup(hashed.Close)
	if _, err := nats.Connect(s.URL(), nats.UserInfo("hashed", string(hash))); err == nil {
		t.Fatalf("the hash itself was accepted as the password")
	}
	r := request(t, hashed, "hashed", wire.OpPut, `{"namespace":"user/hashed","key":"prefs","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`)
	if !r.OK || r.Entry.Owner != "hashed" {
		t.Fatalf("bcrypt principal's put: %+v", r)
	}

	keyed, err := nats.Connect(s.URL(), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(wire.InboxPrefix("keyed")))
	if err != nil {
		t.Fatalf("nkey principal: %v", err)
	}
	t.Cleanup(keyed.Close)
	r = request(t, keyed, "keyed", wire.OpGet, `{"namespace":"user/hashed","key":"prefs"}`)
	if !r.OK || r.Entry.Owner != "hashed" {
		t.Fatalf("nkey admin reading user/hashed: %+v", r)
	}
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	if _, err := nats.Connect(s.URL(), nats.Nkey(otherPub, other.Sign)); err == nil {
		t.Fatalf("an unknown nkey connected")
	}
}
