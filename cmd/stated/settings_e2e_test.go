package main_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
