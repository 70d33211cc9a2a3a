package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natssrv "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// A malformed request is answered INVALID_ARGUMENT (SPEC section 5) however large what it got wrong:
// an invalid key of 300,000 '<' is quoted in the error's message, and escaped for JSON (\u003c) that
// message alone is 1.8 MB, over the NATS server's max_payload. Such a reply could not be sent, and the
// client would wait in vain; the message is cut instead, and nothing changes.
func TestMalformedRequestWithAHugeFieldIsAnswered(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	key := strings.Repeat("<", 300_000)
	for _, c := range []struct {
		op   wire.Op
		body string
	}{
		{wire.OpGet, `{"request_id":5,"namespace":"service/tx","key":"` + key + `"}`},
		{wire.OpPut, `{"request_id":6,"namespace":"service/tx","key":"` + key + `","schema":"keeppeek.lease.v1","document":` + lease + `}`},
		{wire.OpWatch, `{"request_id":7,"watch_id":"` + key + `","namespace":"service/tx"}`},
	} {
		msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "coordinator", c.op), []byte(c.body), timeout)
		if err != nil {
			t.Fatalf("%s with a key of 300,000 '<': %v (no reply)", c.op, err)
		}
		if int64(len(msg.Data)) > nc.MaxPayload() {
			t.Fatalf("%s: reply of %d bytes", c.op, len(msg.Data))
		}
		var r wire.Result
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatalf("%s: reply %.200s: %v", c.op, msg.Data, err)
		}
		wantErr(t, r, wire.CodeInvalidArgument)
		if !strings.HasPrefix(r.Error.Message, "invalid") {
			t.Errorf("%s: message %.100q does not start as the error's", c.op, r.Error.Message)
		}
	}
	if r := request(t, nc, "coordinator", wire.OpList, `{"namespace":"service/tx"}`); !r.OK || *r.Revision != 0 {
		t.Fatalf("after the malformed requests: %+v", r)
	}
	// The admin calls quote what they were given too: a backup id that names no backup.
	msg, err := nc.Request(wire.AdminSubject(wire.DefaultPrefix, "coordinator", wire.AdminBackup),
		[]byte(`{"request_id":8,"step":"read","backup_id":"`+key+`"}`), timeout)
	if err != nil {
		t.Fatalf("backup read of an id of 300,000 '<': %v (no reply)", err)
	}
	var a wire.AdminResult
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		t.Fatal(err)
	}
	if a.OK || a.Error == nil || a.Error.Code != wire.CodeNotFound || a.RequestID != 8 {
		t.Fatalf("backup read of an unknown id: %+v", a)
	}
}

// A backup is read in chunks that fit the NATS server's max_payload: on a server that takes messages
// of 64 KiB (enough for every default bound), a chunk of 512 KiB, base64 in a JSON reply, could never
// be sent, and statectl backup would wait for it in vain.
func TestBackupChunksFitMaxPayload(t *testing.T) {
	ns, err := natssrv.NewServer(&natssrv.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		MaxPayload: 64 << 10, NoSystemAccount: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	srv, err := server.New(st, nc, server.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(t.Context()) })
	purpose := strings.TrimSpace(strings.Repeat("plain words ", 300))
	for i := range 100 {
		request(t, nc, "coordinator", wire.OpPut, fmt.Sprintf(`{"namespace":"service/tx","key":"k%d","schema":"keeppeek.lease.v1","document":{"holder":"w1","claimed_at_ms":1,"purpose":%q}}`, i, purpose))
	}
	open := admin(t, nc, "coordinator", wire.AdminBackup, `{"step":"open"}`)
	if !open.OK || open.Size <= 2*nc.MaxPayload() {
		t.Fatalf("open %+v: want a backup larger than two messages", open)
	}
	var buf bytes.Buffer
	for reads := 0; ; reads++ {
		if reads > 1000 {
			t.Fatal("backup reads never reach EOF")
		}
		r := admin(t, nc, "coordinator", wire.AdminBackup, fmt.Sprintf(`{"step":"read","backup_id":%q,"offset":%d}`, open.BackupID, buf.Len()))
		if !r.OK || len(r.Data) == 0 && !r.EOF {
			t.Fatalf("read at %d: %+v", buf.Len(), r)
		}
		buf.Write(r.Data)
		if r.EOF {
			break
		}
	}
	sum := sha256.Sum256(buf.Bytes())
	if int64(buf.Len()) != open.Size || hex.EncodeToString(sum[:]) != open.SHA256 {
		t.Fatalf("backup of %d bytes, want %d with the announced sha256", buf.Len(), open.Size)
	}
}
