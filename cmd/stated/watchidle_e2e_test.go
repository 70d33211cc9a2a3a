package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// setWatchIdleMs writes watch_idle_ms into the [nats] section of s's configuration file.
func setWatchIdleMs(t *testing.T, s *e2e.Stated, ms int64) {
	t.Helper()
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(raw), "[nats]\n", fmt.Sprintf("[nats]\nwatch_idle_ms = %d\n", ms), 1)
	if conf == string(raw) {
		t.Fatalf("no [nats] section in\n%s", raw)
	}
	if err := os.WriteFile(s.ConfigPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
}

// metricValue is the value of the sample line that starts with sample (a name with its labels, as
// /metrics spells it), "" when there is none.
func metricValue(t *testing.T, s *e2e.Stated, sample string) string {
	t.Helper()
	for line := range strings.SplitSeq(metricsText(t, s), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// TestE2EIdleWatchOnExternalNATSFreesItsSlot: an external NATS server cannot tell stated that a
// watch's subscriber is gone, so the watches of a client killed on a quiet namespace held their
// principal's slots for ever: a worker that crash-loops (a new watch id each start) filled
// max_watches_per_principal, and the principal could no longer watch at all. With watch_idle_ms, a
// watch no request names for that long is closed with ACK_TIMEOUT, counted and logged, and its slot
// is free again.
func TestE2EIdleWatchOnExternalNATSFreesItsSlot(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	s := e2e.NewStated(t, e2e.Config{Principals: principals, NATSURL: ns.ClientURL(), Extra: "[bounds]\nmax_watches_per_principal = 2\n"})
	setWatchIdleMs(t, s, 2000)
	s.Start()
	dial := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(wire.InboxPrefix("alice")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	watch := func(nc *nats.Conn, id string) wire.Result {
		t.Helper()
		if _, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "alice", id)); err != nil {
			t.Fatal(err)
		}
		return request(t, nc, "alice", wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":"user/alice"}`, id))
	}
	crashed := dial()
	for _, id := range []string{"cache-1", "cache-2"} {
		if r := watch(crashed, id); !r.OK {
			t.Fatalf("watch %s: %+v", id, r)
		}
	}
	if v := metricValue(t, s, "state_watches"); v != "2" {
		t.Fatalf("state_watches = %q, want 2", v)
	}
	crashed.Close() // killed: no unwatch

	next := dial()
	if r := watch(next, "cache-3"); r.OK || r.Error.Code != wire.CodeResourceExhausted {
		t.Fatalf("a third watch while two are held: %+v", r)
	}
	deadline := time.Now().Add(timeout)
	for metricValue(t, s, "state_watches") != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("the killed client's watches still hold their slots:\n%s\n%s", metricsText(t, s), s.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := metricValue(t, s, "state_watches_idle_closed_total"); v != "2" {
		t.Fatalf("state_watches_idle_closed_total = %q, want 2", v)
	}
	if v := metricValue(t, s, `state_watch_closures_total{reason="ACK_TIMEOUT"}`); v != "2" {
		t.Fatalf("ACK_TIMEOUT closures = %q, want 2", v)
	}
	if r := watch(next, "cache-3"); !r.OK {
		t.Fatalf("watch once the slots are free: %+v", r)
	}
	logs := s.Logs()
	for _, id := range []string{"cache-1", "cache-2"} {
		if n := strings.Count(logs, "watch_id="+id); n != 1 {
			t.Fatalf("%d log lines name %s, want 1:\n%s", n, id, logs)
		}
	}
	// 2,000 ms is below what the shipped clients' checks need: stated said so at start.
	if !strings.Contains(logs, "watch_idle_ms 2000 is below") {
		t.Fatalf("no warning about the short bound:\n%s", logs)
	}
}

// TestE2EWatchIdleMsOutOfRangeIsRefused: stated does not start on a watch_idle_ms outside 0 and
// 1,000 to 86,400,000, and says which key and range.
func TestE2EWatchIdleMsOutOfRangeIsRefused(t *testing.T) {
	bin := e2e.Binary(t, "stated")
	for _, v := range []string{"999", "-1", "86400001"} {
		dir := t.TempDir()
		conf := filepath.Join(dir, "stated.toml")
		body := fmt.Sprintf("data_dir = %q\nhttp_listen = \"127.0.0.1:0\"\n\n[nats]\nlisten = \"127.0.0.1:0\"\nwatch_idle_ms = %s\n",
			filepath.Join(dir, "data"), v)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		out, err := exec.CommandContext(ctx, bin, "--config", conf).CombinedOutput()
		late := ctx.Err()
		cancel()
		if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 2 || late != nil {
			t.Errorf("watch_idle_ms = %s: %v, want exit 2 at once\n%s", v, err, out)
		}
		if !strings.Contains(string(out), "watch_idle_ms must be 0 (off) or from 1000 to 86400000, got "+v) {
			t.Errorf("watch_idle_ms = %s: the error does not say what is wrong:\n%s", v, out)
		}
	}
}
