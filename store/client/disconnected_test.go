package client

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// cutLink is a TCP link between clients and a NATS server that a test can cut (every connection
// closed, no new one taken) and mend (taking connections again on the same address): a network
// outage between a client and NATS, the client's connection and NATS both real.
type cutLink struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutLink(t *testing.T, target string) *cutLink {
	l := &cutLink{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(func() { l.cut(); l.wg.Wait() })
	return l
}

func (l *cutLink) url() string { return "nats://" + l.addr }

func (l *cutLink) serve(ln net.Listener) {
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	l.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", l.target)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			if l.ln != ln { // cut while this one was being dialled: it must not outlive the cut
				l.mu.Unlock()
				c.Close()
				up.Close()
				continue
			}
			l.conns = append(l.conns, c, up)
			l.mu.Unlock()
			l.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			l.wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
}

// cut closes the listener and every connection through the link.
func (l *cutLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// mend takes connections again on the link's address.
func (l *cutLink) mend() {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatalf("mend the link on %s: %v", l.addr, err)
	}
	l.serve(ln)
}

// awaitStatus waits until nc reports status (bounded by the test timeout).
func awaitStatus(t *testing.T, nc *nats.Conn, ch chan nats.Status, want nats.Status) {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for nc.Status() != want {
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("the connection is %v, not %v, after %v", nc.Status(), want, testTimeout)
		}
	}
}

// A write made while the client's connection is down fails at once with UNAVAILABLE, and never
// reaches the store: nats.go would otherwise hold it in its reconnect buffer and send it when the
// connection comes back, long after its caller gave up on it (a put without expected_revision would
// then overwrite whatever was written since).
func TestRequestWhileDisconnectedIsNeverSentLater(t *testing.T) {
	env := startEnv(t)
	link := newCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
	nc, err := Connect(link.url(), "alice", nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	status := nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer nc.RemoveStatusListener(status)
	c, err := New(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := c.Put(ctx, preference("user/alice", "before", "grid")); err != nil {
		t.Fatal(err)
	}

	link.cut()
	awaitStatus(t, nc, status, nats.RECONNECTING)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = c.Put(wctx, preference("user/alice", "during", "grid"))
	cancel()
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("put while disconnected: %v, want UNAVAILABLE at once (not sent)", err)
	}

	link.mend()
	awaitStatus(t, nc, status, nats.CONNECTED)
	// Answered after anything the connection held back was sent and handled.
	if _, err := c.Put(ctx, preference("user/alice", "after", "grid")); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, env, "alice")
	if e, err := other.Get(ctx, "user/alice", "during"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the put refused while disconnected reached the store once reconnected: %+v, %v", e, err)
	}
}
