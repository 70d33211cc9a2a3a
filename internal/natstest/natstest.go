// Package natstest starts the embedded NATS server (internal/natsserver) for a test.
package natstest

import (
	"testing"

	"github.com/keeppeek/coordination/internal/natsserver"
)

// Start starts an embedded NATS server with o, on a free loopback port unless o.Listen names one, and
// shuts it down (waiting until it is down) at the test's cleanup. A server that does not start fails
// the test.
func Start(t testing.TB, o natsserver.Options) *natsserver.Server {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	ns, err := natsserver.Start(o)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}
