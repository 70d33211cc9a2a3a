package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// pollUntil polls cond (a count no event announces: goroutines, subscriptions) until it holds, or
// fails the test after 30 s with cond's last description.
func pollUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Poll(t, 30*time.Second, what, cond)
}

// A worker that lives through hundreds of connection cuts, and runs again after each of several
// stops, sends its heartbeats in sequence (none twice), one at once after each reconnect, is healthy
// after the last cycle, and holds as many goroutines and subscriptions as after its first cycles.
func TestWorkerLongLifeLeavesNothingBehind(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watcher := env.Connect(t, "coordinator")
	beats, err := watcher.SubscribeSync(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-lr"))
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := client.Connect(env.URL, "alice", nats.ReconnectWait(5*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A long interval: the heartbeats seen come from the reconnects (and the status changes).
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-lr", HeartbeatInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	jobs := make(chan struct{}, 64)
	w.Go("job", func(ctx context.Context) error {
		jobs <- struct{}{}
		<-ctx.Done()
		return nil
	})

	var last int64
	// nextBeat returns the next heartbeat, checking that its sequence is above every one before.
	nextBeat := func(what string) wire.Heartbeat {
		t.Helper()
		msg, err := beats.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: no heartbeat: %v", what, err)
		}
		var hb wire.Heartbeat
		if err := json.Unmarshal(msg.Data, &hb); err != nil {
			t.Fatal(err)
		}
		if hb.Sequence <= last {
			t.Fatalf("%s: heartbeat sequence %d after %d", what, hb.Sequence, last)
		}
		last = hb.Sequence
		return hb
	}
	// awaitBeat reads heartbeats until one with status.
	awaitBeat := func(what, status string) {
		t.Helper()
		for nextBeat(what).Status != status {
		}
	}
	type run struct {
		stop context.CancelFunc
		done chan error
	}
	start := func() run {
		rctx, stop := context.WithCancel(ctx)
		r := run{stop, make(chan error, 1)}
		go func() { r.done <- w.Run(rctx) }()
		select {
		case <-jobs:
		case <-ctx.Done():
			t.Fatal("the worker did not start")
		}
		awaitBeat("start", wire.StatusReady)
		return r
	}
	end := func(r run) {
		t.Helper()
		r.stop()
		select {
		case err := <-r.done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("Run did not return")
		}
		awaitBeat("stop", wire.StatusStopping)
	}

	r := start()
	defer func() { r.stop(); <-r.done }()
	var goroutines, subs int
	const cycles = 200
	for i := range cycles {
		if i == 10 {
			runtime.GC()
			goroutines, subs = runtime.NumGoroutine(), nc.NumSubscriptions()
		}
		if i%25 == 24 {
			end(r)
			r = start()
			continue
		}
		// A cut: the worker heartbeats as soon as it is back.
		if !natstest.Kick(env.NATS, nc) {
			t.Fatalf("cycle %d: no connection to cut", i)
		}
		hb := nextBeat(fmt.Sprintf("cycle %d", i))
		if hb.Status != wire.StatusReady {
			t.Fatalf("cycle %d: heartbeat with status %q", i, hb.Status)
		}
	}
	// No heartbeat more than the events asked for: the next comes from a change.
	w.HoldLease("leases/lr")
	if hb := nextBeat("a lease"); len(hb.Leases) != 1 {
		t.Fatalf("heartbeat after HoldLease lists %v", hb.Leases)
	}
	if err := w.Healthy(); err != nil {
		t.Errorf("Healthy after the cycles: %v", err)
	}
	pollUntil(t, "subscriptions", func() (bool, string) {
		n := nc.NumSubscriptions()
		return n == subs, fmt.Sprintf("%d subscriptions (cycle 10: %d)", n, subs)
	})
	pollUntil(t, "goroutines", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= goroutines+2, fmt.Sprintf("%d goroutines (cycle 10: %d)", n, goroutines)
	})
}

// A worker told to stop while its connection is cut again and again returns within its StopTimeout
// bound, and leaves no goroutine behind.
func TestWorkerStopDuringReconnectStorm(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc, err := client.Connect(env.URL, "alice", nats.ReconnectWait(time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	admin, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	// The state server starts its heartbeat lanes with the first heartbeat it takes: once a first
	// worker's entry is written, they run, and the baseline is taken.
	warm, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-warm"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- warm.Run(wctx) }()
	pollUntil(t, "the worker's entry", func() (bool, string) {
		_, err := admin.Get(t.Context(), "system", "workers/alice/tx-warm")
		return err == nil, fmt.Sprint(err)
	})
	wcancel()
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	for i := range 20 {
		w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-storm",
			HeartbeatInterval: 100 * time.Millisecond, StopTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		jobs := make(chan struct{})
		w.Go("job", func(ctx context.Context) error {
			close(jobs)
			<-ctx.Done()
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-jobs
		endStorm := natstest.Storm(env.NATS, time.Duration(i%4)*time.Millisecond, nc)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("cycle %d: Run = %v", i, err)
			}
		case <-time.After(8 * time.Second):
			t.Fatalf("cycle %d: Run did not return within 8 s of its context ending (StopTimeout 300 ms)", i)
		}
		endStorm()
	}
	pollUntil(t, "goroutines", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= goroutines+2, fmt.Sprintf("%d goroutines (before: %d)", n, goroutines)
	})
}
