package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// runSplit runs stated with args, bounded to 20 s, and returns its stdout, its stderr and its exit code.
func runSplit(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e.Binary(t, "stated"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("stated %v did not exit within 20 s:\n%s%s", args, out.String(), errOut.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("stated %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// TestE2EVersionAndHelpAsAUnixTool: an operator used to `etcd --version` and `nats-server --version`
// got "flag provided but not defined: -version" and exit code 2 from `stated --version`; and a
// subcommand's --help (`stated restore --help`, which an operator reads before a restore) printed the
// usage to stderr and exited 2, as a usage error does. Asked-for output goes to stdout with exit code
// 0; a usage error goes to stderr with exit code 2.
func TestE2EVersionAndHelpAsAUnixTool(t *testing.T) {
	version, _, code := runSplit(t, "version")
	if code != 0 || strings.TrimSpace(version) == "" {
		t.Fatalf("stated version: exit %d, %q", code, version)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--config", "/nonexistent.toml", "--version"}} {
		out, errOut, code := runSplit(t, args...)
		if code != 0 || out != version || errOut != "" {
			t.Errorf("stated %v: exit %d, stdout %q, stderr %q; want exit 0 and %q on stdout", args, code, out, errOut, version)
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"restore", "--help"}, {"nats-permissions", "-h"}, {"--data-dir", "/x", "--help"}} {
		out, errOut, code := runSplit(t, args...)
		if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "stated restore") || errOut != "" {
			t.Errorf("stated %v: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"--bogus"}, {"restore", "--bogus"}, {"--config"}} {
		out, errOut, code := runSplit(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "Usage:") {
			t.Errorf("stated %v: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", args, code, out, errOut)
		}
	}
}

// stoppedStatedWithData starts stated, writes a few entries, stops it, and returns it with a backup
// of its database (a copy taken while it was stopped).
func stoppedStatedWithData(t *testing.T) (*e2e.Stated, string) {
	t.Helper()
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	for _, k := range []string{"a", "b", "c"} {
		if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"`+k+`","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
			t.Fatalf("put %s: %+v", k, r)
		}
	}
	coord.Close()
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	data, err := os.ReadFile(s.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(backup, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return s, backup
}

// TestE2ERestoreRefusalsLeaveTheDatabase: `stated restore` of the wrong file (the configuration, a
// truncated backup, a backup of a newer format, a directory), or into the data directory of a running
// stated, exits non-zero, says why naming the file at fault, and leaves the database as it was. A
// directory was copied as far as the read failed, and the error named the restore's temporary file in
// the data directory ("write .../.restore-123.db: copy_file_range: is a directory"), not the path the
// operator typed; every refusal began "stated restore: restore:".
func TestE2ERestoreRefusalsLeaveTheDatabase(t *testing.T) {
	s, backup := stoppedStatedWithData(t)
	good, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.db")
	if err := os.WriteFile(truncated, good[:len(good)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.db")
	if err := os.WriteFile(newer, good, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(newer, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("format"), []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(s.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"the configuration file", s.ConfigPath, []string{"not valid", "nothing was changed"}},
		{"a truncated backup", truncated, []string{"not valid", "truncated"}},
		{"a backup of a newer format", newer, []string{"not valid", "format version 99"}},
		{"a directory", dir, []string{dir, "directory"}},
		{"no file", filepath.Join(dir, "missing.db"), []string{"missing.db", "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runSplit(t, "restore", "--config", s.ConfigPath, tc.file)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q, want 1 and nothing on stdout", code, out)
			}
			for _, want := range append([]string{"stated restore: "}, tc.want...) {
				if !strings.Contains(errOut, want) {
					t.Errorf("the refusal does not say %q: %s", want, errOut)
				}
			}
			for _, not := range []string{"restore: restore:", ".restore-"} {
				if strings.Contains(errOut, not) {
					t.Errorf("the refusal says %q: %s", not, errOut)
				}
			}
			after, err := os.ReadFile(s.DatabasePath())
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("the database changed (%v)", err)
			}
		})
	}

	// A running stated holds the database: the restore is refused, and tells the operator to stop it.
	s.Start()
	before, err = os.ReadFile(s.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runSplit(t, "restore", "--config", s.ConfigPath, backup)
	if code != 1 || !strings.Contains(errOut, "stop the server first") || !strings.Contains(errOut, s.DatabasePath()) {
		t.Fatalf("restore under a running stated: exit %d: %s", code, errOut)
	}
	if after, err := os.ReadFile(s.DatabasePath()); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the restore under a running stated changed its database (%v)", err)
	}
}

// TestE2EDataDirNotWritable: stated run as a user that may not write its data directory logged
// "THE STATE STORE IS NOT SERVED: every operation answers UNAVAILABLE", which it then did not do: it
// exited 1 with "server: backup directory: mkdir .../backups: permission denied", naming neither the
// setting to fix nor the data directory, after it had started NATS. It fails at once, naming data_dir.
func TestE2EDataDirNotWritable(t *testing.T) {
	// The directory and everything the other user runs or reads are made reachable for it.
	root, err := os.MkdirTemp("", "stated-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	bin := filepath.Join(root, "stated")
	exe, err := os.ReadFile(e2e.Binary(t, "stated"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(root, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "stated.toml")
	body := fmt.Sprintf("data_dir = %q\nhttp_listen = \"127.0.0.1:%d\"\n[nats]\nlisten = \"127.0.0.1:%d\"\n", data, e2e.FreePort(t), e2e.FreePort(t))
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config", conf)
	if os.Geteuid() == 0 {
		// root writes everywhere: stated runs as nobody, to whom the directory (root's, 0755) is read-only.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else if err := os.Chmod(data, 0o555); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("stated with a read-only data_dir still runs after 20 s:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("stated with a read-only data_dir: %v, want exit code 1:\n%s", err, out)
	}
	for _, want := range []string{"data_dir " + data, "permission denied"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stated's refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "every operation answers UNAVAILABLE") {
		t.Errorf("stated said it would serve UNAVAILABLE, then exited:\n%s", out)
	}
}

// TestE2ESighupBoundsBelowUsage: bounds wait for the next restart, and a store that holds more than
// its bounds allow is not served at the next start (SPEC section 10: every operation UNAVAILABLE). A
// SIGHUP of a file that lowered max_entries_per_namespace under what a namespace holds logged only
// "bounds changed in the file; they take effect at the next restart", naming no bound, and the next
// restart served nothing. Such a file is refused, as one whose bounds NATS could not carry is, with
// the namespace and the bound named; a bound changed within what the store holds is named as waiting,
// and a lowered quota bound applies to writes at once: writers could otherwise take the store past it
// before the restart.
func TestE2ESighupBoundsBelowUsage(t *testing.T) {
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	for _, k := range []string{"a", "b", "c"} {
		if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"`+k+`","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
			t.Fatalf("put %s: %+v", k, r)
		}
	}
	carol := e2e.Principal{ID: "carol", Password: "carol-pw"}
	// slog quotes the error: the namespace's quotes are escaped in the log.
	for _, tc := range []struct{ bound, want string }{
		{"max_entries_per_namespace = 2", `service/tx\" holds 3 entries, over max_entries_per_namespace 2`},
		{"max_total_value_bytes = 50", "over max_total_value_bytes 50"},
		{"max_document_bytes = 20", "over max_document_bytes 20"},
	} {
		s.WriteConfig(e2e.Config{Principals: append(slices.Clone(principals), carol), Extra: "[bounds]\n" + tc.bound + "\n"})
		mark := len(s.Logs())
		s.Reload()
		waitForLog(t, func() string { return s.Logs()[mark:] }, "SIGHUP: configuration not reloaded")
		logs := s.Logs()[mark:]
		if !strings.Contains(logs, tc.want) || !strings.Contains(logs, "next start") {
			t.Errorf("the refusal of %s does not say %q and why:\n%s", tc.bound, tc.want, logs)
		}
		if strings.Contains(logs, "principals reloaded") {
			t.Fatalf("a refused SIGHUP reloaded the principals:\n%s", logs)
		}
	}
	if nc, err := nats.Connect(s.URL(), nats.UserInfo(carol.ID, carol.Password)); err == nil {
		nc.Close()
		t.Fatal("a principal of a refused SIGHUP can log in")
	}
	// Bounds within what the store holds: the principals are reloaded, the bounds named as waiting.
	s.WriteConfig(e2e.Config{Principals: principals, Extra: "[bounds]\nmax_entries_per_namespace = 3\nmax_pending_updates = 16\n"})
	mark := len(s.Logs())
	s.Reload()
	waitForLog(t, func() string { return s.Logs()[mark:] }, "SIGHUP: principals reloaded")
	for _, want := range []string{"max_entries_per_namespace 4096 -> 3", "max_pending_updates 32 -> 16"} {
		if !strings.Contains(s.Logs()[mark:], want) {
			t.Errorf("the reload does not name the bound waiting for a restart (%q):\n%s", want, s.Logs()[mark:])
		}
	}
	// The lowered quota applies to writes at once, so the store cannot grow past what the next start
	// serves; info says so. The other bound waits.
	if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"d","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); r.OK ||
		r.Error == nil || r.Error.Code != wire.CodeQuotaExceeded {
		t.Fatalf("a fourth entry in service/tx after a SIGHUP lowered max_entries_per_namespace to 3: %+v, want QUOTA_EXCEEDED", r)
	}
	if r := request(t, coord, "coordinator", wire.OpInfo, `{}`); !r.OK || r.Bounds == nil ||
		r.Bounds.MaxEntriesPerNamespace != 3 || r.Bounds.MaxPendingUpdates != 32 {
		t.Fatalf("info after the SIGHUP: %+v, want max_entries_per_namespace 3 and max_pending_updates still 32", r.Bounds)
	}
	// And the next start serves the store.
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	s.Start()
	resp, err := http.Get(s.HTTP() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after the restart: %d %s", resp.StatusCode, body)
	}
}

// TestE2ESighupRemovesAPrincipalWithLiveState: a SIGHUP that removes a principal while it has a watch,
// an entry with a TTL (a lease of its own) and a heartbeating worker disconnects it (SPEC section 9),
// frees its watch (state_watches), and leaves its entry and worker status to expire as they would have
// (an admin watching sees both EXPIRE); the principal added back can log in and watch again.
func TestE2ESighupRemovesAPrincipalWithLiveState(t *testing.T) {
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	gone := make(chan struct{})
	alice, err := nats.Connect(s.URL(), nats.UserInfo("alice", password("alice")), nats.CustomInboxPrefix(wire.InboxPrefix("alice")),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(gone) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(alice.Close)
	if _, err := alice.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "alice", "mine")); err != nil {
		t.Fatal(err)
	}
	if r := request(t, alice, "alice", wire.OpWatch, `{"watch_id":"mine","namespace":"user/alice"}`); !r.OK {
		t.Fatalf("alice's watch: %+v", r)
	}
	// The admin watches alice's namespace and the worker statuses.
	subs := map[string]*nats.Subscription{}
	for id, body := range map[string]string{
		"alice":   `{"watch_id":"alice","namespace":"user/alice"}`,
		"workers": `{"watch_id":"workers","namespace":"system","key_prefix":"workers/alice/"}`,
	} {
		sub, err := coord.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", id))
		if err != nil {
			t.Fatal(err)
		}
		subs[id] = sub
		if r := request(t, coord, "coordinator", wire.OpWatch, body); !r.OK {
			t.Fatalf("coordinator's watch %s: %+v", id, r)
		}
	}
	next := func(id string, want wire.UpdateKind) {
		t.Helper()
		msg, err := subs[id].NextMsg(timeout)
		if err != nil {
			t.Fatalf("watch %s: no %s: %v\n%s", id, want, err, s.Logs())
		}
		var m wire.WatchMessage
		if err := json.Unmarshal(msg.Data, &m); err != nil || m.Kind != want {
			t.Fatalf("watch %s: %s (%v), want %s", id, msg.Data, err, want)
		}
		request(t, coord, "coordinator", wire.OpAck, fmt.Sprintf(`{"watch_id":%q,"applied_sequence":%d}`, id, m.WatchSequence))
	}
	if r := request(t, alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"session","schema":"keeppeek.preference.v1","ttl_ms":1500,"document":{"kind":"ui"}}`); !r.OK {
		t.Fatalf("alice's entry with a TTL: %+v", r)
	}
	next("alice", wire.UpdatePut)
	hb := `{"worker_id":"tx-1","service":"transcoder-a","sequence":1,"sent_at_ms":1,"interval_ms":500,"status":"ready","leases":[]}`
	if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-1"), []byte(hb)); err != nil {
		t.Fatal(err)
	}
	next("workers", wire.UpdatePut)
	if n := value(scrape(t, s), "state_watches", nil); n != 3 {
		t.Fatalf("state_watches %v before the reload, want 3", n)
	}

	without := slices.DeleteFunc(slices.Clone(principals), func(p e2e.Principal) bool { return p.ID == "alice" })
	s.WriteConfig(e2e.Config{Principals: without})
	s.Reload()
	select {
	case <-gone:
	case <-time.After(timeout):
		t.Fatalf("alice is still connected after the SIGHUP that removed her\n%s", s.Logs())
	}
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded") // NATS disconnects her before the server drops her watch
	if n := value(scrape(t, s), "state_watches", nil); n != 2 {
		t.Errorf("state_watches %v after the reload, want 2: the removed principal's watch is held", n)
	}
	next("alice", wire.UpdateExpire)
	next("workers", wire.UpdateExpire)

	s.WriteConfig(e2e.Config{Principals: principals})
	mark := len(s.Logs())
	s.Reload()
	waitForLog(t, func() string { return s.Logs()[mark:] }, "SIGHUP: principals reloaded")
	back, _ := conn(t, s, "alice")
	if r := request(t, back, "alice", wire.OpWatch, `{"watch_id":"mine","namespace":"user/alice"}`); !r.OK {
		t.Fatalf("alice's watch once she is back: %+v", r)
	}
}

// TestE2ESecondStatedOnOneExternalNATS: a second stated started against the external NATS a first
// one serves on (by hand to look at something, by a deployment while the old instance still runs),
// here on the first's data directory, opened the store unavailable and joined the first's requests:
// NATS handed most of them to it, each answered UNAVAILABLE (on a data directory of its own, each
// answered from a second store). It exits 1 naming the first, which serves every request.
func TestE2ESecondStatedOnOneExternalNATS(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	first := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	first.Start()
	second := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	for _, dataDir := range []string{filepath.Dir(first.DatabasePath()), filepath.Dir(second.DatabasePath())} {
		_, stderr, code := runSplit(t, "--config", second.ConfigPath, "--data-dir", dataDir)
		if code != 1 || !strings.Contains(stderr, "another keeppeek-state server serves the same subjects") {
			t.Fatalf("a second stated on data dir %s: exit %d\n%s", dataDir, code, stderr)
		}
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(wire.InboxPrefix("dev")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i := range 20 {
		r := request(t, nc, "dev", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`)
		if !r.OK || r.Entry.Revision != uint64(i+1) {
			t.Fatalf("put %d after the second stated exited: %+v\n%s", i, r, first.Logs())
		}
	}
}
