package main

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// A server whose list pages do not advance (it names the same next_after_key again) would have `ls`
// ask for the same page for ever: it fails instead, exit 1, naming the key it could not get past.
func TestLsFailsOnAListThatDoesNotAdvance(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var pages atomic.Int64
	if _, err := nc.Subscribe(wire.StateSubject(wire.DefaultPrefix, defaultUser, wire.OpList), func(m *nats.Msg) {
		var req wire.ListRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("list request %s: %v", m.Data, err)
			return
		}
		pages.Add(1)
		reply, _ := json.Marshal(map[string]any{"request_id": req.RequestID, "ok": true, "revision": 7,
			"entries": []any{}, "next_after_key": "a"})
		_ = m.Respond(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runStatectl(t, "ls", "service/x", "--nats-url", ns.ClientURL())
	if code != exitFailure || !strings.Contains(stderr, `did not advance past "a"`) || stdout != "" {
		t.Fatalf("ls against pages that do not advance: exit %d after %d pages\nstdout: %q\nstderr: %q", code, pages.Load(), stdout, stderr)
	}
}
