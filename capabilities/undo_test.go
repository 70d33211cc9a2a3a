package capabilities_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// waitUntil polls cond (the simulator's state has no events to await) for at most 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A command given up on (its context ended before a slow media server answered) is followed to its
// answer, and what the late answer made is undone: nothing is left that nobody knows of.
func TestGivenUpCommandsAreUndoneWhenAnsweredLate(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice, bob := e.commands("alice"), e.commands("bob")
	e.publish(alice, "browser-h264-720p")
	waitUntil(t, "variant READY", func() bool {
		v, ok := e.sim.Capabilities().Variant("front-door", "video", "browser-h264-720p")
		return ok && v.State == capabilities.StateReady
	})
	e.sim.SetCommandDelay(time.Second)
	var mu sync.Mutex
	var undoErrs []error
	onUndo := func(err error) { mu.Lock(); undoErrs = append(undoErrs, err); mu.Unlock() }

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitUntil(t, "the subscribe under way", func() bool { return e.sim.Pending() > 0 })
		cancel()
	}()
	_, err := bob.SubscribeOrUndo(ctx, capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video",
		VariantID: "browser-h264-720p"}, onUndo)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SubscribeOrUndo given up on: %v, want context.Canceled", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	_, err = alice.StartPublicationOrUndo(short, startReq(e, "browser-h264-1080p", capabilities.RecordingModeDisabled), onUndo)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartPublicationOrUndo past its deadline: %v, want context.DeadlineExceeded", err)
	}
	e.sim.SetCommandDelay(0)
	waitUntil(t, "the late answers undone", func() bool {
		for _, p := range e.sim.Publications() {
			if p.VariantID == "browser-h264-1080p" {
				return false
			}
		}
		return len(e.sim.Subscriptions()) == 0 && e.sim.Pending() == 0
	})
	var made, undone int
	for _, c := range e.sim.Commands() {
		switch c.Command {
		case capabilities.CommandSubscribe, capabilities.CommandStartPublication:
			if c.Reply.OK {
				made++
			}
		case capabilities.CommandUnsubscribe, capabilities.CommandStopPublication:
			if c.Reply.OK {
				undone++
			}
		}
	}
	// The first publication (the fixture's) stays: made counts it, undone does not.
	mu.Lock()
	defer mu.Unlock()
	if made != 3 || undone != 2 || undoErrs != nil {
		t.Fatalf("%d made, %d undone, undo errors %v; want 3 made (one the fixture's), 2 undone, no errors", made, undone, undoErrs)
	}
}

// An answer in time is the command's own: nothing is undone.
func TestCommandsAnsweredInTimeAreKept(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice := e.commands("alice")
	rep, err := alice.StartPublicationOrUndo(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled), nil)
	if err != nil || rep.PublicationID == "" {
		t.Fatalf("StartPublicationOrUndo: %+v, %v", rep, err)
	}
	if pubs := e.sim.Publications(); len(pubs) != 1 || pubs[0].ID != rep.PublicationID {
		t.Fatalf("publications %+v, want only %s", pubs, rep.PublicationID)
	}
}

// The request timeout bounds the wait of SubscribeOrUndo and StartPublicationOrUndo even when the
// caller's context allows longer, as their doc says ("as long as ctx allows, at most the request
// timeout"): a media server slower than the timeout costs the caller the timeout, and what it made
// once it answered is undone.
func TestOrUndoWaitsAtMostTheRequestTimeout(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice, err := capabilities.NewCommands(connect(t, e.url), "alice", capabilities.WithRequestTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.SetCommandDelay(time.Second) // far beyond the request timeout, well within the deadline
	var mu sync.Mutex
	var undoErrs []error
	onUndo := func(err error) { mu.Lock(); undoErrs = append(undoErrs, err); mu.Unlock() }
	rep, err := alice.StartPublicationOrUndo(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled), onUndo)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartPublicationOrUndo with a 50 ms request timeout, a 10 s deadline and a media server taking 1 s = %+v, %v; want context.DeadlineExceeded", rep, err)
	}
	e.sim.SetCommandDelay(0)
	waitUntil(t, "the late publication stopped", func() bool {
		return len(e.sim.Publications()) == 0 && e.sim.Pending() == 0
	})
	var started, stopped int
	for _, c := range e.sim.Commands() {
		switch {
		case c.Command == capabilities.CommandStartPublication && c.Reply.OK:
			started++
		case c.Command == capabilities.CommandStopPublication && c.Reply.OK:
			stopped++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if started != 1 || stopped != 1 || undoErrs != nil {
		t.Fatalf("%d started, %d stopped, undo errors %v; want the late publication started and stopped", started, stopped, undoErrs)
	}
}

// An ok answer that names what it made but lacks its variant_id fails the command, and SubscribeOrUndo
// and StartPublicationOrUndo then end what it names: the caller, left with an error, could never do
// it, and the subscription or publication would stay for good.
func TestOrUndoEndsWhatAnIncompleteAnswerMade(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	c, err := capabilities.NewCommands(connect(t, url), "alice")
	if err != nil {
		t.Fatal(err)
	}
	subj := func(cmd capabilities.Command) string {
		return capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", cmd)
	}
	srv.answer(t, subj(capabilities.CommandSubscribe), `{"ok":true,"subscription_id":"sub-1"}`)
	srv.answer(t, subj(capabilities.CommandUnsubscribe), `{"ok":true}`)
	srv.answer(t, subj(capabilities.CommandStartPublication), `{"publication_id":"pub-1"}`)
	srv.answer(t, subj(capabilities.CommandStopPublication), `{}`)
	var mu sync.Mutex
	var undoErrs []error
	onUndo := func(err error) { mu.Lock(); undoErrs = append(undoErrs, err); mu.Unlock() }

	if rep, err := c.SubscribeOrUndo(ctxT(t), capabilities.SubscribeRequest{SessionID: "sess-1", StreamID: "video"}, onUndo); err == nil || rep != (capabilities.SubscribeReply{}) {
		t.Errorf("SubscribeOrUndo answered without a variant_id = %+v, %v; want an error", rep, err)
	}
	srv.await(t, subj(capabilities.CommandUnsubscribe), 1)
	if rep, err := c.StartPublicationOrUndo(ctxT(t), capabilities.StartPublicationRequest{SessionID: "sess-1", StreamID: "video",
		VariantID: "browser-h264-720p", OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled}, onUndo); err == nil || rep != (capabilities.StartPublicationReply{}) {
		t.Errorf("StartPublicationOrUndo answered without a variant_id = %+v, %v; want an error", rep, err)
	}
	srv.await(t, subj(capabilities.CommandStopPublication), 1)
	srv.mu.Lock()
	unsub, stop := srv.got[subj(capabilities.CommandUnsubscribe)], srv.got[subj(capabilities.CommandStopPublication)]
	srv.mu.Unlock()
	if len(unsub) != 1 || unsub[0] != `{"subscription_id":"sub-1"}` || len(stop) != 1 || stop[0] != `{"publication_id":"pub-1"}` {
		t.Errorf("undone with unsubscribe %q and stop_publication %q; want sub-1 and pub-1 ended", unsub, stop)
	}
	mu.Lock()
	defer mu.Unlock()
	if undoErrs != nil {
		t.Errorf("undo errors %v", undoErrs)
	}
}
