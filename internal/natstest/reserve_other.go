//go:build !linux

package natstest

import (
	"net"
	"testing"
)

// reservePort returns a loopback port that was free a moment ago: off Linux it is not kept, and can
// be taken before the test's server binds it.
func reservePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
