package server

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
)

// startServer starts a Server over a store on disk and an embedded NATS server; the test stops it.
func startServer(t *testing.T) *Server {
	t.Helper()
	ns := natstest.Start(t, natsserver.Options{})
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := New(st, nc, Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Stop waits for what the lanes hold (acks, unwatches, heartbeats) only until its context ends, as it
// waits for any request: a lane stuck on the store never keeps a SIGTERM from finishing.
func TestStopWaitsForBusyLanesOnlyWithinItsContext(t *testing.T) {
	s := startServer(t)
	release := make(chan struct{})
	for _, l := range []*lanes{&s.lanes, &s.hbLanes} {
		running := make(chan struct{})
		l.run("kp.state.v1.coordinator", func() { close(running); <-release })
		<-running
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop with busy lanes returned %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Stop waited for busy lanes past its context")
	}
	close(release)
	// The lanes finish once released: nothing is left running (goleak checks at the end).
	s.lanes.wg.Wait()
	s.hbLanes.wg.Wait()
}

// Stop is bounded by its context even when a lane is full and a run is blocked handing it another
// function (heartbeats keep coming while the disk stalls every commit): closing the lanes must not
// wait for room in a lane that is not draining.
func TestStopWithAFullLaneIsBoundedByItsContext(t *testing.T) {
	s := startServer(t)
	release := make(chan struct{})
	running := make(chan struct{})
	const key = "kp.heartbeat.v1.alice.w1"
	s.hbLanes.run(key, func() { close(running); <-release })
	<-running
	for range cap(s.hbLanes.chs[0]) { // fill the lane behind the busy function
		s.hbLanes.run(key, func() {})
	}
	blocked := make(chan struct{})
	go func() { // the next heartbeat's hand-over waits for room
		defer close(blocked)
		s.hbLanes.run(key, func() {})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	returned := false
	select {
	case err := <-stopped:
		returned = true
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop with a full, busy lane returned %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Stop waited for room in a full lane past its context")
	}
	close(release)
	<-blocked
	if !returned {
		<-stopped
	}
	s.hbLanes.wg.Wait()
}
