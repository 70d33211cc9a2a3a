package client

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// relayPrefix is the subject prefix of a client that talks to the state server through a relay.
const relayPrefix = "rl"

// relayHooks decide, per request, what the relay does; both are optional and may block (each
// request is relayed on a goroutine of its own). n counts the requests of op from 1.
type relayHooks struct {
	// before is called before the request is forwarded; false drops it (the client gets no reply).
	before func(op wire.Op, n int) bool
	// after is called with the server's reply; false drops it (the server acted, the client never
	// hears of it).
	after func(op wire.Op, n int, reply []byte) bool
}

// relay stands in for the network between a client (prefix relayPrefix) and the state server (the
// default prefix) on one NATS server without authorization: it forwards the client's requests and
// the server's replies and watch deliveries, bytes unchanged, so a test can hold back or drop one at
// a chosen moment. Nothing of the server or the client is replaced.
type relay struct {
	nc      *nats.Conn
	hooks   relayHooks
	stopped chan struct{} // closed at cleanup: a blocked hook returns

	mu     sync.Mutex
	counts map[wire.Op]int
	wg     sync.WaitGroup
}

// startRelay starts a relay on the NATS server at url; it stops at cleanup.
func startRelay(t *testing.T, url string, hooks relayHooks) *relay {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("relay"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{nc: nc, hooks: hooks, stopped: make(chan struct{}), counts: map[wire.Op]int{}}
	t.Cleanup(func() {
		close(r.stopped)
		nc.Close()
		r.wg.Wait()
	})
	if _, err := nc.Subscribe(relayPrefix+".state.v1.*.*", r.request); err != nil {
		t.Fatal(err)
	}
	// Deliveries in the order the server sent them: one callback at a time.
	if _, err := nc.Subscribe(wire.DefaultPrefix+".watch.v1.>", func(m *nats.Msg) {
		_ = nc.Publish(relayPrefix+strings.TrimPrefix(m.Subject, wire.DefaultPrefix), m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *relay) request(m *nats.Msg) {
	tokens := strings.Split(m.Subject, ".")
	op := wire.Op(tokens[len(tokens)-1])
	r.mu.Lock()
	r.counts[op]++
	n := r.counts[op]
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		if r.hooks.before != nil && !r.hooks.before(op, n) {
			return
		}
		reply, err := r.nc.Request(wire.DefaultPrefix+strings.TrimPrefix(m.Subject, relayPrefix), m.Data, testTimeout)
		if err != nil {
			return // no state server: the client's request times out
		}
		if r.hooks.after != nil && !r.hooks.after(op, n, reply.Data) {
			return
		}
		_ = m.Respond(reply.Data)
	}()
}
