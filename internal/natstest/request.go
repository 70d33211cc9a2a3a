package natstest

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
