package main_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
)

// TestE2EConfigMistakesRefusedAtStart: an operator's mistake in the configuration file stops the
// start with exit code 2 (a configuration error, not a runtime failure), a message naming the file
// and the key, and before the store is opened (no database file is created). Bounds the embedded
// NATS server's max_payload cannot carry and a malformed nats.url were found only once stated had
// opened the store and started NATS or tried to connect, and exited 1, as a runtime failure would,
// without naming the file.
func TestE2EConfigMistakesRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		nats string // the [nats] section's keys; "" for the embedded server on a free port
		conf string // appended to the file
		want []string
	}{
		{name: "unknown section", conf: "[bound]\nmax_pending_updates = 5\n", want: []string{"unknown keys", "bound.max_pending_updates"}},
		{name: "unknown bound", conf: "[bounds]\nmax_watch_per_principal = 5\n", want: []string{"max_watch_per_principal"}},
		{name: "string for a number", conf: "[bounds]\nmax_pending_updates = \"5\"\n", want: []string{"bounds.max_pending_updates", "string"}},
		{name: "float for a number", conf: "[bounds]\nmax_pending_updates = 5.5\n", want: []string{"bounds.max_pending_updates", "float"}},
		{name: "zero bound", conf: "[bounds]\nmax_pending_updates = 0\n", want: []string{"max_pending_updates"}},
		{name: "past int64", conf: "[bounds]\nack_deadline_ms = 99999999999999999999\n", want: []string{"bounds.ack_deadline_ms", "out of range"}},
		{name: "duplicate key", conf: "[bounds]\nmax_pending_updates = 5\nmax_pending_updates = 6\n", want: []string{"max_pending_updates", "already been defined"}},
		{name: "duplicate principal", conf: "[[principals]]\nid = \"a\"\npassword = \"x\"\n[[principals]]\nid = \"a\"\npassword = \"y\"\n", want: []string{`principal "a" is configured twice`}},
		{name: "empty password", conf: "[[principals]]\nid = \"a\"\npassword = \"\"\n", want: []string{`principal "a"`, "password"}},
		{name: "document past max_payload", conf: "[bounds]\nmax_document_bytes = 2000000\n", want: []string{"max_document_bytes", "max_payload"}},
		{name: "snapshot past max_payload", conf: "[bounds]\nmax_snapshot_bytes = 2000000\n", want: []string{"max_snapshot_bytes", "max_payload"}},
		{name: "malformed nats url", nats: "url = \"nats://stated:s3cret@bad host:4222\"\n", want: []string{"nats: url", "xxxxx@bad host:4222"}},
		{name: "nats url naming no host", nats: "url = \"nats://:4222\"\n", want: []string{"nats: url", "no host"}},
		{name: "nats url port out of range", nats: "url = \"nats://127.0.0.1:4222,nats://stated:s3cret@127.0.0.1:99999\"\n", want: []string{"nats: url", "port", "65535"}},
		{name: "nats url port zero", nats: "url = \"127.0.0.1:0\"\n", want: []string{"nats: url", "port", "65535"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			nats := tc.nats
			if nats == "" {
				nats = fmt.Sprintf("listen = \"127.0.0.1:%d\"\n", e2e.FreePort(t))
			}
			path := filepath.Join(dir, "stated.toml")
			conf := fmt.Sprintf("data_dir = %q\nhttp_listen = \"127.0.0.1:%d\"\n\n[nats]\n%s\n%s", filepath.Join(dir, "data"), e2e.FreePort(t), nats, tc.conf)
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := runStated(t, "--config", path)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("stated with %s: %v, want exit code 2:\n%s", tc.name, err, out)
			}
			for _, want := range append([]string{path}, tc.want...) {
				if !strings.Contains(out, want) {
					t.Fatalf("stated's refusal does not say %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "s3cret") {
				t.Fatalf("stated's refusal shows the URL's password:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stated created its data directory before refusing its configuration (%v):\n%s", err, out)
			}
		})
	}
}

// TestE2EDataDirNotADirectoryNamesTheKey: a data_dir that names a file fails the start (a runtime
// failure: the file system, not the file's syntax), and the message named only the mkdir that failed,
// not which setting the operator has to fix.
func TestE2EDataDirNotADirectoryNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "stated.toml")
	conf := fmt.Sprintf("data_dir = %q\nhttp_listen = \"127.0.0.1:%d\"\n\n[nats]\nlisten = \"127.0.0.1:%d\"\n", file, e2e.FreePort(t), e2e.FreePort(t))
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runStated(t, "--config", path)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "data_dir "+file) {
		t.Fatalf("stated with a data_dir that is a file: %v\n%s", err, out)
	}
}

// TestE2ESighupNamesAKeyThatWillHaveNoEffect: a SIGHUP of a file that now sets [nats] user with the
// embedded server logged only "changed in the file, in effect at the next restart: nats.user", which
// promises what the next start does not do (it ignores the key, and says so). The reload names the
// key as ignored, as the start does.
func TestE2ESighupNamesAKeyThatWillHaveNoEffect(t *testing.T) {
	s := startStated(t)
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ConfigPath, []byte(strings.Replace(string(raw), "[nats]\n", "[nats]\nuser = \"stated\"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	waitForLog(t, s.Logs, "SIGHUP: principals reloaded")
	if !strings.Contains(s.Logs(), "SIGHUP: configuration: nats.user ignored") {
		t.Fatalf("the reload does not say that nats.user has no effect with the embedded server:\n%s", s.Logs())
	}
}
