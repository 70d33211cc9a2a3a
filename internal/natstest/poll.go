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

// Storm cuts conns at ns one after another (Kick), round and round with pause between cuts, until
// the stop it returns is called; stop returns once the cutting has ended.
func Storm(ns *natsserver.Server, pause time.Duration, conns ...*nats.Conn) (stop func()) {
	halt, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for j := 0; ; j++ {
			select {
			case <-halt:
				return
			default:
			}
			Kick(ns, conns[j%len(conns)])
			select {
			case <-halt:
				return
			case <-time.After(pause):
			}
		}
	}()
	return func() {
		close(halt)
		<-done
	}
}
