package natstest

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/keeppeek/coordination/internal/natsserver"
)

// A reserved address refuses connections, cannot be bound by a socket without SO_REUSEADDR (as an
// outgoing connection's local end is), and takes the test's server, again after a restart.
func TestReserveAddr(t *testing.T) {
	addr := ReserveAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("a connection to the reserved address was taken")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a connection to the reserved address: %v, want connection refused", err)
	}
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: tcp.Port}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("another socket bound the reserved port: %v", err)
	}
	for range 2 {
		ns, err := natsserver.Start(natsserver.Options{Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		got := ns.Addr().String()
		ns.Shutdown()
		ns.WaitForShutdown()
		if got != addr {
			t.Fatalf("the server listens on %s, want %s", got, addr)
		}
	}
}
