package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
	"github.com/nats-io/nats.go"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

type component struct {
	name string
	rec  *recorder
}

func (c component) Start(context.Context) error { c.rec.add("start " + c.name); return nil }
func (c component) Stop()                       { c.rec.add("stop " + c.name) }

// statusUpdates follows system/workers/ as the admin, returning each worker status document seen.
func statusUpdates(t *testing.T, env *testenv.Env) chan wire.WorkerStatus {
	t.Helper()
	admin, _ := client.New(env.Connect(t, "coordinator"), "coordinator")
	ch := make(chan wire.WorkerStatus, 64)
	cache, err := admin.NewCache(t.Context(), client.CacheOptions{Namespace: "system", KeyPrefix: "workers/", Handlers: client.Handlers{
		OnPut: func(e wire.Entry) {
			var st wire.WorkerStatus
			if json.Unmarshal(e.Document, &st) == nil {
				ch <- st
			}
		},
		OnExpire: func(key string, _ uint64) { ch <- wire.WorkerStatus{Status: "expired:" + key} },
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return ch
}

func waitStatus(t *testing.T, ch chan wire.WorkerStatus, ok func(wire.WorkerStatus) bool) wire.WorkerStatus {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case st := <-ch:
			if ok(st) {
				return st
			}
		case <-timeout:
			t.Fatalf("status not seen within 10 s")
		}
	}
}

func TestWorkerLifecycle(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	updates := statusUpdates(t, env)
	rec := &recorder{}
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-1", Service: "transcoder-a",
		HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Add(component{"a", rec})
	w.Add(component{"b", rec})
	owned := make(chan struct{})
	w.Go("owned", func(ctx context.Context) error {
		close(owned)
		<-ctx.Done()
		rec.add("goroutine done")
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-owned
	st := waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.Status == wire.StatusReady })
	if st.WorkerID != "tx-1" || st.Principal != "alice" || st.Service != "transcoder-a" || st.IntervalMs != 200 {
		t.Fatalf("status %+v", st)
	}
	if err := w.Healthy(); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	w.HoldLease("leases/front-door-video-720p")
	waitStatus(t, updates, func(s wire.WorkerStatus) bool {
		return slices.Equal(s.Leases, []string{"leases/front-door-video-720p"})
	})
	w.DropLease("leases/front-door-video-720p")
	waitStatus(t, updates, func(s wire.WorkerStatus) bool { return len(s.Leases) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := rec.list(); !slices.Equal(got, []string{"start a", "start b", "goroutine done", "stop b", "stop a"}) {
		t.Fatalf("order %v", got)
	}
	waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.Status == wire.StatusStopping })
	// Without heartbeats the entry expires: admin watchers see one EXPIRE.
	waitStatus(t, updates, func(s wire.WorkerStatus) bool { return s.Status == "expired:workers/alice/tx-1" })
	if err := w.Healthy(); err == nil {
		t.Fatalf("a stopped worker is healthy")
	}
}

func TestWorkerStopsWhenAnOwnedGoroutineFails(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-2"})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	w.Go("failing", func(context.Context) error { return boom })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Run(ctx); !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want boom", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Run waited for the context instead of stopping on the failure")
	}
}

func TestWorkerOptionsValidated(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "alice")
	for _, o := range []worker.Options{
		{Principal: "alice", WorkerID: "w"},
		{Conn: nc, Principal: "Alice", WorkerID: "w"},
		{Conn: nc, Principal: "alice", WorkerID: "w.1"},
		{Conn: nc, Principal: "alice", WorkerID: "w", HeartbeatInterval: 50 * time.Millisecond},
	} {
		if _, err := worker.New(o); err == nil {
			t.Fatalf("options %+v accepted", o)
		}
	}
}

// blockedStart is a component whose Start waits until release is closed (a tracker waiting for the
// media server, a controller whose first watch is retried).
type blockedStart struct{ release chan struct{} }

func (b blockedStart) Start(ctx context.Context) error {
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return nil
}
func (blockedStart) Stop() {}

// A worker whose components take long to start keeps heartbeating "starting" every interval, so its
// entry does not expire while the process is alive; then it says "ready".
func TestWorkerHeartbeatsWhileComponentsStart(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-3")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-3", HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	w.Add(blockedStart{release})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	next := func() wire.Heartbeat { t.Helper(); return nextBeat(t, beats) }
	for i := range 4 { // four intervals and more: three would expire the entry
		if hb := next(); hb.Status != wire.StatusStarting {
			t.Fatalf("heartbeat %d while starting: %+v", i, hb)
		}
	}
	close(release)
	for hb := next(); hb.Status != wire.StatusReady; hb = next() {
		if hb.Status != wire.StatusStarting {
			t.Fatalf("after the start: %+v", hb)
		}
	}
}

// heartbeats subscribes to the heartbeats of principal's workerID.
func heartbeats(t *testing.T, env *testenv.Env, principal, workerID string) *nats.Subscription {
	t.Helper()
	nc := env.Connect(t, principal)
	sub, err := nc.SubscribeSync(wire.HeartbeatSubject(wire.DefaultPrefix, principal, workerID))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// statusesUntilStopping returns the statuses of the heartbeats on sub up to the first "stopping".
func statusesUntilStopping(t *testing.T, sub *nats.Subscription) []string {
	t.Helper()
	var statuses []string
	for {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("heartbeats %q, then none: %v (want the last to say stopping)", statuses, err)
		}
		var hb wire.Heartbeat
		if err := json.Unmarshal(m.Data, &hb); err != nil {
			t.Fatal(err)
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != hb.Status {
			statuses = append(statuses, hb.Status)
		}
		if hb.Status == wire.StatusStopping {
			return statuses
		}
	}
}

// runUntilStarting runs w in the background and waits until entered is closed (a component's Start
// was called); it returns the channel that gets Run's result.
func runUntilStarting(t *testing.T, ctx context.Context, w *worker.Worker, entered <-chan struct{}) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the component's Start was not called")
	}
	return done
}
