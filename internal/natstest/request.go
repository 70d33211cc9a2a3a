package natstest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// FreePort returns a loopback port on which nothing listens, for a server the test starts on it
// (stated, a cluster node: restarted, it comes back on the same port), or for a client that must
// find nothing there. On Linux the port stays the test's until it ends (see reservePort): no other
// test package's server, and no outgoing connection, can take it between the test's servers.
func FreePort(t testing.TB) int {
	t.Helper()
	return reservePort(t)
}

// ReserveAddr is FreePort's port as a loopback host:port.
func ReserveAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// Request sends the state request body (JSON) of op as principal under the default prefix and
// returns its decoded result; no reply within timeout, or one that is not a result, fails the test.
func Request(t testing.TB, nc *nats.Conn, principal string, op wire.Op, body string, timeout time.Duration) wire.Result {
	t.Helper()
	msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, principal, op), []byte(body), timeout)
	if err != nil {
		t.Fatalf("%s %s: %v", op, body, err)
	}
	var r wire.Result
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("reply %s: %v", msg.Data, err)
	}
	return r
}
