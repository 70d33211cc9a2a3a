package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
)

// Kick cuts nc's connection at ns, as a network fault would; nc reconnects as its options say. It
// reports false when nc has no connection at ns to cut right now (it is reconnecting).
func Kick(ns *natsserver.Server, nc *nats.Conn) bool {
	cid, err := nc.GetClientID()
	return err == nil && ns.DisconnectClientByID(cid) == nil
}

// Poll calls cond until it holds, and fails the test after timeout with the description cond gave
// last. It is for state that no event announces (goroutine counts, subscription counts): where an
// event can be awaited, await it instead.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, desc string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after %v", what, desc, timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling what no event announces
	}
}
