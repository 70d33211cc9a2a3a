package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

func admin(t *testing.T, nc *nats.Conn, principal string, op wire.Op, body string) wire.AdminResult {
	t.Helper()
	msg, err := nc.Request(wire.AdminSubject(wire.DefaultPrefix, principal, op), []byte(body), timeout)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	var r wire.AdminResult
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAdminBackupAndAudit(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	for i := range 50 {
		request(t, nc, "coordinator", wire.OpPut, fmt.Sprintf(`{"namespace":"service/tx","key":"k%d","schema":"keeppeek.lease.v1","document":%s}`, i, lease))
	}
	alice := env.Connect(t, "alice")
	if r := admin(t, alice, "alice", wire.AdminBackup, `{"step":"open"}`); r.OK || r.Error.Code != wire.CodePermissionDenied {
		t.Fatalf("non-admin backup %+v", r)
	}
	if r := admin(t, alice, "alice", wire.AdminAuditVerify, `{}`); r.OK || r.Error.Code != wire.CodePermissionDenied {
		t.Fatalf("non-admin audit %+v", r)
	}
	a := admin(t, nc, "coordinator", wire.AdminAuditVerify, `{"request_id":4}`)
	if !a.OK || a.RequestID != 4 || a.Audit.Records != 50 || a.Audit.Problem != "" {
		t.Fatalf("audit %+v", a)
	}
	open := admin(t, nc, "coordinator", wire.AdminBackup, `{"step":"open"}`)
	if !open.OK || open.Size == 0 || open.BackupID == "" {
		t.Fatalf("open %+v", open)
	}
	var buf bytes.Buffer
	for {
		r := admin(t, nc, "coordinator", wire.AdminBackup, fmt.Sprintf(`{"step":"read","backup_id":%q,"offset":%d}`, open.BackupID, buf.Len()))
		if !r.OK {
			t.Fatalf("read %+v", r)
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
	if r := admin(t, nc, "coordinator", wire.AdminBackup, fmt.Sprintf(`{"step":"close","backup_id":%q}`, open.BackupID)); !r.OK {
		t.Fatalf("close %+v", r)
	}
	if r := admin(t, nc, "coordinator", wire.AdminBackup, fmt.Sprintf(`{"step":"read","backup_id":%q}`, open.BackupID)); r.OK || r.Error.Code != wire.CodeNotFound {
		t.Fatalf("read after close %+v", r)
	}
	// The backup restores into a store with the same entries.
	path := filepath.Join(t.TempDir(), "restored.db")
	if _, err := store.Restore(path, &buf, store.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(path, store.DefaultOptions())
	if err != nil || st.Unavailable() != nil {
		t.Fatalf("open restored: %v %v", err, st.Unavailable())
	}
	defer st.Close()
	l, err := st.List(t.Context(), policy.Principal{ID: "x", Admin: true}, wire.ListRequest{Namespace: "service/tx", Limit: 256})
	if err != nil || len(l.Entries) != 50 || l.Revision != 50 {
		t.Fatalf("restored list %d entries rev %d: %v", len(l.Entries), l.Revision, err)
	}
}

// An unavailable store (its file did not validate) answers the admin calls UNAVAILABLE, as every other
// call, not STORAGE: nothing was refused by a disk. Check 0 of SPEC section 5 comes first for admin
// calls too: a principal that is not an admin is told UNAVAILABLE, as its get is, not PERMISSION_DENIED.
func TestAdminCallsOfAnUnavailableStore(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state-store.db"), bytes.Repeat([]byte("garbage!"), 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{DataDir: dir})
	if env.Store.Unavailable() == nil {
		t.Fatal("a garbage database file opened")
	}
	nc := env.Connect(t, "coordinator")
	alice := env.Connect(t, "alice")
	if r := request(t, alice, "alice", wire.OpGet, `{"request_id":1,"namespace":"service/x","key":"k"}`); r.Error == nil || r.Error.Code != wire.CodeUnavailable {
		t.Fatalf("get of an unavailable store by alice: %+v", r)
	}
	for _, c := range []struct {
		op   wire.Op
		body string
	}{{wire.AdminAuditVerify, `{"request_id":5}`}, {wire.AdminBackup, `{"request_id":6,"step":"open"}`}} {
		if r := admin(t, nc, "coordinator", c.op, c.body); r.OK || r.Error == nil || r.Error.Code != wire.CodeUnavailable {
			t.Errorf("%s of an unavailable store: %+v, want UNAVAILABLE", c.op, r)
		}
		if r := admin(t, alice, "alice", c.op, c.body); r.OK || r.Error == nil || r.Error.Code != wire.CodeUnavailable {
			t.Errorf("%s of an unavailable store by a principal that is not an admin: %+v, want UNAVAILABLE", c.op, r)
		}
	}
}
