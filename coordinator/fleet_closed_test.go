package coordinator

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// A view whose NATS connection is closed for good follows nothing more: its Changes channel closes,
// so a reader ranging over it ends instead of waiting for ever; the view keeps its last contents.
func TestFleetViewChangesCloseWhenTheConnectionCloses(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	c := coordinatorOn(t, nc, "coordinator")
	heartbeat(t, env.Connect(t, "alice"), "alice", wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", IntervalMs: 60000,
		Status: wire.StatusReady, Leases: []string{}})
	v, err := c.WatchFleet(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	awaitView(t, v, "w1", func() bool { return v.Alive("alice", "w1") })
	nc.Close()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-v.Changes():
			if !ok {
				if !v.Alive("alice", "w1") {
					t.Fatal("the view lost its contents")
				}
				return
			}
		case <-timer.C:
			t.Fatalf("Changes not closed within %v of the connection closing", testTimeout)
		}
	}
}
