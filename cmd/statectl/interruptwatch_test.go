package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// Interrupted while its first watch request is out to a slow state server, watch leaves no watch
// registered: it waits (within a request's bound) for the request's late answer and unwatches what it
// registered, before it closes its connection. An unwatch sent at once could reach the server before
// the watch request, and the watch registered after it would hold one of the principal's watch slots
// with no one to remove it.
func TestWatchInterruptedWhileItsRequestIsOutLeavesNoWatch(t *testing.T) {
	clearEnv(t)
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{{ID: defaultUser, Admin: true}}})
	const prefix = "rl"
	held, served, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	relay, err := nats.Connect(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	// A relay between statectl (subject prefix rl) and the state server (kp) that holds the watch
	// request back: a slow server. It forwards it once statectl returned, or after 100 ms when statectl
	// waits for it (it waits up to a second).
	if _, err := relay.Subscribe(prefix+".state.v1.*.*", func(m *nats.Msg) {
		go func() {
			watch := strings.HasSuffix(m.Subject, "."+string(wire.OpWatch))
			if watch {
				close(held)
				select {
				case <-returned:
				case <-time.After(100 * time.Millisecond):
				}
			}
			reply, err := relay.Request(wire.DefaultPrefix+strings.TrimPrefix(m.Subject, prefix), m.Data, 10*time.Second)
			if watch {
				close(served)
			}
			if err == nil {
				_ = m.Respond(reply.Data)
			}
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.Subscribe(wire.DefaultPrefix+".watch.v1.>", func(m *nats.Msg) {
		_ = relay.Publish(prefix+strings.TrimPrefix(m.Subject, wire.DefaultPrefix), m.Data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, strings.NewReader(""), "watch", "service/w", "--nats-url", env.URL, "--prefix", prefix)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch request did not come")
	}
	cancel() // Ctrl-C
	select {
	case o := <-done:
		close(returned)
		if o.code != exitInterrupted {
			t.Fatalf("watch interrupted: exit %d\nstdout: %q\nstderr: %q", o.code, o.stdout, o.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not end after the interrupt")
	}
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch request never reached the server")
	}
	if ws := env.Store.LiveWatches(); len(ws) != 0 {
		t.Fatalf("an interrupted watch left watches registered: %+v", ws)
	}
}
