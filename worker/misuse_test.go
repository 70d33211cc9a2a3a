package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/worker"
)

// A nil component or goroutine function is a programming mistake that Run used to meet with a panic:
// a nil component's Start on Run's own goroutine, and a nil goroutine function on a goroutine of its
// own, after the worker had announced "ready", taking the whole process down. Run refuses both with
// an error naming the culprit, before it starts anything or publishes a heartbeat.
func TestWorkerRunRefusesNilRegistrations(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	// Any heartbeat on alice's subjects would say the worker started despite the mistake.
	watcher := env.Connect(t, "coordinator")
	beats, err := watcher.SubscribeSync("kp.heartbeat.v1.alice.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := env.Connect(t, "alice")
	for _, tc := range []struct {
		name     string
		register func(w *worker.Worker, started *bool)
		want     string
	}{
		{"nil component", func(w *worker.Worker, started *bool) {
			w.Add(startFlag{started})
			w.Add(nil)
		}, "component 2"},
		{"nil goroutine", func(w *worker.Worker, started *bool) {
			w.Add(startFlag{started})
			w.Go("elector", nil)
		}, `"elector"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := worker.New(worker.Options{Conn: nc, Principal: "alice", WorkerID: "tx-nil"})
			if err != nil {
				t.Fatal(err)
			}
			started := false
			tc.register(w, &started)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = w.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error naming %s", err, tc.want)
			}
			if started {
				t.Fatal("Run started a component before refusing the nil registration")
			}
			if err := w.Healthy(); err == nil {
				t.Fatal("a worker whose Run was refused reports itself healthy")
			}
		})
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := beats.NextMsg(0); err != nats.ErrTimeout {
		t.Fatalf("a refused Run published a heartbeat: %v %v", m, err)
	}
}

// startFlag is a component that records that it was started.
type startFlag struct{ started *bool }

func (s startFlag) Start(context.Context) error { *s.started = true; return nil }
func (startFlag) Stop()                         {}
