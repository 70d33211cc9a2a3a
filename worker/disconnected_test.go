package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// logRecord is a record of a worker's log: its level and message.
type logRecord struct {
	level slog.Level
	msg   string
}

// logTap is a slog handler that hands every record, Debug included, to a channel.
type logTap chan logRecord

func (logTap) Enabled(context.Context, slog.Level) bool { return true }
func (l logTap) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- logRecord{r.Level, r.Message}:
	default: // a test reads what it needs; the rest is dropped
	}
	return nil
}
func (l logTap) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logTap) WithGroup(string) slog.Handler      { return l }

// heartbeatsFailed reads the log until n heartbeats were reported not sent, and returns how many of
// those reports were warnings.
func heartbeatsFailed(t *testing.T, log logTap, n int) (warnings int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for seen := 0; seen < n; {
		select {
		case r := <-log:
			if r.msg == "heartbeat not sent" {
				seen++
				if r.level >= slog.LevelWarn {
					warnings++
				}
			}
		case <-timeout:
			t.Fatalf("%d heartbeats reported not sent within 10 s, want %d", seen, n)
		}
	}
	return warnings
}

// A worker started before NATS is up (examples/internal.WaitForNATS lets it wait), or whose NATS goes
// away, cannot heartbeat: client.Connect turns the reconnect buffer off, so every publish fails. It
// said so with a warning at every heartbeat (several a second with a short interval), burying the
// one line that matters, NATS's own "not reachable". It warns once per outage, and heartbeats again
// as soon as NATS is back.
func TestWorkerWarnsOncePerOutageWhileNATSIsDown(t *testing.T) {
	addr := natstest.ReserveAddr(t) // nothing listens there until the server starts below
	nc, err := client.Connect("nats://"+addr, "alice", nats.RetryOnFailedConnect(true), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	log := make(logTap, 4096)
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-40",
		HeartbeatInterval: 100 * time.Millisecond, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collector())
	if n := heartbeatsFailed(t, log, 5); n != 1 {
		t.Fatalf("5 heartbeats not sent before NATS was up: %d warnings, want 1", n)
	}
	// The collector counts them failed, and none sent.
	if hb := series(t, reg, "worker_heartbeats_total", "tx-40", "result"); hb["failed"] < 5 || hb["sent"] != 0 {
		t.Fatalf("worker_heartbeats_total while NATS is down: %v, want at least 5 failed, none sent", hb)
	}

	// NATS comes up: the heartbeats go out.
	ns := natstest.Start(t, natsserver.Options{Listen: addr})
	watcher, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	beats, err := watcher.SubscribeSync(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-40"))
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := beats.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no heartbeat once NATS was up: %v", err)
	}
	// Heartbeats go out one at a time: once a second one arrived, the first was counted.
	if _, err := beats.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no second heartbeat: %v", err)
	}
	if hb := series(t, reg, "worker_heartbeats_total", "tx-40", "result"); hb["sent"] < 1 {
		t.Fatalf("worker_heartbeats_total once NATS was up: %v, want one sent", hb)
	}

	// NATS goes away again: one more warning, for the new outage.
	for len(log) > 0 {
		<-log
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	if n := heartbeatsFailed(t, log, 5); n != 1 {
		t.Fatalf("5 heartbeats not sent in the second outage: %d warnings, want 1", n)
	}
}
