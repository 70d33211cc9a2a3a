package store

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// TestOpenCountsSettingsNamespacesAgainstMaxNamespaces: Open validates counts within bounds (SPEC
// section 10), and a settings-backed namespace holding entries is one of max_namespaces, as every put
// counts it: a store whose database and settings file together hold entries in more namespaces than
// the bound opens unavailable, as one over max_total_value_bytes does.
func TestOpenCountsSettingsNamespacesAgainstMaxNamespaces(t *testing.T) {
	dir := t.TempDir()
	const settingsNS = "user/alice"
	cfg := filepath.Join(dir, "stated.toml")
	opts := DefaultOptions()
	opts.Bounds.MaxNamespaces = 2
	opts.Settings = map[string]SettingsBackend{settingsNS: TOMLSettings(cfg, settingsNS)}
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, opts)
	mustPut(t, s, alice, settingsPref(settingsNS, "prefs/ui"))
	mustPut(t, s, admin, putLease("service/a", "k"))
	_, err := s.Put(ctxT(t), admin, putLease("service/b", "k"))
	wantCode(t, err, wire.CodeQuotaExceeded) // the settings namespace counts
	s.Close()

	opts.Bounds.MaxNamespaces = 1
	s, err = Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Unavailable(); r == nil || !strings.Contains(r.Error(), "max_namespaces") {
		t.Fatalf("two namespaces hold entries under max_namespaces 1: opened with reason %v", r)
	}
}

// TestSettingsNamespaceAtTheLastRevision: a settings file may carry a namespace at revision 2^53-1
// (written by hand, or by a store it was copied from). A write there has no revision left: it is
// refused QUOTA_EXCEEDED, a bound, not STORAGE (the file could have taken a write; it is the
// contract's integers that end), and nothing changes.
func TestSettingsNamespaceAtTheLastRevision(t *testing.T) {
	dir := t.TempDir()
	const ns = "user/alice"
	cfg := filepath.Join(dir, "stated.toml")
	opts := DefaultOptions()
	opts.Settings = map[string]SettingsBackend{ns: TOMLSettings(cfg, ns)}
	path := filepath.Join(dir, "state-store.db")
	s := openAt(t, path, opts)
	mustPut(t, s, alice, settingsPref(ns, "prefs/ui"))
	s.Close()
	st, err := TOMLSettings(cfg, ns).Load()
	if err != nil {
		t.Fatal(err)
	}
	st.Revision = wire.MaxSafeInteger
	if err := TOMLSettings(cfg, ns).Save(st); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path, opts)
	ctx := ctxT(t)
	_, err = s.Delete(ctx, alice, wire.DeleteRequest{Namespace: ns, Key: "prefs/ui"})
	wantCode(t, err, wire.CodeQuotaExceeded)
	_, err = s.Put(ctx, alice, settingsPref(ns, "prefs/ui"))
	wantCode(t, err, wire.CodeQuotaExceeded)
	if _, err := s.Get(ctx, alice, wire.GetRequest{Namespace: ns, Key: "prefs/ui"}); err != nil {
		t.Fatalf("the refused writes changed the entry: %v", err)
	}
	if r := settingsFileRevision(t, cfg, ns); r != wire.MaxSafeInteger {
		t.Fatalf("settings file at revision %d", r)
	}
}
