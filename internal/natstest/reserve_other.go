//go:build !linux

package natstest

import (
	"fmt"
	"testing"
)

// ReserveAddr returns a loopback address on which nothing listens, for a server a test starts later
// while its clients already try to connect. Off Linux the port is only found free (FreePort): it can
// be taken before the server starts.
func ReserveAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}
