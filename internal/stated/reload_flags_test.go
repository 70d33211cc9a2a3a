package stated

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/server"
)

// A SIGHUP names the keys changed in the file that wait for the next restart. A key that the
// command line overrides (--nats-url: nats.url and nats.listen; --data-dir: data_dir) takes no effect
// at a restart with the same command line either: "in effect at the next restart" would promise it,
// the very promise the reload's ineffective-key warnings were added to stop making. It is named as
// overridden, with its flag.
func TestReloadDoesNotPromiseWhatTheCommandLineOverrides(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("data_dir = \"/a\"\n[nats]\nurl = \"nats://127.0.0.1:1\"\n")
	cfg, err := parseServeFlags("stated", []string{"--config", path, "--nats-url", ns.ClientURL(), "--data-dir", dir}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st, srv := reloadTarget(t, cfg, ns.ClientURL())
	// Every overridden key changes in the file, and one that is not (http_listen).
	write("data_dir = \"/b\"\nhttp_listen = \"127.0.0.1:1\"\n[nats]\nurl = \"nats://127.0.0.1:2\"\n")
	var log bytes.Buffer
	reload(cfg, nil, srv, st, "internal-pw", slog.New(slog.NewTextHandler(&log, nil)))
	var waiting string
	for line := range strings.SplitSeq(log.String(), "\n") {
		if strings.Contains(line, "in effect at the next restart") {
			waiting = line
		}
	}
	if !strings.Contains(waiting, "http_listen") {
		t.Fatalf("http_listen, changed, is not named as waiting for a restart:\n%s", log.String())
	}
	for _, k := range []string{"data_dir", "nats.url"} {
		if strings.Contains(waiting, k) {
			t.Errorf("%s, overridden on the command line, is promised for the next restart: %s", k, waiting)
		}
	}
	for _, want := range []string{"--nats-url", "--data-dir"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the reload does not say that %s overrides the file:\n%s", want, log.String())
		}
	}
}

// reloadTarget opens cfg's store and a server of it on the NATS server at url: what reload works on.
func reloadTarget(t *testing.T, cfg *Config, url string) (*store.Store, *server.Server) {
	t.Helper()
	st, err := store.Open(cfg.DatabasePath(), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	srv, err := server.New(st, nc, server.Options{Prefix: cfg.SubjectPrefix})
	if err != nil {
		t.Fatal(err)
	}
	return st, srv
}
