package capabilities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// A tracker whose NATS connection is closed for good follows nothing more: a Start still waiting for
// the first snapshot returns, and so does a wait, with an error saying so, instead of waiting for a
// context that may have no deadline (a worker's run context).
func TestTrackerEndsWhenItsConnectionCloses(t *testing.T) {
	t.Run("Start", func(t *testing.T) {
		url := startNATS(t) // no media server: Start retries its fetch
		nc := connect(t, url)
		tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{RefetchBackoff: 5 * time.Millisecond})
		t.Cleanup(tr.Stop)
		fetched := make(chan struct{}, 1)
		capabilities.SetFetchHook(tr, func(uint64, error) {
			select {
			case fetched <- struct{}{}:
			default:
			}
		})
		ctx, cancel := context.WithCancel(context.Background()) // no deadline, as a worker's
		defer cancel()
		started := make(chan error, 1)
		go func() { started <- tr.Start(ctx) }()
		<-fetched // Start is retrying
		nc.Close()
		select {
		case err := <-started:
			if !errors.Is(err, capabilities.ErrTrackerStopped) || !errors.Is(err, nats.ErrConnectionClosed) {
				t.Fatalf("Start = %v, want ErrTrackerStopped with nats.ErrConnectionClosed", err)
			}
		case <-time.After(testTimeout):
			cancel()
			t.Fatalf("Start did not return within %v of its connection closing (returned %v after cancel)", testTimeout, <-started)
		}
	})
	t.Run("StartOnAClosedConnection", func(t *testing.T) {
		nc := connect(t, startNATS(t))
		nc.Close()
		tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{})
		t.Cleanup(tr.Stop)
		if err := tr.Start(ctxT(t)); !errors.Is(err, capabilities.ErrTrackerStopped) || !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Start = %v, want ErrTrackerStopped with nats.ErrConnectionClosed", err)
		}
		if err := tr.WaitGeneration(ctxT(t), 1); !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("a wait after Start failed = %v, want it to say the connection is closed", err)
		}
	})
	t.Run("WaitReady", func(t *testing.T) {
		e := newEnv(t, sim.Options{ReadyDelay: time.Hour})
		tr, nc := e.tracker(capabilities.TrackerOptions{}, nil)
		e.publish(e.commands("alice"), "browser-h264-720p")
		if _, err := tr.WaitVariant(ctxT(t), "front-door", "video", "browser-h264-720p", capabilities.StatePending); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan error, 1)
		go func() {
			_, err := tr.WaitReady(ctx, "front-door", "video", "browser-h264-720p")
			res <- err
		}()
		nc.Close()
		select {
		case err := <-res:
			if !errors.Is(err, capabilities.ErrTrackerStopped) || !errors.Is(err, nats.ErrConnectionClosed) {
				t.Fatalf("WaitReady = %v, want ErrTrackerStopped with nats.ErrConnectionClosed", err)
			}
		case <-time.After(testTimeout):
			cancel()
			t.Fatalf("WaitReady did not return within %v of the connection closing (returned %v after cancel)", testTimeout, <-res)
		}
		// The last snapshot stays readable.
		if _, _, ok := tr.Resolve("front-door"); !ok {
			t.Error("the last snapshot is gone")
		}
	})
}
