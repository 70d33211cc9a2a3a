package main_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
)

// TestE2EHTTPAddressTakenFailsBeforeServing: stated took its HTTP address last, after it had opened
// the store and started NATS, so a taken http_listen was found only once clients could connect, watch
// and write: stated served them, then stopped, closing their watches with SHUTDOWN, and exited 1 (a
// supervisor restarting it would repeat that in a loop). The address is taken first: the start fails
// at once, naming it, before the store is opened (no database file is created) or NATS listens.
func TestE2EHTTPAddressTakenFailsBeforeServing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(raw), fmt.Sprintf("http_listen = \"127.0.0.1:%d\"", s.HTTPPort),
		fmt.Sprintf("http_listen = %q", taken.Addr().String()), 1)
	if err := os.WriteFile(s.ConfigPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runStated(t, "--config", s.ConfigPath)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "http listen "+taken.Addr().String()) {
		t.Fatalf("stated with a taken http_listen: %v\n%s", err, out)
	}
	if _, err := os.Stat(s.DatabasePath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stated opened the store before it found its HTTP address taken (%v):\n%s", err, out)
	}
}
