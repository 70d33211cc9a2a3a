package capabilities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// The undo of a late answer can fail too: here the media server is as slow for the unsubscribe as
// it was for the subscribe, beyond the request timeout. The failure goes to onUndoErr, once, naming
// the subscription left and wrapping the timeout; nothing is reported to the caller, who had its
// answer long before, and the undo's own late answer is not followed further (the media server ends
// the subscription when it gets to it, here).
func TestOrUndoReportsAnUndoThatTimesOut(t *testing.T) {
	e := newEnv(t, sim.Options{})
	bob, err := capabilities.NewCommands(connect(t, e.url), "bob", capabilities.WithRequestTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.SetCommandDelay(400 * time.Millisecond) // beyond the request timeout, for every command
	undoErrs := make(chan error, 4)
	_, err = bob.SubscribeOrUndo(ctxT(t), capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video"},
		func(err error) { undoErrs <- err })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SubscribeOrUndo past the request timeout: %v, want context.DeadlineExceeded", err)
	}
	var undoErr error
	select {
	case undoErr = <-undoErrs:
	case <-time.After(testTimeout):
		t.Fatal("the undo that timed out was not reported")
	}
	var made string
	for _, c := range e.sim.Commands() {
		if c.Command == capabilities.CommandSubscribe {
			made = c.Reply.SubscriptionID
		}
	}
	if !errors.Is(undoErr, context.DeadlineExceeded) || made == "" || !strings.Contains(undoErr.Error(), made) {
		t.Errorf("undo error %v; want one naming subscription %q and wrapping context.DeadlineExceeded", undoErr, made)
	}
	e.sim.SetCommandDelay(0)
	waitUntil(t, "the unsubscribe carried out", func() bool { return e.sim.Pending() == 0 && len(e.sim.Subscriptions()) == 0 })
	select {
	case err := <-undoErrs:
		t.Errorf("a second undo report: %v", err)
	default:
	}
}
