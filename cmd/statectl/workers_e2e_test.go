package main_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// runWorker runs a worker of principal (password pw) against e's stated until the test ends.
func runWorker(t *testing.T, e *env, principal, pw, id, service string, leases ...string) {
	t.Helper()
	w, err := worker.New(worker.Options{Conn: e.conn(principal, pw), Principal: principal, WorkerID: id, Service: service, HeartbeatInterval: 500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		w.HoldLease(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { // before the connection closes (cleanups run last first)
		cancel()
		<-done
	})
}

// statectl workers lists the live workers from their heartbeats, ordered by principal and worker id,
// every principal's or one's, as a table or JSON; a principal id that breaks its rule is bad usage; a
// principal that is no admin may not read the system namespace.
func TestWorkers(t *testing.T) {
	e := start(t, "")
	runWorker(t, e, "alice", "alice-pw", "viewer-1", "", "leases/a", "leases/b")
	runWorker(t, e, "coordinator", "coord-pw", "tx-1", "transcoder-a")

	co, err := coordinator.New(e.client("coordinator", "coord-pw"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	view, err := co.WatchFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	for {
		a, okA := view.Worker("alice", "viewer-1")
		_, okC := view.Worker("coordinator", "tx-1")
		if okA && okC && a.Status == wire.StatusReady && len(a.Leases) == 2 {
			break
		}
		select {
		case <-view.Changes():
		case <-ctx.Done():
			t.Fatalf("the two workers were not seen ready: %+v", view.Workers())
		}
	}

	lines := strings.Split(strings.TrimSpace(e.ok("workers").stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "PRINCIPAL") {
		t.Fatalf("workers table:\n%s", strings.Join(lines, "\n"))
	}
	for i, want := range [][]string{{"alice", "viewer-1", "alice", "ready", "2", "500ms"}, {"coordinator", "tx-1", "transcoder-a"}} {
		if f := strings.Fields(lines[i+1]); len(f) < len(want) || !slices.Equal(f[:len(want)], want) {
			t.Fatalf("line %d %q, want it to start with %q", i+1, lines[i+1], want)
		}
	}

	var out struct {
		Workers []struct {
			Principal   string   `json:"principal"`
			WorkerID    string   `json:"worker_id"`
			Leases      []string `json:"leases"`
			IntervalMs  int64    `json:"interval_ms"`
			FirstSeenMs int64    `json:"first_seen_ms"`
			ExpiresAtMs int64    `json:"expires_at_ms"`
			Revision    uint64   `json:"revision"`
		} `json:"workers"`
	}
	r := e.ok("workers", "alice", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("workers --json: %v\n%s", err, r.stdout)
	}
	if len(out.Workers) != 1 {
		t.Fatalf("alice's workers: %s", r.stdout)
	}
	w := out.Workers[0]
	if w.Principal != "alice" || w.WorkerID != "viewer-1" || !slices.Equal(w.Leases, []string{"leases/a", "leases/b"}) ||
		w.IntervalMs != 500 || w.FirstSeenMs <= 0 || w.ExpiresAtMs <= w.FirstSeenMs || w.Revision == 0 {
		t.Fatalf("alice's worker: %+v", w)
	}

	if r := e.ok("workers", "nobody"); !slices.Equal(strings.Fields(r.stdout), strings.Fields(lines[0])) {
		t.Fatalf("workers of a principal without any: %q", r.stdout)
	}
	e.fails(2, "USAGE", "workers", "Not/A-Principal")
	e.fails(2, "USAGE", "workers", "a", "b")
	r = e.runWith("", []string{"STATECTL_USER=alice", "STATECTL_PASSWORD=alice-pw"}, "workers")
	if r.code != 1 || !strings.Contains(r.stderr, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED") {
		t.Fatalf("workers as alice: %s", r)
	}
}
