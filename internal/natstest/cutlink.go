package natstest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutLink is a TCP link between clients and a NATS server that a test can cut (every connection
// closed, no new one taken) and mend (taking connections again on the same address): a network
// outage between a client and NATS, the client's connection and NATS both real.
type CutLink struct {
	t      testing.TB
	target string
	addr   string
	frozen atomic.Bool // bytes are dropped, connections kept: see Freeze
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewCutLink opens a link to target (host:port) on a free loopback port; it is cut, and its
// goroutines waited for, at the test's cleanup.
func NewCutLink(t testing.TB, target string) *CutLink {
	t.Helper()
	l := &CutLink{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(func() { l.Cut(); l.wg.Wait() })
	return l
}

// URL is the link's NATS URL.
func (l *CutLink) URL() string { return "nats://" + l.addr }

func (l *CutLink) serve(ln net.Listener) {
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
			l.wg.Go(func() { _, _ = io.Copy(gate{l, up}, c); up.Close() })
			l.wg.Go(func() { _, _ = io.Copy(gate{l, c}, up); c.Close() })
		}
	})
}

// Cut closes the listener and every connection through the link.
func (l *CutLink) Cut() {
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

// Freeze drops every byte that goes through the link, either way, and keeps its connections open (and
// takes new ones): a peer that stopped answering without closing anything (a host powered off, a
// network partition, a paused process), which only a client's own pings can notice. Thaw ends it.
func (l *CutLink) Freeze() { l.frozen.Store(true) }

// Thaw passes bytes through the link again (what was dropped meanwhile is lost).
func (l *CutLink) Thaw() { l.frozen.Store(false) }

// gate writes to w what the link passes, and drops it while the link is frozen.
type gate struct {
	l *CutLink
	w io.Writer
}

func (g gate) Write(p []byte) (int, error) {
	if g.l.frozen.Load() {
		return len(p), nil
	}
	return g.w.Write(p)
}

// Mend takes connections again on the link's address.
func (l *CutLink) Mend() {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatalf("mend the link on %s: %v", l.addr, err)
	}
	l.serve(ln)
}
