package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/syncbuf"
)

// Credentials NATS refuses on a reconnect (the principal removed, its password changed: stated
// disconnects it, SPEC section 9) close the connection for good, and end mediasim with exit 1 and
// what NATS said, as they do at the first connection: it went on running, serving nothing, for ever,
// looking alive to whoever supervises it.
func TestMediasimRefusedOnReconnectExits(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{{Name: "media", Password: "m"}}})
	addr := ns.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLogWatch()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--nats-url", ns.ClientURL(), "--user", "media", "--password", "m"}, logs)
	}()
	logs.await(t, "media simulator running", 1, code, 10*time.Second)
	ns.Shutdown()
	ns.WaitForShutdown()
	// The same address, and the principal's password changed.
	natstest.Start(t, natsserver.Options{Listen: addr, Users: []natsserver.User{{Name: "media", Password: "changed"}}})
	select {
	case c := <-code:
		if c != 1 {
			t.Fatalf("exit %d, want 1:\n%s", c, logs.String())
		}
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("mediasim still runs on a connection NATS closed for good (exit %d once cancelled):\n%s", <-code, logs.String())
	}
	last := strings.TrimSpace(logs.String())
	last = last[strings.LastIndexByte(last, '\n')+1:]
	if !strings.Contains(strings.ToLower(last), "authorization violation") {
		t.Fatalf("the last line does not say why: %s", last)
	}
}

// Stopped (SIGINT, SIGTERM) while it starts, once connected, mediasim exits 0 as it does when stopped
// at any other time: it logged "start" at ERROR ("sim: flush: context canceled") and exited 1.
func TestMediasimStoppedWhileStartingExitsZero(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal came as it connected
	var logs syncbuf.Buffer
	if c := run(ctx, []string{"--nats-url", ns.ClientURL()}, &logs); c != 0 {
		t.Fatalf("exit %d, want 0:\n%s", c, logs.String())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a stop as asked logged an error:\n%s", logs.String())
	}
}

// A --nats-url no NATS server can have is a usage error (exit 2), found before connecting: one
// nats.go cannot parse exited 1, as a refusal of the credentials does, and a port out of range, or a
// scheme that is not NATS's, was retried for ever.
func TestMediasimBadNATSURLIsAUsageError(t *testing.T) {
	for _, u := range []string{"nats://[::1", "nats://127.0.0.1:99999", "http://127.0.0.1:1", " , "} {
		// Bounded: a URL taken for good would have it wait for NATS until stopped (exit 0).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var out syncbuf.Buffer
		if c := run(ctx, []string{"--nats-url", u}, &out); c != 2 {
			t.Errorf("--nats-url %q: exit %d, want 2\n%s", u, c, out.String())
		}
		cancel()
	}
	// What nats.go takes stays taken: a list, a URL without a scheme, an IPv6 address, credentials.
	for _, u := range []string{"nats://127.0.0.1:1, nats://127.0.0.1:2", "127.0.0.1:1", "nats://[::1]:1", "tls://u:p@127.0.0.1:1", "nats://127.0.0.1:1,"} {
		if err := checkURLs(u); err != nil {
			t.Errorf("checkURLs(%q) = %v, want it taken", u, err)
		}
	}
}
