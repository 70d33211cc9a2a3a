package natstest

import (
	"syscall"
	"testing"
)

// reservePort returns a loopback port that stays bound, with SO_REUSEADDR and without listening,
// until the test ends. A port merely found free and let go could be taken before the test's server
// binds it, by another test package's server or as the local end of any outgoing connection, and
// that server's start (or restart) would then fail. Bound this way, a connect to the port is
// refused, the system hands it to no outgoing connection and to no bind of another socket without
// SO_REUSEADDR, and the test's servers (Go listeners, the stated binary's too, set SO_REUSEADDR)
// listen on it all the same.
func reservePort(t testing.TB) int {
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
	return sa.(*syscall.SockaddrInet4).Port
}
