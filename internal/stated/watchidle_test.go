package stated

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// watch_idle_ms is 0 (off) or 1,000 to 86,400,000, with either NATS server; anything else is refused
// with an error that names the key and its range, and the value reaches the server as a duration.
func TestWatchIdleMsRange(t *testing.T) {
	for _, nats := range []string{"", "url = \"nats://127.0.0.1:4222\"\n"} {
		for _, v := range []string{"1", "999", "-1", "86400001", "18446744073710", "9223372036854775807"} {
			_, err := LoadConfig(writeConfig(t, "[nats]\n"+nats+"watch_idle_ms = "+v+"\n"))
			if err == nil || !strings.Contains(err.Error(), "watch_idle_ms must be 0 (off) or from 1000 to 86400000") {
				t.Errorf("%swatch_idle_ms = %s: %v, want refused", nats, v, err)
			}
		}
		for _, v := range []string{"0", "1000", "86400000"} {
			c, err := LoadConfig(writeConfig(t, "[nats]\n"+nats+"watch_idle_ms = "+v+"\n"))
			if err != nil {
				t.Errorf("%swatch_idle_ms = %s: %v", nats, v, err)
				continue
			}
			if got, want := c.watchIdle(), map[string]time.Duration{"0": 0, "1000": time.Second, "86400000": 24 * time.Hour}[v]; got != want {
				t.Errorf("watch_idle_ms = %s: the server's bound %v, want %v", v, got, want)
			}
		}
	}
}

// A bound shorter than the clients' own checks closes the watches of live clients: stated warns at
// start when watch_idle_ms is below what the shipped clients need at their defaults.
func TestWatchIdleMsBelowTheClientsChecksWarns(t *testing.T) {
	for v, warn := range map[string]bool{"0": false, "1000": true, "14999": true, "15000": false, "30000": false} {
		c, err := LoadConfig(writeConfig(t, "[nats]\nwatch_idle_ms = "+v+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		got := c.watchIdleWarning()
		if (got != "") != warn || warn && !strings.Contains(got, "watch_idle_ms") {
			t.Errorf("watch_idle_ms = %s: warning %q, want one: %v", v, got, warn)
		}
	}
}

// A SIGHUP does not apply watch_idle_ms (the server reads it at start); a change is named among the
// settings that wait for a restart.
func TestReloadNamesWatchIdleMs(t *testing.T) {
	before, err := LoadConfig(writeConfig(t, "[nats]\nwatch_idle_ms = 30000\n"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := LoadConfig(writeConfig(t, "[nats]\nwatch_idle_ms = 60000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := before.file.changedOnRestart(after.file); !slices.Equal(got, []string{"nats.watch_idle_ms"}) {
		t.Fatalf("changed %q, want nats.watch_idle_ms", got)
	}
}
