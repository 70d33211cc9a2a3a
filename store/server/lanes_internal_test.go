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

// Stop waits for what the lanes hold (acks, unwatches, heartbeats) only until its context ends, as it
// waits for any request: a lane stuck on the store never keeps a SIGTERM from finishing.
func TestStopWaitsForBusyLanesOnlyWithinItsContext(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := New(st, nc, Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
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
