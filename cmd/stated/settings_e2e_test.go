package main_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2ESettingsWriteRefusedWhileTheConfigIsGone: the configuration file is moved away while
// stated runs. A write to a settings-backed namespace used to create the file again holding only
// that namespace's section, and the next start then came up on the embedded defaults (a fresh
// ./data, the dev principal with no credentials). The write is refused with STORAGE, the file is
// not created, the log says why, other namespaces keep working, and once the file is back the
// settings write goes through.
func TestE2ESettingsWriteRefusedWhileTheConfigIsGone(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals, Extra: "[state_store.settings.\"service/mqtt-bridge\"]\n"})
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	put := `{"namespace":"service/mqtt-bridge","key":"bridge/config","schema":"keeppeek.lease.v1","document":` + leaseDoc + `}`
	if r := request(t, coord, "coordinator", wire.OpPut, put); !r.OK {
		t.Fatalf("settings put: %+v", r)
	}
	away := s.ConfigPath + ".moved"
	if err := os.Rename(s.ConfigPath, away); err != nil {
		t.Fatal(err)
	}
	r := request(t, coord, "coordinator", wire.OpPut, put)
	if r.OK || r.Error == nil || r.Error.Code != wire.CodeStorage {
		t.Fatalf("settings put while the configuration file is gone: %+v", r)
	}
	if _, err := os.Stat(s.ConfigPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the settings write created the configuration file again (%v)", err)
	}
	waitForLog(t, s.Logs, "gone")
	other := `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":` + leaseDoc + `}`
	if r := request(t, coord, "coordinator", wire.OpPut, other); !r.OK {
		t.Fatalf("a put elsewhere while the configuration file is gone: %+v", r)
	}
	if err := os.Rename(away, s.ConfigPath); err != nil {
		t.Fatal(err)
	}
	if r := request(t, coord, "coordinator", wire.OpPut, put); !r.OK || r.Entry.Revision != 2 {
		t.Fatalf("settings put once the file is back: %+v", r)
	}
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil || !strings.Contains(string(raw), "[[principals]]") || !strings.Contains(string(raw), "revision = 2") {
		t.Fatalf("the configuration file (%v):\n%s", err, raw)
	}
}

// TestE2EStartCleansUpAndNamesIneffectiveKeys: a stated killed during a settings write leaves its
// temporary file (a copy of the configuration, passwords included) beside the configuration file;
// the next start removes it, even with no settings-backed namespace left in the file. And keys that
// have no effect in the mode chosen ([nats] user and password with the embedded server) are named
// at start instead of being accepted in silence.
func TestE2EStartCleansUpAndNamesIneffectiveKeys(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(raw), "[nats]\n", "[nats]\nuser = \"stated\"\npassword = \"secret\"\n", 1)
	if err := os.WriteFile(s.ConfigPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(s.Dir, ".stated.toml.tmp-1234567")
	if err := os.WriteFile(stale, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()
	waitForLog(t, s.Logs, "nats.user, nats.password ignored")
	waitForLog(t, s.Logs, "removed a stale temporary file")
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the stale temporary file is still there (%v)\n%s", err, s.Logs())
	}
}

// TestE2ESighupReloadsSettings: an operator edits a settings-backed namespace's section while stated
// runs and sends SIGHUP. stated used to reload principals only: clients and watchers kept the old
// entry until a restart. The edited entry now reaches the watch as an ordinary PUT at a new
// revision, the entry left alone keeps its revision, a compare-and-set against the entry as it was
// fails CONFLICT, and the log names the change. A file whose settings section does not load (an
// entry that fails its schema) is refused whole, as a malformed file is: nothing changes, a
// principal added in the same edit cannot log in, and the next good SIGHUP is the watch's next update.
func TestE2ESighupReloadsSettings(t *testing.T) {
	const ns = "service/mqtt-bridge"
	s, ctx := startWith(t, "[state_store.settings.\""+ns+"\"]\n")
	c := goClient(t, s, "coordinator")
	putLease(t, ctx, c, ns, "bridge/config", "w1")
	putLease(t, ctx, c, ns, "bridge/other", "w2")
	w := openWatch(t, c, "w", ns, "")

	edit := func(from, to string) {
		t.Helper()
		raw, err := os.ReadFile(s.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), from) {
			t.Fatalf("the configuration file holds no %q:\n%s", from, raw)
		}
		if err := os.WriteFile(s.ConfigPath, []byte(strings.Replace(string(raw), from, to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit(`w1`, `w9`) // bridge/config's holder, its revision (1) kept
	s.Reload()
	m := nextWatchMessage(t, w)
	if m.Kind != wire.UpdatePut || m.WatchSequence != 1 || m.Key != "bridge/config" || m.Revision != 3 ||
		m.Entry == nil || !strings.Contains(string(m.Entry.Document), `"w9"`) {
		t.Fatalf("the watch after the SIGHUP: %+v, want the PUT of the edited bridge/config at revision 3", m)
	}
	waitForLog(t, s.Logs, "SIGHUP: settings reloaded")
	if !strings.Contains(s.Logs(), "bridge/config") {
		t.Fatalf("the log does not name the entry the SIGHUP changed:\n%s", s.Logs())
	}
	coord, _ := conn(t, s, "coordinator")
	if r := request(t, coord, "coordinator", wire.OpGet, `{"namespace":"`+ns+`","key":"bridge/other"}`); !r.OK || r.Entry.Revision != 2 {
		t.Fatalf("bridge/other, not edited, after the SIGHUP: %+v, want revision 2", r)
	}
	cas := `{"namespace":"` + ns + `","key":"bridge/config","schema":"keeppeek.lease.v1","expected_revision":1,"document":` + leaseDoc + `}`
	if r := request(t, coord, "coordinator", wire.OpPut, cas); r.OK || r.Error.Code != wire.CodeConflict || r.Error.CurrentRevision == nil || *r.Error.CurrentRevision != 3 {
		t.Fatalf("a compare-and-set against bridge/config as it was before the edit: %+v, want CONFLICT at 3", r)
	}

	// A settings entry that fails its schema, and a new principal: refused whole.
	good, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	edit(`w2`, `not a worker id!`)
	edit("[[principals]]", "[[principals]]\nid = \"carol\"\npassword = \"carol-pw\"\n\n[[principals]]")
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: configuration not reloaded")
	if !strings.Contains(s.Logs(), "bridge/other") {
		t.Fatalf("the refusal does not name the entry at fault:\n%s", s.Logs())
	}
	if nc, err := nats.Connect(s.URL(), nats.UserInfo("carol", "carol-pw")); err == nil {
		nc.Close()
		t.Fatal("a principal of a refused SIGHUP can log in")
	}
	if r := request(t, coord, "coordinator", wire.OpGet, `{"namespace":"`+ns+`","key":"bridge/other"}`); !r.OK || r.Entry.Revision != 2 || !strings.Contains(string(r.Entry.Document), `"w2"`) {
		t.Fatalf("bridge/other after the refused SIGHUP: %+v, want it unchanged at 2", r)
	}
	if err := os.WriteFile(s.ConfigPath, good, 0o600); err != nil {
		t.Fatal(err)
	}
	edit(`w2`, `w8`)
	s.Reload()
	m = nextWatchMessage(t, w)
	if m.Kind != wire.UpdatePut || m.WatchSequence != 2 || m.Key != "bridge/other" || m.Revision != 4 {
		t.Fatalf("the watch after the good SIGHUP: %+v, want the PUT of bridge/other at revision 4, its second update", m)
	}
}
