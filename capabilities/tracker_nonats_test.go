package capabilities_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// logTap is a slog handler that hands every record, Debug included, to a channel.
type logTap chan slog.Record

func (logTap) Enabled(context.Context, slog.Level) bool { return true }
func (l logTap) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r:
	default: // a test reads what it needs; the rest is dropped
	}
	return nil
}
func (l logTap) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logTap) WithGroup(string) slog.Handler      { return l }

// A tracker started before NATS is up (a worker waiting for it, examples/internal.WaitForNATS) fails
// every fetch until it is: with no reconnect buffer (store/client.Connect turns it off) a request
// fails at once. It warned at each retry, "outbound buffer limit exceeded", several times a second at
// first. It warns once, says that NATS is not connected, and fetches as soon as NATS and the media
// server are there.
func TestTrackerWarnsOnceWhileNATSIsDown(t *testing.T) {
	addr := natstest.ReserveAddr(t) // nothing listens there until the server starts below
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(10*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	log := make(logTap, 4096)
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{Logger: slog.New(log), RefetchBackoff: time.Millisecond})
	t.Cleanup(tr.Stop)
	started := make(chan error, 1)
	go func() { started <- tr.Start(ctxT(t)) }()

	warnings, failed := 0, 0
	timeout := time.After(testTimeout)
	for failed < 5 {
		select {
		case r := <-log:
			if r.Message != "capabilities: fetch failed" {
				continue
			}
			failed++
			if r.Level >= slog.LevelWarn {
				warnings++
				var why string
				r.Attrs(func(a slog.Attr) bool {
					why += a.Value.String()
					return true
				})
				if !strings.Contains(why, "not connected") && !strings.Contains(why, nats.ErrConnectionReconnecting.Error()) {
					t.Errorf("the warning says %q; want it to say that NATS is not connected", why)
				}
			}
		case err := <-started:
			t.Fatalf("Start returned %v with no NATS server", err)
		case <-timeout:
			t.Fatalf("%d fetches failed within %v, want 5", failed, testTimeout)
		}
	}
	if warnings != 1 {
		t.Fatalf("5 fetches failed before NATS was up: %d warnings, want 1", warnings)
	}

	ns := natstest.Start(t, natsserver.Options{Listen: addr})
	s := sim.New(connect(t, ns.ClientURL()), sim.Options{Sources: sim.Sources("front-door")})
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := <-started; err != nil {
		t.Fatalf("Start once NATS and the media server are up: %v", err)
	}
	if _, online, ok := tr.Resolve("front-door"); !ok || !online {
		t.Fatalf("front-door resolved %v, online %v", ok, online)
	}
}
