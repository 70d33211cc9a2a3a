package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// Tests of promises the doc comments make that no other test checked.

// runWorker runs w until the test ends or the returned stop is called, which ends Run's ctx and
// returns Run's error.
func runWorker(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			return errors.New("Run did not return within 15 s of its ctx ending")
		}
	})
	t.Cleanup(func() { _ = stop() })
	return stop
}

// awaitReady waits until w says ready.
func awaitReady(t *testing.T, sub *nats.Subscription) {
	t.Helper()
	for {
		if hb := nextBeat(t, sub); hb.Status == wire.StatusReady {
			return
		}
	}
}

// nextBeat returns the next heartbeat on sub.
func nextBeat(t *testing.T, sub *nats.Subscription) wire.Heartbeat {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no heartbeat: %v", err)
	}
	var hb wire.Heartbeat
	if err := json.Unmarshal(m.Data, &hb); err != nil {
		t.Fatal(err)
	}
	return hb
}

// HealthHandler serves Healthy: 200 "ok" while the worker runs, 503 with the reason otherwise
// (HealthHandler doc); ReadyHandler serves Ready: 200 "ready" while the worker is ready.
func TestHealthHandler(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-h")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-h",
		HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	health, ready := httptest.NewServer(w.HealthHandler()), httptest.NewServer(w.ReadyHandler())
	defer health.Close()
	defer ready.Close()
	probe := func(srv *httptest.Server) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, srv := range []*httptest.Server{health, ready} {
		if code, body := probe(srv); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
			t.Fatalf("before Run: %d %q, want 503 with the reason", code, body)
		}
	}
	stop := runWorker(t, w)
	awaitReady(t, beats)
	if code, body := probe(health); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("while running: %d %q, want 200 ok", code, body)
	}
	if code, body := probe(ready); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Fatalf("ready: %d %q, want 200 ready", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*httptest.Server{health, ready} {
		if code, body := probe(srv); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
			t.Fatalf("after Run: %d %q, want 503 with the reason", code, body)
		}
	}
}

// A Run while one is going on is refused and leaves the running one alone; components and
// goroutines registered while the worker runs take part in its next Run, not this one (Run, Add, Go
// docs).
func TestRegistrationsDuringARunWaitForTheNextRun(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-r")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-r",
		HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w.Add(component{"first", rec})
	stop := runWorker(t, w)
	awaitReady(t, beats)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("a second Run = %v, want it refused", err)
	}
	if err := w.Healthy(); err != nil {
		t.Fatalf("the refused Run disturbed the running one: %v", err)
	}
	w.Add(component{"late", rec})
	w.Go("late goroutine", func(ctx context.Context) error {
		rec.add("late goroutine")
		<-ctx.Done()
		return nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := rec.list(); !slices.Equal(got, []string{"start first", "stop first"}) {
		t.Fatalf("first run: %q, want only the component added before it", got)
	}
	statusesUntilStopping(t, beats) // the first run's heartbeats, up to its last
	stop = runWorker(t, w)
	awaitReady(t, beats)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want := []string{"start first", "stop first", "start first", "start late", "late goroutine", "stop late", "stop first"}
	if got := rec.list(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// A lease change is announced at once, not at the next interval, and heartbeats list the leases in
// key order, as Leases does (HoldLease, Leases docs).
func TestHoldLeaseIsAnnouncedAtOnceInKeyOrder(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-l")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-l",
		HeartbeatInterval: time.Minute}) // no periodic heartbeat during the test
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	awaitReady(t, beats)
	w.HoldLease("leases/b")
	w.HoldLease("leases/a")
	w.HoldLease("leases/c")
	want := []string{"leases/a", "leases/b", "leases/c"}
	for {
		hb := nextBeat(t, beats)
		if len(hb.Leases) == 3 {
			if !slices.Equal(hb.Leases, want) {
				t.Fatalf("heartbeat lists %q, want %q (key order)", hb.Leases, want)
			}
			break
		}
	}
	if got := w.Leases(); !slices.Equal(got, want) {
		t.Fatalf("Leases() = %q, want %q", got, want)
	}
	w.DropLease("leases/b")
	for hb := nextBeat(t, beats); len(hb.Leases) != 2; hb = nextBeat(t, beats) {
	}
	if got := w.Leases(); !slices.Equal(got, []string{"leases/a", "leases/c"}) {
		t.Fatalf("Leases() after DropLease = %q", got)
	}
}

// Service defaults to Principal, and heartbeats go out under Prefix; Status is starting before the
// first Run (Options, Status docs).
func TestServiceDefaultAndPrefix(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "alice")
	sub, err := nc.SubscribeSync("acme.heartbeat.v1.alice.tx-p")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-p", Prefix: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Status() != wire.StatusStarting || w.ID() != "tx-p" || w.Principal() != "alice" || w.Conn() != nc ||
		w.Client() == nil || w.Logger() == nil {
		t.Fatalf("before Run: status %q id %q principal %q", w.Status(), w.ID(), w.Principal())
	}
	runWorker(t, w)
	hb := nextBeat(t, sub)
	if hb.WorkerID != "tx-p" || hb.Service != "alice" || hb.IntervalMs != 1000 {
		t.Fatalf("heartbeat %+v, want service alice (the principal) and the default 1 s interval", hb)
	}
}

// Heartbeats go out every interval while the components stop, saying "draining", so a slow stop does
// not let the worker's entry expire (Run doc).
func TestWorkerHeartbeatsDrainingWhileComponentsStop(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	beats := heartbeats(t, env, "alice", "tx-d")
	w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-d",
		HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slow := stuckStop{stopping: make(chan struct{}), release: make(chan struct{})}
	w.Add(slow)
	stop := runWorker(t, w)
	awaitReady(t, beats)
	res := make(chan error, 1)
	go func() { res <- stop() }()
	<-slow.stopping
	for draining := 0; draining < 4; { // four intervals and more: three would expire the entry
		switch hb := nextBeat(t, beats); hb.Status {
		case wire.StatusDraining:
			draining++
		case wire.StatusReady:
		default:
			t.Fatalf("heartbeat %+v while a component stops, want draining", hb)
		}
	}
	close(slow.release)
	if err := <-res; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for hb := nextBeat(t, beats); hb.Status != wire.StatusStopping; hb = nextBeat(t, beats) {
		if hb.Status != wire.StatusDraining {
			t.Fatalf("heartbeat %+v after the stop, want draining then stopping", hb)
		}
	}
}
