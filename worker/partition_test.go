package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// splitEnv is a state server on the near node of a two-node cluster with a route that parts.
type splitEnv struct{ *splittest.Env }

func startSplit(t *testing.T) *splitEnv {
	return &splitEnv{splittest.Start(t, splittest.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "alice"}}})}
}

// The tests of this file run the state server on node 1 of a two-node NATS cluster whose route a
// test can cut (or freeze) and mend, the worker on node 0 (the far side) and an admin watcher of
// system/workers/ on node 1. Through a partition the worker's connection stays up (its pings to its
// own node succeed) and its heartbeats reach no state server: a cut route leaves the far node without
// interest in them, a frozen one drops them.

// conn connects principal to node only.
func (e *splitEnv) conn(t *testing.T, principal string, node int) *nats.Conn {
	t.Helper()
	return e.Connect(t, node, principal, client.Connect)
}

// workerEvents follows system/workers/ as the admin on the near node: every PUT's status, and an
// EXPIRE as Status "expired".
func workerEvents(t *testing.T, e *splitEnv) chan wire.WorkerStatus {
	t.Helper()
	admin, err := client.New(e.conn(t, "coordinator", splittest.Near), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan wire.WorkerStatus, 256)
	cache, err := admin.NewCache(t.Context(), client.CacheOptions{Namespace: "system", KeyPrefix: "workers/", Handlers: client.Handlers{
		OnPut: func(e wire.Entry) {
			var st wire.WorkerStatus
			if json.Unmarshal(e.Document, &st) == nil {
				ch <- st
			}
		},
		OnExpire: func(string, uint64) { ch <- wire.WorkerStatus{Status: "expired"} },
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return ch
}

// A worker on the far side of a route partition: its heartbeats reach no state server, its entry
// expires there, and Ready says so, while Healthy (liveness) stays nil: its connection is up, and its
// heartbeats go out to its node. Run goes on through the partition, and once the route is back the
// next heartbeat brings the entry back with one PUT, status ready and its lease listed, and Ready is
// nil again.
func TestWorkerAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			e := startSplit(t)
			events := workerEvents(t, e)
			const interval = 100 * time.Millisecond
			w, err := worker.New(worker.Options{Conn: e.conn(t, "alice", splittest.Far), Principal: "alice", WorkerID: "w",
				HeartbeatInterval: interval, StopTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			w.HoldLease("leases/a")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			waitStatus(t, events, func(s wire.WorkerStatus) bool { return s.Status == wire.StatusReady })
			natstest.Poll(t, 10*time.Second, "Ready before the partition", func() (bool, string) {
				return w.Ready() == nil, fmt.Sprint(w.Ready())
			})

			p.Apart(e.Env, t)
			waitStatus(t, events, func(s wire.WorkerStatus) bool { return s.Status == "expired" })
			natstest.Poll(t, 10*time.Second, "Ready to report heartbeats that reach no state server", func() (bool, string) {
				return w.Ready() != nil, "ready"
			})
			t.Logf("Ready across the partition: %v", w.Ready())
			// Alive: restarting the worker would not bring the state server back.
			if err := w.Healthy(); err != nil {
				t.Fatalf("Healthy across the partition: %v, want nil (a liveness check)", err)
			}
			if !w.Conn().IsConnected() {
				t.Fatal("the worker's connection is down: not a route partition")
			}

			e.Mend(t)
			st := waitStatus(t, events, func(wire.WorkerStatus) bool { return true })
			if st.Status != wire.StatusReady || !slices.Equal(st.Leases, []string{"leases/a"}) {
				t.Fatalf("the first entry after the mend: %+v, want ready with leases/a", st)
			}
			natstest.Poll(t, 10*time.Second, "Ready once the route is back", func() (bool, string) {
				err := w.Ready()
				if err == nil {
					return true, ""
				}
				return false, err.Error()
			})
			select {
			case err := <-done:
				t.Fatalf("Run returned across a partition that healed: %v", err)
			default:
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			// After the one PUT that brought the entry back, the next change is the stop (draining, or
			// stopping when the server took the later heartbeat in its place).
			st = waitStatus(t, events, func(wire.WorkerStatus) bool { return true })
			if st.Status != wire.StatusDraining && st.Status != wire.StatusStopping {
				t.Fatalf("after the mend's PUT: %+v, want the stop (one PUT brings the entry back)", st)
			}
		})
	}
}

// A worker told to stop while a route partition cuts it off from the state server: Run returns
// within its StopTimeout (with an error saying so when a component's stop waits on the store: the
// controller's cache unwatches, which times out across a frozen route), and it warns that its last
// heartbeats reached no state server. The controller's Stop, left running when it takes longer, ends
// on its own.
func TestWorkerStopsWithinStopTimeoutAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			e := startSplit(t)
			log := make(logTap, 1024)
			const stopTimeout = time.Second
			w, err := worker.New(worker.Options{Conn: e.conn(t, "alice", splittest.Far), Principal: "alice", WorkerID: "w",
				HeartbeatInterval: 100 * time.Millisecond, StopTimeout: stopTimeout, Logger: slog.New(log)})
			if err != nil {
				t.Fatal(err)
			}
			ctrl, err := reconciler.New(w.Client(), reconciler.Func(func(context.Context, reconciler.Request) (reconciler.Result, error) {
				return reconciler.Result{}, nil
			}), reconciler.Options{Namespace: "user/alice", CheckInterval: 100 * time.Millisecond, StopTimeout: stopTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer ctrl.Stop() // waits for a Stop that outlived Run
			w.Add(ctrl)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			natstest.Poll(t, 10*time.Second, "the worker ready", func() (bool, string) {
				return w.Ready() == nil, fmt.Sprint(w.Ready())
			})
			p.Apart(e.Env, t)
			natstest.Poll(t, 10*time.Second, "Ready to report the partition", func() (bool, string) {
				return w.Ready() != nil, "ready"
			})
			cancel()
			start := time.Now()
			select {
			case err := <-done:
				t.Logf("Run across a partition: %v after %v", err, time.Since(start))
			case <-time.After(stopTimeout + 5*time.Second):
				t.Fatalf("Run did not return within %v of its StopTimeout %v", 5*time.Second, stopTimeout)
			}
			for {
				select {
				case r := <-log:
					if strings.HasPrefix(r.msg, "stopped while no state server answered") && r.level == slog.LevelWarn {
						return
					}
				default:
					t.Fatal("the worker stopped across a partition without warning that its last heartbeats reached no state server")
				}
			}
		})
	}
}
