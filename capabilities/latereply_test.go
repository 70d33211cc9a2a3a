package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// A slow media server answers a start_publication after its caller gave up, while a later command of
// the same client waits for its own answer: the late answer is not taken for the later command's
// (which gets its own, a typed error), and what it made is undone exactly once.
func TestLateAnswerIsNotTakenForALaterCommands(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice := e.commands("alice")
	e.sim.SetCommandDelay(300 * time.Millisecond)
	undone := make(chan error, 4)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := alice.StartPublicationOrUndo(short, startReq(e, "browser-h264-1080p", capabilities.RecordingModeDisabled), func(err error) { undone <- err })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start given up on: %v, want context.DeadlineExceeded", err)
	}
	// Sent while the start's answer is still to come, and answered after it.
	err = alice.StopPublication(ctxT(t), "pub-unknown")
	if !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Fatalf("stop of an unknown publication: %v, want ErrPublicationNotFound", err)
	}
	e.sim.SetCommandDelay(0)
	waitUntil(t, "the late start undone", func() bool { return len(e.sim.Publications()) == 0 && e.sim.Pending() == 0 })
	var started string
	stops := map[string]int{}
	for _, c := range e.sim.Commands() {
		switch c.Command {
		case capabilities.CommandStartPublication:
			started = c.Reply.PublicationID
		case capabilities.CommandStopPublication:
			var body capabilities.StopPublicationRequest
			_ = json.Unmarshal(c.Body, &body)
			stops[body.PublicationID]++
		}
	}
	if started == "" || stops[started] != 1 {
		t.Fatalf("late publication %q stopped %d times, want once (stops %v)", started, stops[started], stops)
	}
	select {
	case err := <-undone:
		t.Fatalf("undo reported an error: %v", err)
	default:
	}
}
