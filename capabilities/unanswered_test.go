package capabilities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/natstest"
)

// A command that makes something, sent and never answered (its reply lost with the client's
// connection, or the connection closed while it waited), may still have been carried out by the
// media server: SubscribeOrUndo and StartPublicationOrUndo cannot end what they never learn the id
// of, but they do not drop it silently either. onUndoErr hears of it, saying that the subscription
// or publication may be left behind, whether the caller had given up (the follow-up found no
// answer) or was still waiting (it got the transport error too).
func TestOrUndoReportsACommandNeverAnswered(t *testing.T) {
	// given up on, then the reply lost: the client's link to NATS is cut while the media server
	// carries the subscribe out, and its answer goes nowhere.
	t.Run("reply lost", func(t *testing.T) {
		e := newEnv(t, sim.Options{})
		link := natstest.NewCutLink(t, strings.TrimPrefix(e.url, "nats://"))
		bob, err := capabilities.NewCommands(connect(t, link.URL()), "bob", capabilities.WithRequestTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		capabilities.SetLateAnswerWait(bob, 500*time.Millisecond)
		e.sim.SetCommandDelay(200 * time.Millisecond)
		undoErrs := make(chan error, 4)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			waitUntil(t, "the subscribe under way", func() bool { return e.sim.Pending() > 0 })
			cancel()
		}()
		_, err = bob.SubscribeOrUndo(ctx, capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video"},
			func(err error) { undoErrs <- err })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("SubscribeOrUndo given up on: %v, want context.Canceled", err)
		}
		link.Cut()
		waitUntil(t, "the subscribe carried out", func() bool { return e.sim.Pending() == 0 && len(e.sim.Subscriptions()) == 1 })
		link.Mend()
		expectLeftBehindReport(t, undoErrs, "subscri")
	})
	// given up on, then the connection closed (a worker stopping): the late answer cannot come.
	t.Run("closed after giving up", func(t *testing.T) {
		e := newEnv(t, sim.Options{})
		nc := connect(t, e.url)
		alice, err := capabilities.NewCommands(nc, "alice")
		if err != nil {
			t.Fatal(err)
		}
		e.sim.SetCommandDelay(200 * time.Millisecond)
		undoErrs := make(chan error, 4)
		short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err = alice.StartPublicationOrUndo(short, startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled),
			func(err error) { undoErrs <- err })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("StartPublicationOrUndo past its deadline: %v, want context.DeadlineExceeded", err)
		}
		nc.Close()
		waitUntil(t, "the start carried out", func() bool { return e.sim.Pending() == 0 && len(e.sim.Publications()) == 1 })
		expectLeftBehindReport(t, undoErrs, "publication")
	})
	// the connection closed while the caller still waits: it gets the error, and onUndoErr the report.
	t.Run("closed while waiting", func(t *testing.T) {
		e := newEnv(t, sim.Options{})
		nc := connect(t, e.url)
		alice, err := capabilities.NewCommands(nc, "alice")
		if err != nil {
			t.Fatal(err)
		}
		e.sim.SetCommandDelay(200 * time.Millisecond)
		undoErrs := make(chan error, 4)
		go func() {
			waitUntil(t, "the start under way", func() bool { return e.sim.Pending() > 0 })
			nc.Close()
		}()
		_, err = alice.StartPublicationOrUndo(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled),
			func(err error) { undoErrs <- err })
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("StartPublicationOrUndo whose connection closed: %v, want nats.ErrConnectionClosed", err)
		}
		waitUntil(t, "the start carried out", func() bool { return e.sim.Pending() == 0 && len(e.sim.Publications()) == 1 })
		expectLeftBehindReport(t, undoErrs, "publication")
	})
}

// expectLeftBehindReport waits for one report on undoErrs naming what (subscription, publication)
// as possibly left behind, and fails on a second.
func expectLeftBehindReport(t *testing.T, undoErrs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-undoErrs:
		if !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "left behind") {
			t.Errorf("onUndoErr got %v; want it to say a %s may be left behind", err, what)
		}
	case <-time.After(testTimeout):
		t.Fatalf("a command never answered, whose %s the media server made, was not reported to onUndoErr", what)
	}
	select {
	case err := <-undoErrs:
		t.Errorf("a second report: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

// SubscribeOrUndo waits for the answer as long as ctx allows, at most the request timeout (its doc):
// a request timeout above LateAnswerWait is not cut short by the bound on following a late answer.
func TestOrUndoWaitsTheWholeRequestTimeout(t *testing.T) {
	e := newEnv(t, sim.Options{})
	bob, err := capabilities.NewCommands(connect(t, e.url), "bob", capabilities.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	capabilities.SetLateAnswerWait(bob, 50*time.Millisecond) // stands for LateAnswerWait, below the request timeout
	e.sim.SetCommandDelay(300 * time.Millisecond)            // beyond it, well within the request timeout
	rep, err := bob.SubscribeOrUndo(ctxT(t), capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video"}, nil)
	if err != nil {
		t.Fatalf("SubscribeOrUndo answered within the request timeout: %v", err)
	}
	if subs := e.sim.Subscriptions(); len(subs) != 1 || subs[0].ID != rep.SubscriptionID {
		t.Fatalf("subscriptions %+v, want only %s", subs, rep.SubscriptionID)
	}
}

// A command that never left, or that the media server refused, made nothing: SubscribeOrUndo and
// StartPublicationOrUndo report nothing to onUndoErr for it (their doc).
func TestOrUndoReportsNothingForACommandThatMadeNothing(t *testing.T) {
	e := newEnv(t, sim.Options{})
	nc := connect(t, e.url)
	alice, err := capabilities.NewCommands(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	undoErrs := make(chan error, 8)
	onUndo := func(err error) { undoErrs <- err }
	// Refused: a stale session.
	if _, err := alice.SubscribeOrUndo(ctxT(t), capabilities.SubscribeRequest{SessionID: "sess-gone", StreamID: "video"}, onUndo); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Errorf("subscribe with a stale session: %v, want ErrSourceUnavailable", err)
	}
	// Never left: the context is done already.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := alice.StartPublicationOrUndo(done, startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled), onUndo); !errors.Is(err, context.Canceled) {
		t.Errorf("start with a done context: %v, want context.Canceled", err)
	}
	// No media server subscribed.
	e.sim.Stop()
	if _, err := alice.StartPublicationOrUndo(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled), onUndo); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("start without a media server: %v, want nats.ErrNoResponders", err)
	}
	// Never left: the connection is closed.
	nc.Close()
	if _, err := alice.SubscribeOrUndo(ctxT(t), capabilities.SubscribeRequest{SessionID: "sess-1", StreamID: "video"}, onUndo); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("subscribe on a closed connection: %v, want nats.ErrConnectionClosed", err)
	}
	select {
	case err := <-undoErrs:
		t.Errorf("reported for a command that made nothing: %v", err)
	case <-time.After(200 * time.Millisecond): // the reports run on goroutines of their own
	}
}

// A plain Subscribe given up on returns its context's error, and the media server still carries it
// out: the subscription is left, as the Subscribe doc warns (SubscribeOrUndo is for such callers).
func TestSubscribeGivenUpOnIsStillCarriedOut(t *testing.T) {
	e := newEnv(t, sim.Options{})
	bob := e.commands("bob")
	e.sim.SetCommandDelay(200 * time.Millisecond)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := bob.Subscribe(short, capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe past its deadline: %v, want context.DeadlineExceeded", err)
	}
	waitUntil(t, "the subscribe carried out", func() bool { return e.sim.Pending() == 0 && len(e.sim.Commands()) == 1 })
	if subs := e.sim.Subscriptions(); len(subs) != 1 || subs[0].Principal != "bob" {
		t.Fatalf("subscriptions %+v; want bob's, made after he gave up", subs)
	}
}
