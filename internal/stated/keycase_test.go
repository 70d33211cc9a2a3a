package stated

import (
	"strings"
	"testing"
)

// TOML keys are case-sensitive, and the file's keys are the lower-case ones of SPEC section 14, but the
// TOML decoder matches a key to a field without regard to case when no field has its exact name. A
// key spelled in another case must be an unknown key, as any other misspelling is: taken silently,
// "Admin = true" beside "admin = false" made the principal an admin (the two are different keys to
// TOML, and the later one won), and DATA_DIR moved the store.
func TestLoadConfigKeysAreCaseSensitive(t *testing.T) {
	for _, tc := range []struct{ name, body, key string }{
		{"top level", "DATA_DIR = \"/tmp/x\"\n", "DATA_DIR"},
		{"shadowing a key", "data_dir = \"./data\"\nData_Dir = \"/tmp/x\"\n", "Data_Dir"},
		{"principal", "[[principals]]\nid = \"a\"\npassword = \"x\"\nadmin = false\nAdmin = true\n", "principals.Admin"},
		{"principal id", "[[principals]]\nID = \"a\"\npassword = \"x\"\n", "principals.ID"},
		{"inline principal", "principals = [{ id = \"a\", Password = \"x\" }]\n", "principals.Password"},
		{"nats", "[nats]\nListen = \"127.0.0.1:4222\"\n", "nats.Listen"},
		{"table", "[NATS]\nlisten = \"127.0.0.1:4222\"\n", "NATS"},
		{"state_store", "[State_Store.settings.\"service/x\"]\n", "State_Store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfig(writeConfig(t, tc.body))
			if err == nil {
				t.Fatalf("accepted: data_dir %q, principals %+v, nats %+v", c.DataDir, c.Principals, c.NATS)
			}
			if !strings.Contains(err.Error(), "unknown keys") || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error does not name the unknown key %s: %v", tc.key, err)
			}
		})
	}
	// The settings-backed namespaces' entries are the namespace's own keys, in any case.
	c, err := LoadConfig(writeConfig(t, "[state_store.settings.\"service/x\".Mixed]\nschema = \"keeppeek.preference.v1\"\n"))
	if err != nil {
		t.Fatalf("settings entry with an upper-case key: %v", err)
	}
	if len(c.StateStore.Settings) != 1 {
		t.Fatalf("settings %+v", c.StateStore.Settings)
	}
}
