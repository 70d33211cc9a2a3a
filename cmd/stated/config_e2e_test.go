package main_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2ESettingsNamespace: a namespace declared in the configuration keeps its entries in the
// configuration file, written before the reply, rejects TTLs and survives a restart.
func TestE2ESettingsNamespace(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals, Extra: "[state_store.settings.\"service/mqtt-bridge\"]\n"})
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	put := `{"namespace":"service/mqtt-bridge","key":"bridge/config","schema":"keeppeek.media-intent.v1","document":{"role":"subscribe","desired":true,"source_id":"front-door","media_kind":"video"}%s}`
	if r := request(t, coord, "coordinator", wire.OpPut, strings.Replace(put, "%s", `,"ttl_ms":5000`, 1)); r.OK || r.Error.Code != wire.CodeTTLInvalid {
		t.Fatalf("settings put with a TTL: %+v", r)
	}
	r := request(t, coord, "coordinator", wire.OpPut, strings.Replace(put, "%s", "", 1))
	if !r.OK || r.Entry.Revision != 1 {
		t.Fatalf("settings put: %+v", r)
	}
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil || !strings.Contains(string(raw), "bridge/config") || !strings.Contains(string(raw), "coordinator") {
		t.Fatalf("the configuration file after the put (%v):\n%s", err, raw)
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	s.Start()
	coord, _ = conn(t, s, "coordinator")
	got := request(t, coord, "coordinator", wire.OpGet, `{"namespace":"service/mqtt-bridge","key":"bridge/config"}`)
	if !got.OK || got.Entry.Revision != 1 || got.Entry.Owner != "coordinator" {
		t.Fatalf("settings entry after a restart: %+v", got)
	}
}

// TestE2EExternalNATS: with [nats] url, stated serves through an external NATS server instead of
// starting its own.
func TestE2EExternalNATS(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	s.Start()
	nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(wire.InboxPrefix("dev")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := request(t, nc, "dev", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`)
	if !r.OK || r.Entry.Owner != "dev" {
		t.Fatalf("put through the external server: %+v\n%s", r, s.Logs())
	}
	if strings.Contains(s.Logs(), "nats=nats://127.0.0.1:"+strconv.Itoa(s.NATSPort)) {
		t.Fatalf("stated started an embedded server:\n%s", s.Logs())
	}
}
