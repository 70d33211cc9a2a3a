package store

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The crash test with one of the child's two namespaces settings-backed: kills land in the settings
// file's atomic write (temporary file, fsync, rename) as well as in commits.
func TestCrashKillMidSettingsWrite(t *testing.T) {
	const cycles = 16
	dir := t.TempDir()
	cfg := filepath.Join(dir, "stated.toml")
	settingsNS := crashNamespaces[1]
	if err := os.WriteFile(cfg, []byte("[state_store.settings.\""+settingsNS+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state-store.db")
	models := map[string]*crashModel{}
	for _, ns := range crashNamespaces {
		models[ns] = &crashModel{keys: map[string]uint64{}}
	}
	for cycle := range cycles {
		crashCycle(t, cycle, path, 20+rand.IntN(181), models, crashSettingsEnv+"="+cfg)
		if t.Failed() {
			return
		}
		opts := DefaultOptions()
		settings, err := TOMLSettingsNamespaces(cfg)
		if err != nil {
			t.Fatalf("cycle %d: the settings file after the kill: %v", cycle, err)
		}
		if _, ok := settings[settingsNS]; !ok || len(settings) != 1 {
			t.Fatalf("cycle %d: settings namespaces %v", cycle, settings)
		}
		opts.Settings = settings
		crashCheck(t, cycle, path, models, opts)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d cycles; %s at revision %d, %s at %d; %d and %d committed without their ack, %d of them without an audit record",
		cycles, crashNamespaces[0], models[crashNamespaces[0]].revision, settingsNS, models[settingsNS].revision,
		models[crashNamespaces[0]].unacked, models[settingsNS].unacked, models[settingsNS].unaudited)
}
