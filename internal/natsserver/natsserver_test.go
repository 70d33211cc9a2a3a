package natsserver

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startT starts an embedded server on a free port, shut down when the test ends.
func startT(t *testing.T) *Server {
	t.Helper()
	s, err := Start(Options{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// The embedded server keeps the details of at most one closed connection (it serves no monitoring
// endpoint that would show them), however many clients come and go.
func TestClosedConnectionsAreNotKept(t *testing.T) {
	s := startT(t)
	for range 5 {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.NumClients() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d clients still connected", s.NumClients())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cz, err := s.Connz(&server.ConnzOptions{State: server.ConnClosed})
	if err != nil {
		t.Fatal(err)
	}
	if cz.Total != 1 {
		t.Fatalf("the server keeps %d closed connections, want 1", cz.Total)
	}
}

// The embedded server runs no system account (its internal clients, subscriptions and event timers
// serve nothing stated uses).
func TestNoSystemAccount(t *testing.T) {
	s := startT(t)
	if acc := s.SystemAccount(); acc != nil {
		t.Fatalf("system account %s is running", acc.Name)
	}
}

// A port another process holds fails the start with nats-server's own reason, at once rather than
// after the ready timeout.
func TestTakenPortFailsWithTheReason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := Start(Options{Listen: ln.Addr().String(), ReadyTimeout: time.Hour})
	if err == nil {
		s.Shutdown()
		t.Fatal("started on a port another listener holds")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q does not say the address is in use", err)
	}
}
