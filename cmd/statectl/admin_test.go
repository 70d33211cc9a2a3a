package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// newerAdminServer answers the dev principal's audit_verify requests on the NATS server at url as a
// newer stated might: the reply, and the report in it, carry a field this statectl does not know.
func newerAdminServer(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	_, err = nc.Subscribe(wire.AdminSubject(wire.DefaultPrefix, defaultUser, wire.AdminAuditVerify), func(m *nats.Msg) {
		var req wire.AuditVerifyRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("audit_verify request %s: %v", m.Data, err)
			return
		}
		reply, _ := json.Marshal(map[string]any{
			"request_id": req.RequestID, "ok": true, "served_by": "stated-next",
			"audit": map[string]any{"records": 3, "head_seq": 3, "head_hash": "ab", "checkpoint_seq": 0,
				"text": "OK: 3 records, hash chain intact (head seq 3, hash ab)", "checked_ms": 4},
		})
		_ = m.Respond(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Replies are read tolerantly, as store/client reads the state operations' (a newer server may add
// fields); only requests are decoded strictly. An admin reply with a field statectl does not know is
// still the answer it carries, not a "malformed request".
func TestAdminReplyWithANewerFieldIsRead(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	newerAdminServer(t, ns.ClientURL())
	code, stdout, stderr := runStatectl(t, "audit", "verify", "--nats-url", ns.ClientURL())
	if code != exitOK || strings.TrimSpace(stdout) != "OK: 3 records, hash chain intact (head seq 3, hash ab)" || stderr != "" {
		t.Fatalf("audit verify against a newer server: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
}
