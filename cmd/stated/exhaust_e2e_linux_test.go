package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// exitBound bounds the wait for a stated that must exit by itself: far above what it takes.
const exitBound = 30 * time.Second

// TestE2EStoreStoppedByAnUncertainCommitExits: a commit whose outcome is unknown stops the store
// (every call answers UNAVAILABLE until a restart reloads the database). stated used to go on running
// with it, /healthz 200, serving nothing for ever: a supervisor never restarted it, and raising the
// limit that caused it changed nothing. It says why and exits non-zero, and the restart serves again.
//
// The uncertain commit is made with RLIMIT_FSIZE, which any user may lower for a process of its own:
// a delete in a settings-backed namespace rewrites the configuration file, smaller, under the limit;
// the database commit then fails (its pages lie beyond the limit), and putting the file back as it was
// (as large as before, over the limit) fails too, so the file holds a delete the database does not.
func TestE2EStoreStoppedByAnUncertainCommitExits(t *testing.T) {
	const ns = "service/mqtt-bridge"
	s := e2e.NewStated(t, e2e.Config{Principals: principals, Extra: "[state_store.settings.\"" + ns + "\"]\n"})
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	big := `{"holder":"w1","claimed_at_ms":1,"purpose":"` + strings.Repeat("p", 800) + `"}`
	if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"`+ns+`","key":"big","schema":"keeppeek.lease.v1","document":`+big+`}`); !r.OK {
		t.Fatalf("settings put: %+v", r)
	}
	if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"acked","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
		t.Fatalf("put: %+v", r)
	}
	fi, err := os.Stat(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.Stat(s.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	limit := uint64(fi.Size() - 1) // the file without "big" fits; the file as it is does not
	if int64(limit) >= db.Size() {
		t.Fatalf("configuration file %d bytes, database %d: the limit would not stop the database commit", fi.Size(), db.Size())
	}
	old := s.SetSoftLimit(unix.RLIMIT_FSIZE, limit)

	r := request(t, coord, "coordinator", wire.OpDelete, `{"namespace":"`+ns+`","key":"big"}`)
	if r.OK || r.Error == nil || r.Error.Code != wire.CodeUnavailable {
		t.Fatalf("delete whose commit is uncertain: %+v, want UNAVAILABLE", r)
	}
	s.SetSoftLimit(unix.RLIMIT_FSIZE, old) // the pressure ends: a running store would stay stopped
	code, exited := s.WaitExit(exitBound)
	if !exited {
		t.Fatalf("stated still runs %v after its store stopped serving (a supervisor never restarts it)\n%s", exitBound, s.Logs())
	}
	if code == 0 {
		t.Fatalf("stated exited 0 after its store stopped serving: a supervisor that restarts on failure would not\n%s", s.Logs())
	}
	if !strings.Contains(s.Logs(), "restart") || !strings.Contains(s.Logs(), "file too large") {
		t.Fatalf("stated's log does not say why it exits and that a restart is needed:\n%s", s.Logs())
	}

	s.Start()
	coord2, _ := conn(t, s, "coordinator")
	if r := request(t, coord2, "coordinator", wire.OpGet, `{"namespace":"service/tx","key":"acked"}`); !r.OK {
		t.Fatalf("an acknowledged write after the restart: %+v", r)
	}
	if r := request(t, coord2, "coordinator", wire.OpPut, `{"namespace":"`+ns+`","key":"again","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
		t.Fatalf("a settings write after the restart: %+v", r)
	}
}

// backupOpen asks stated for a backup (admin op, step open) and returns its answer.
func backupOpen(t *testing.T, nc *nats.Conn) wire.AdminResult {
	t.Helper()
	msg, err := nc.Request(wire.AdminSubject(wire.DefaultPrefix, "coordinator", wire.AdminBackup), []byte(`{"request_id":1,"step":"open"}`), timeout)
	if err != nil {
		t.Fatalf("backup open: %v", err)
	}
	var r wire.AdminResult
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("backup open reply %s: %v", msg.Data, err)
	}
	return r
}

// TestE2EOutOfFileDescriptors: stated's open-file limit is lowered (RLIMIT_NOFILE, which any user may
// lower for a process of its own) until more clients connect than the embedded NATS server can
// accept. The clients it cannot accept time out; the ones connected are served, their writes
// acknowledged; a backup, which opens files, fails with STORAGE naming the cause, never a silent
// success. stated used to say nothing of the clients it could not accept (the embedded server's
// accept errors were dropped): its log names them now. Once the clients leave, with the limit still
// as low, stated accepts clients again and takes backups by itself, and every acknowledged write is
// there.
func TestE2EOutOfFileDescriptors(t *testing.T) {
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	const room = 6
	s.SetSoftLimit(unix.RLIMIT_NOFILE, uint64(s.OpenFiles()+room))

	var clients []*nats.Conn
	t.Cleanup(func() {
		for _, nc := range clients {
			nc.Close()
		}
	})
	var refused error
	for range room + 10 {
		nc, err := nats.Connect(s.URL(), nats.UserInfo("alice", password("alice")), nats.CustomInboxPrefix(wire.InboxPrefix("alice")),
			nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			refused = err
			break
		}
		clients = append(clients, nc)
	}
	if refused == nil {
		t.Fatalf("%d clients connected to a stated with room for %d more open files", len(clients), room)
	}
	t.Logf("%d clients connected, the next refused: %v", len(clients), refused)
	waitForLog(t, s.Logs, "too many open files")
	if !strings.Contains(s.Logs(), "NATS") {
		t.Fatalf("stated's log does not say that NATS clients cannot connect:\n%s", s.Logs())
	}

	// Connected clients are served; what fails for want of a file says so.
	var acked []string
	for i, nc := range append([]*nats.Conn{coord}, clients...) {
		principal, ns := "alice", "user/alice"
		if i == 0 {
			principal, ns = "coordinator", "service/tx"
		}
		key := fmt.Sprintf("k%d", i)
		r := request(t, nc, principal, wire.OpPut, `{"namespace":"`+ns+`","key":"`+key+`","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`)
		if ns == "user/alice" {
			r = request(t, nc, principal, wire.OpPut, `{"namespace":"`+ns+`","key":"`+key+`","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`)
		}
		if !r.OK {
			t.Fatalf("put by a connected client while stated is out of files: %+v", r)
		}
		acked = append(acked, ns+" "+key)
	}
	if r := backupOpen(t, coord); r.OK || r.Error == nil || r.Error.Code != wire.CodeStorage || !strings.Contains(r.Error.Message, "too many open files") {
		t.Fatalf("backup while stated is out of files: %+v, want STORAGE naming the cause", r)
	}

	// The clients leave; the limit stays. stated accepts clients and takes backups again by itself.
	for _, nc := range clients {
		nc.Close()
	}
	clients = nil
	var back *nats.Conn
	deadline := time.Now().Add(timeout)
	for back == nil {
		nc, err := nats.Connect(s.URL(), nats.UserInfo("alice", password("alice")), nats.CustomInboxPrefix(wire.InboxPrefix("alice")),
			nats.Timeout(time.Second), nats.NoReconnect())
		if err == nil {
			back = nc
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no client connects %v after the others left: %v\n%s", timeout, err, s.Logs())
		}
	}
	defer back.Close()
	if r := request(t, back, "alice", wire.OpGet, `{"namespace":"user/alice","key":"k1"}`); !r.OK {
		t.Fatalf("an acknowledged write, read by a new client: %+v", r)
	}
	if r := backupOpen(t, coord); !r.OK {
		t.Fatalf("backup once the clients left: %+v", r)
	}
	for _, a := range acked {
		ns, key, _ := strings.Cut(a, " ")
		principal, nc := "alice", back
		if ns == "service/tx" {
			principal, nc = "coordinator", coord
		}
		if r := request(t, nc, principal, wire.OpGet, `{"namespace":"`+ns+`","key":"`+key+`"}`); !r.OK {
			t.Fatalf("acknowledged write %s: %+v", a, r)
		}
	}
	resp, err := (&http.Client{Timeout: timeout}).Get(s.HTTP() + "/readyz")
	if err != nil {
		t.Fatalf("/readyz once the clients left: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d once the clients left", resp.StatusCode)
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
}
