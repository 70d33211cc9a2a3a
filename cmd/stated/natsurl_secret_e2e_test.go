package main_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// A NATS URL may carry stated's login (nats://user:password@host:port, as nats.go takes it). stated
// names the server it uses in its log and in its errors: never with the password.
func TestE2ENATSURLPasswordStaysOutOfTheLog(t *testing.T) {
	const secret = "s3cret-in-the-url"
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{{Name: "stated", Password: secret}}})
	port := ns.Addr().(*net.TCPAddr).Port
	s := e2e.NewStated(t, e2e.Config{NATSURL: fmt.Sprintf("nats://stated:%s@127.0.0.1:%d", secret, port)})
	s.Start()
	if code := s.Term(); code != 0 {
		t.Fatalf("exit code %d\n%s", code, s.Logs())
	}
	if strings.Contains(s.Logs(), secret) {
		t.Errorf("stated's log shows the password of its NATS URL:\n%s", s.Logs())
	}
	if !strings.Contains(s.Logs(), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("stated's log does not name the NATS server it uses:\n%s", s.Logs())
	}

	// A server that cannot be reached: the error names it, without the password.
	closed := e2e.FreePort(t)
	out, err := runStated(t, "--config", s.ConfigPath, "--nats-url", fmt.Sprintf("nats://stated:%s@127.0.0.1:%d", secret, closed))
	if err == nil {
		t.Fatalf("stated started on a NATS URL nobody listens on:\n%s", out)
	}
	if strings.Contains(out, secret) || !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d", closed)) {
		t.Errorf("stated's error on an unreachable NATS server, want its address without the password:\n%s", out)
	}
}
