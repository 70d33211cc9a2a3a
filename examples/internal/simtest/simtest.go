// Package simtest sets up what the examples' worker tests share: a state service with principals, a
// media server simulator, and a coordinator's client.
package simtest

import (
	"context"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
)

// Env is a running state service and simulator.
type Env struct {
	*testenv.Env
	Sim   *sim.Sim
	Admin *client.Client // the admin "coordinator"'s client
	Coord *coordinator.Coordinator
}

// Start starts the state service with the admin principal "coordinator", the admin principals
// admins and the media server's principal "media", then the simulator with sources; everything stops
// at the test's cleanup.
func Start(t *testing.T, sources []sim.SourceConfig, admins ...string) *Env {
	t.Helper()
	ps := []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "media"}}
	for _, a := range admins {
		ps = append(ps, policy.Principal{ID: a, Admin: true})
	}
	env := testenv.Start(t, testenv.Options{Principals: ps})
	s := sim.New(env.Connect(t, "media"), sim.Options{Sources: sources, ReadyDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	admin, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Env: env, Sim: s, Admin: admin, Coord: co}
}

// Run runs a worker's Run until the test's cleanup, or until the stop it returns: a graceful stop
// that waits (20 s at most) for Run to return.
func Run(t *testing.T, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = run(ctx) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the worker did not stop within 20 s")
		}
	}
	t.Cleanup(stop)
	return stop
}

// WaitFor polls cond (the simulator's state has no events to await) until it holds, for at most d.
func WaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
