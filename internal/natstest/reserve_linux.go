package natstest

import (
	"fmt"
	"syscall"
	"testing"
)

// ReserveAddr returns a loopback address on which nothing listens, for a server a test starts later
// while its clients already try to connect (they see connection refused until then). A port merely
// found free and let go could be taken meanwhile, by another test package's server or as the local
// end of any outgoing connection, and the server's start would then fail. Here the port stays bound,
// with SO_REUSEADDR and without listening, until the test ends: a connect to it is refused, the
// system hands it to no outgoing connection and to no bind of another socket without SO_REUSEADDR,
// and the test's server (Go listeners set SO_REUSEADDR) listens on it all the same.
func ReserveAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("natstest: reserve a port: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatalf("natstest: reserve a port: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("natstest: reserve a port: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("natstest: reserve a port: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
