package stated

import (
	"slices"
	"strings"
	"testing"
)

// Keys that have no effect in the mode the configuration chooses were accepted without a word: an
// operator who gave the embedded server [nats] user and password believes it asks for them, while
// the dev principal, or every principal, logs in without them. stated names them at start.
func TestIneffectiveKeysAreNamed(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string // substrings, one per message
	}{
		{"embedded, nothing extra", "[nats]\nlisten = \"127.0.0.1:4222\"\nwatch_sweep_ms = 100\n", nil},
		{"embedded with credentials", "[nats]\nuser = \"stated\"\npassword = \"pw\"\ncreds = \"/etc/x.creds\"\n",
			[]string{"nats.user, nats.password, nats.creds ignored"}},
		{"external, everything used", "[nats]\nurl = \"nats://127.0.0.1:4222\"\nuser = \"stated\"\npassword = \"pw\"\n", nil},
		{"external with a sweep interval", "[nats]\nurl = \"nats://127.0.0.1:4222\"\nwatch_sweep_ms = 100\n",
			[]string{"nats.watch_sweep_ms ignored"}},
		{"external, password without user", "[nats]\nurl = \"nats://127.0.0.1:4222\"\npassword = \"pw\"\n",
			[]string{"nats.password ignored"}},
		{"external, user and creds", "[nats]\nurl = \"nats://127.0.0.1:4222\"\nuser = \"stated\"\npassword = \"pw\"\ncreds = \"/etc/x.creds\"\n",
			[]string{"nats.user and nats.creds both set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfig(writeConfig(t, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got := c.Ineffective()
			if len(got) != len(tc.want) {
				t.Fatalf("Ineffective() = %q, want %d messages", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Fatalf("message %q lacks %q", got[i], w)
				}
			}
		})
	}
}

// A SIGHUP applies principals only; the settings that need a restart were changed in the file
// without a word (subject_prefix and bounds had their message). Each is named.
func TestReloadNamesWhatWaitsForARestart(t *testing.T) {
	before, err := LoadConfig(writeConfig(t, "data_dir = \"/a\"\n[nats]\nlisten = \"127.0.0.1:4222\"\n[state_store.settings.\"service/x\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	same, err := LoadConfig(writeConfig(t, "data_dir = \"/a\"\n[nats]\nlisten = \"127.0.0.1:4222\"\n[state_store.settings.\"service/x\"]\nrevision = 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := before.file.changedOnRestart(same.file); len(got) != 0 {
		t.Fatalf("nothing that waits for a restart changed, yet %q", got)
	}
	after, err := LoadConfig(writeConfig(t, "data_dir = \"/b\"\nhttp_listen = \"127.0.0.1:1\"\n[nats]\nlisten = \"127.0.0.1:4223\"\nwatch_sweep_ms = 50\n[state_store.settings.\"service/y\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := before.file.changedOnRestart(after.file)
	want := []string{"data_dir", "http_listen", "nats.listen", "nats.watch_sweep_ms", "the settings-backed namespaces ([state_store.settings])"}
	if !slices.Equal(got, want) {
		t.Fatalf("changed %q, want %q", got, want)
	}
}
