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

// A snapshot that nothing can confirm any more is not shown as current. Once the tracker's NATS
// connection is closed for good, its snapshot is stale (every source offline) and a wait, even one
// the last snapshot meets, answers ErrTrackerStopped: the snapshot stayed current for ever (Stale
// false past StaleAfter, sources online, a new WaitReady answering READY), so a reconciler reading
// Current took a publication the media server may long have ended for active. After Stop, the
// snapshot stays as it was, but a wait does not answer from it either.
func TestTrackerSnapshotOfAClosedConnectionIsNotCurrent(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, nc := e.tracker(capabilities.TrackerOptions{}, nil)
	e.publish(e.commands("alice"), "browser-h264-720p")
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p"); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	// The tracker learns of the close on its own goroutine: a wait ends once it has.
	if err := tr.WaitFor(ctxT(t), func(*capabilities.ServerCapabilities) bool { return false }); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("WaitFor = %v, want ErrTrackerStopped with nats.ErrConnectionClosed", err)
	}
	if !tr.Stale() {
		t.Error("Stale() = false after the connection closed for good")
	}
	if _, online, ok := tr.Resolve("front-door"); !ok || online {
		t.Errorf("Resolve = online %v, ok %v; want the source, offline", online, ok)
	}
	if src, _ := tr.Current().Source("front-door"); src.Online {
		t.Error("Current shows front-door online after the connection closed for good")
	}
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p"); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("WaitReady after the close = %v, want ErrTrackerStopped with nats.ErrConnectionClosed", err)
	}

	tr2, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	if _, err := tr2.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p"); err != nil {
		t.Fatal(err)
	}
	tr2.Stop()
	if _, err := tr2.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p"); !errors.Is(err, capabilities.ErrTrackerStopped) {
		t.Errorf("WaitReady after Stop = %v, want ErrTrackerStopped", err)
	}
	if tr2.Stale() {
		t.Error("Stop made the snapshot stale; its doc says it stays as it was")
	}
	if _, online, _ := tr2.Resolve("front-door"); !online {
		t.Error("Stop changed the snapshot; its doc says it stays readable as it was")
	}
}
