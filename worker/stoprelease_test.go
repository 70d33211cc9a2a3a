package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// A worker told to stop (SIGTERM: its ctx ends) with a lease held by an Elector on a goroutine it owns,
// as the package example runs it: it says "draining" while it still lists the lease, the elector
// releases the lease (a DELETE, so a standby takes over at once, not an EXPIRE after the TTL), and
// its last heartbeat says "stopping" and lists no lease.
func TestWorkerStopReleasesItsLeaseBeforeSayingStopping(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "transcoder-a", Admin: true}}})
	admin, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	const ns, key = "service/transcoder-a", "leaders/janitor"
	events := make(chan string, 64)
	cache, err := admin.NewCache(t.Context(), client.CacheOptions{Namespace: ns, KeyPrefix: "leaders/", Handlers: client.Handlers{
		OnPut: func(e wire.Entry) {
			var d struct{ Holder string }
			_ = json.Unmarshal(e.Document, &d)
			events <- "put " + d.Holder
		},
		OnDelete: func(string, uint64) { events <- "delete" },
		OnExpire: func(string, uint64) { events <- "expire" },
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	next := func() string {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no change of the lease within 10 s")
			return ""
		}
	}
	statusAtStop := make(chan string, 2) // each worker's status when its goroutine's context ended
	start := func(id string) (stop func() error) {
		w, err := worker.New(worker.Options{Conn: env.Connect(t, "transcoder-a"), Principal: "transcoder-a", WorkerID: id,
			HeartbeatInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		e, err := lease.NewElector(w.Client(), lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: key, Holder: id, TTL: 5 * time.Second},
			OnStarted: func(ctx context.Context, l *lease.Lease) {
				w.HoldLease(l.Key())
				defer w.DropLease(l.Key())
				<-ctx.Done()
				statusAtStop <- w.Status()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Go("elector", e.Run)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		var once func() error
		var result error
		stopped := false
		once = func() error {
			if !stopped {
				stopped = true
				cancel()
				result = <-done
			}
			return result
		}
		t.Cleanup(func() { _ = once() })
		return once
	}
	beats := heartbeats(t, env, "transcoder-a", "w1")
	stop1 := start("w1")
	if ev := next(); ev != "put w1" {
		t.Fatalf("first change of the lease: %s, want w1's claim", ev)
	}
	for hb := nextBeat(t, beats); !slices.Equal(hb.Leases, []string{key}); hb = nextBeat(t, beats) { // its OnStarted runs
	}
	start("w2") // the standby
	if err := stop1(); err != nil {
		t.Fatalf("Run of the stopped worker: %v", err)
	}
	select {
	case st := <-statusAtStop:
		if st != wire.StatusDraining {
			t.Fatalf("the owned goroutine was told to stop while the worker said %q: it releases its lease before the worker announced draining", st)
		}
	default:
		t.Fatal("the stopped worker's elector did not see its context end")
	}
	if ev := next(); ev != "delete" {
		t.Fatalf("after the leader stopped: %s, want its release (delete), not an expiry", ev)
	}
	if ev := next(); ev != "put w2" {
		t.Fatalf("after the release: %s, want the standby's claim", ev)
	}
	var last wire.Heartbeat
	drainedHolding := false
	for last.Status != wire.StatusStopping {
		last = nextBeat(t, beats)
		if last.Status == wire.StatusDraining && slices.Equal(last.Leases, []string{key}) {
			drainedHolding = true
		}
	}
	if !drainedHolding {
		t.Fatal("no heartbeat said draining while the lease was still held: the worker did not announce its stop first")
	}
	if len(last.Leases) != 0 {
		t.Fatalf("last heartbeat %+v lists leases it released", last)
	}
}
