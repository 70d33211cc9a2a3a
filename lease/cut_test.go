package lease_test

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

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
)

// cutLink is a TCP link between a client and the NATS server that a test can cut (every connection
// closed, no new one taken) and mend: a network outage between a holder and NATS, with the state
// server and NATS running on. The connection and NATS are both real.
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

// linkedClient returns a coordinator client connected through link (client.Connect: no reconnect
// buffer) and its connection.
func linkedClient(t *testing.T, link *cutLink) (*client.Client, *nats.Conn) {
	t.Helper()
	nc, err := client.Connect(link.url(), "coordinator", nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "coordinator", client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// A holder whose NATS connection is cut and mended, the state server running on: through a cut
// shorter than the lease's validity it keeps the lease (renewals resume, the standby waits); through a
// longer one it learns the loss by itself before the store expires the entry, the standby gets the
// lease only then, and the former holder, reconnected, neither writes nor releases the new holder's
// entry.
func TestLeaseAcrossACutConnection(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	link := newCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	hc, hnc := linkedClient(t, link)
	renewals, onRenewed := notifier[uint64]()
	o := lease.Options{Namespace: ns, Key: "leases/cut", Holder: "holder-a", TTL: 3 * time.Second, RenewEvery: 300 * time.Millisecond}
	a, err := lease.Claim(ctx, hc, lease.WithHooks(o, lease.TestHooks{Renewed: onRenewed}))
	if err != nil {
		t.Fatal(err)
	}
	bo := o
	bo.Holder = "holder-b"
	waiting, onWait := notifier[struct{}]()
	type result struct {
		l   *lease.Lease
		err error
	}
	standby := make(chan result, 1)
	go func() {
		l, err := campaignUntil(ctx, newClient(t, env), lease.WithHooks(bo, lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		standby <- result{l, err}
	}()
	defer func() {
		cancel()
		if r := <-standby; r.l != nil {
			_ = r.l.Release(context.Background())
		}
	}()
	recv(t, waiting, "the standby to wait for the key")

	// A short cut: a renewal or two fail, the next ones get through.
	status := hnc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer hnc.RemoveStatusListener(status)
	recv(t, renewals, "a renewal before the cut")
	before := a.Revision()
	link.cut()
	for hnc.Status() != nats.RECONNECTING {
		recv(t, status, "the holder's connection to drop")
	}
	link.mend()
	for rev := uint64(0); rev <= before; {
		rev = recv(t, renewals, "a renewal after the cut")
	}
	if !a.Held() {
		t.Fatalf("the lease is not held after a short cut: %v", a.Err())
	}
	select {
	case r := <-standby:
		standby <- r
		t.Fatalf("the standby got the lease (%v) while its holder kept it", r.err)
	default:
	}

	// A long cut: the holder loses the lease by itself, then the standby gets it.
	link.cut()
	closed(t, a.Lost(), "the holder to learn its lease is lost while cut off")
	if a.Held() {
		t.Fatal("Held after Lost")
	}
	lostAt := a.Revision()
	var b result
	select {
	case b = <-standby:
		standby <- b
	case <-ctx.Done():
		t.Fatal("the standby never got the lease")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if b.l.Revision() <= lostAt {
		t.Fatalf("the standby claimed at %d, the holder's last revision %d", b.l.Revision(), lostAt)
	}
	link.mend()
	for hnc.Status() != nats.CONNECTED {
		recv(t, status, "the holder's connection to come back")
	}
	if _, err := a.Put(ctx, statusPut("status/x", "active")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a write of the lost lease: %v, want ErrNotHeld", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of the lost lease: %v", err)
	}
	e, ok := get(t, newClient(t, env), o.Key)
	if !ok || decodeLease(t, e).Holder != bo.Holder || e.Revision != b.l.Revision() {
		t.Fatalf("lease entry %+v %v, want the standby's at %d", e, ok, b.l.Revision())
	}
}
