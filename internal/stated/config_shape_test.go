package stated

import (
	"strings"
	"testing"
)

// A key that must hold a table (or principals, an array of tables) but holds another TOML type is
// an error naming the key, the type found and the type expected; toml would otherwise drop a
// scalar given for a map without complaint.
func TestLoadConfigRejectsNonTableValues(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"bounds integer", "bounds = 5\n", "bounds: expected a table, found integer"},
		{"bounds array", "bounds = []\n", "bounds: expected a table, found array"},
		{"bounds string", "bounds = \"x\"\n", "bounds: expected a table, found string"},
		{"bounds array of tables", "[[bounds]]\nmax_watches = 3\n", "bounds: expected a table, found array of tables"},
		{"nats string", "nats = \"x\"\n", "nats: expected a table, found string"},
		{"nats integer", "nats = 5\n", "nats: expected a table, found integer"},
		{"nats array", "nats = []\n", "nats: expected a table, found array"},
		{"state_store integer", "state_store = 5\n", "state_store: expected a table, found integer"},
		{"state_store boolean", "state_store = true\n", "state_store: expected a table, found boolean"},
		{"settings integer", "[state_store]\nsettings = 5\n", "state_store.settings: expected a table, found integer"},
		{"settings array", "[state_store]\nsettings = []\n", "state_store.settings: expected a table, found array"},
		{"settings inline", "state_store = { settings = \"x\" }\n", "state_store.settings: expected a table, found string"},
		{"settings namespace integer", "[state_store.settings]\n\"service/x\" = 5\n", "state_store.settings.\"service/x\": expected a table, found integer"},
		{"principals integer", "principals = 5\n", "principals: expected an array of tables, found integer"},
		{"principals table", "[principals]\nid = \"a\"\npassword = \"x\"\n", "principals: expected an array of tables, found table"},
		{"principals of strings", "principals = [\"a\"]\n", "principals: expected an array of tables, found string at index 0"},
		{"principals mixed", "principals = [{ id = \"a\", password = \"x\" }, 3]\n", "principals: expected an array of tables, found integer at index 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, tc.body)
			c, err := LoadConfig(p)
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if want := "config " + p + ": " + tc.want; err.Error() != want {
				t.Fatalf("error\n got: %v\nwant: %s", err, want)
			}
		})
	}
}

func TestLoadConfigAcceptsTableForms(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		check      func(*Config) bool
	}{
		{"bounds table", "[bounds]\nmax_watches = 7\n", func(c *Config) bool { return c.Bounds["max_watches"] == 7 }},
		{"bounds inline", "bounds = { max_watches = 7 }\n", func(c *Config) bool { return c.Bounds["max_watches"] == 7 }},
		{"bounds empty", "bounds = {}\n", func(c *Config) bool { return len(c.Bounds) == 0 }},
		{"nats table", "[nats]\nlisten = \"127.0.0.1:1\"\n", func(c *Config) bool { return c.NATS.Listen == "127.0.0.1:1" }},
		{"nats inline", "nats = { url = \"nats://x:4222\" }\n", func(c *Config) bool { return c.NATS.URL == "nats://x:4222" && c.NATS.Listen == "" }},
		{"state_store empty", "[state_store]\n", func(c *Config) bool { return len(c.StateStore.Settings) == 0 }},
		{"settings table", "[state_store.settings]\n", func(c *Config) bool { return len(c.StateStore.Settings) == 0 }},
		{"settings namespace", "[state_store.settings.\"service/x\"]\nrevision = 2\n", func(c *Config) bool {
			_, ok := c.StateStore.Settings["service/x"]
			return ok
		}},
		{"settings inline", "state_store = { settings = { \"service/x\" = {} } }\n", func(c *Config) bool { return len(c.StateStore.Settings) == 1 }},
		{"principals array of tables", "[[principals]]\nid = \"a\"\npassword = \"x\"\n", func(c *Config) bool { return len(c.Principals) == 1 && c.Principals[0].ID == "a" }},
		{"principals inline", "principals = [{ id = \"a\", password = \"x\" }, { id = \"b\", nkey = \"UBSXMD3YDWAODS7NFTMM23JBQHB77EVHIPFNMTC6N53B6UU3OGD7LXH6\" }]\n", func(c *Config) bool {
			return len(c.Principals) == 2 && c.Principals[1].Nkey == "UBSXMD3YDWAODS7NFTMM23JBQHB77EVHIPFNMTC6N53B6UU3OGD7LXH6"
		}},
		{"principals empty", "principals = []\n", func(c *Config) bool { return len(c.Principals) == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfig(writeConfig(t, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	if _, err := LoadConfig("/nonexistent/stated.toml"); err == nil || !strings.Contains(err.Error(), "config /nonexistent/stated.toml:") {
		t.Fatalf("err %v", err)
	}
}
