package capabilities_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

func startReq(e *env, variantID, mode string) capabilities.StartPublicationRequest {
	return capabilities.StartPublicationRequest{SessionID: e.session("front-door"), StreamID: "video",
		VariantID: variantID, OutputProfile: "browser-h264-720p", RecordingMode: mode}
}

func TestStartPublicationRefusesABadRecordingModeLocally(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice := e.commands("alice")
	for _, mode := range []string{"", "always", "Required"} {
		_, err := alice.StartPublication(ctxT(t), startReq(e, "browser-h264-720p", mode))
		if !errors.Is(err, capabilities.ErrRecordingModeInvalid) {
			t.Errorf("recording_mode %q: %v, want ErrRecordingModeInvalid", mode, err)
		}
	}
	// A zero-value request is refused the same way.
	if _, err := alice.StartPublication(ctxT(t), capabilities.StartPublicationRequest{}); !errors.Is(err, capabilities.ErrRecordingModeInvalid) {
		t.Errorf("zero-value StartPublication: %v", err)
	}
	// Nothing reached the media server: the next command sent is the first it sees.
	if _, err := alice.StartPublication(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeInherit)); err != nil {
		t.Fatal(err)
	}
	cmds := e.sim.Commands()
	if len(cmds) != 1 || cmds[0].Command != capabilities.CommandStartPublication || !cmds[0].Reply.OK {
		t.Fatalf("simulator received %+v, want only the valid start_publication", cmds)
	}
}

func TestStartPublicationRecordingModeTheSourceDoesNotAllow(t *testing.T) {
	e := newEnv(t, sim.Options{Sources: []sim.SourceConfig{{SourceID: "front-door", RecordingModes: []string{"disabled"}}}})
	alice := e.commands("alice")
	_, err := alice.StartPublication(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeRequired))
	if !errors.Is(err, capabilities.ErrRecordingModeInvalid) {
		t.Fatalf("mode required on a source allowing only disabled: %v", err)
	}
	if cmds := e.sim.Commands(); len(cmds) != 1 || cmds[0].Reply.Error == nil ||
		cmds[0].Reply.Error.Code != capabilities.CodeRecordingModeInvalid {
		t.Errorf("the simulator should have received and refused it: %+v", cmds)
	}
	if _, err := alice.StartPublication(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled)); err != nil {
		t.Errorf("allowed mode: %v", err)
	}
}

func TestStartPublicationSourceUnavailable(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice := e.commands("alice")
	stale := e.session("front-door")
	if err := e.sim.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	req := startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled)
	req.SessionID = stale
	if _, err := alice.StartPublication(ctxT(t), req); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Errorf("offline source: %v", err)
	}
	if _, err := alice.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: stale, StreamID: "video"}); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Errorf("subscribe to an offline source: %v", err)
	}
	if err := e.sim.SetOnline("front-door", true); err != nil {
		t.Fatal(err)
	}
	// Online again, with a new session: the old one stays stale.
	if _, err := alice.StartPublication(ctxT(t), req); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Errorf("stale session: %v", err)
	}
	if _, err := alice.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: stale, StreamID: "video"}); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Errorf("subscribe with a stale session: %v", err)
	}
	req.SessionID = "sess-unknown"
	if _, err := alice.StartPublication(ctxT(t), req); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Errorf("unknown session: %v", err)
	}
	req.SessionID = e.session("front-door")
	if _, err := alice.StartPublication(ctxT(t), req); err != nil {
		t.Errorf("current session: %v", err)
	}
}

func TestStartPublicationConflictAndTakeover(t *testing.T) {
	e := newEnv(t, sim.Options{ReadyDelay: time.Hour})
	alice, bob := e.commands("alice"), e.commands("bob")
	first := e.publish(alice, "browser-h264-720p")

	_, err := bob.StartPublication(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled))
	if !errors.Is(err, capabilities.ErrPublicationConflict) {
		t.Fatalf("bob on alice's variant: %v, want CONFLICT", err)
	}
	if _, err := bob.StartPublication(ctxT(t), startReq(e, sim.OriginalVariantID, capabilities.RecordingModeDisabled)); !errors.Is(err, capabilities.ErrPublicationConflict) {
		t.Errorf("publishing over the source's own variant: %v, want CONFLICT", err)
	}
	if err := bob.StopPublication(ctxT(t), first.PublicationID); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("bob stopping alice's publication: %v, want NOT_FOUND", err)
	}

	// Alice starting it again takes it over: a new publication replaces the first.
	second := e.publish(alice, "browser-h264-720p")
	if second.PublicationID == first.PublicationID || second.VariantID != "browser-h264-720p" {
		t.Fatalf("takeover reply %+v (first %+v)", second, first)
	}
	pubs := e.sim.Publications()
	if len(pubs) != 1 || pubs[0].ID != second.PublicationID || pubs[0].Principal != "alice" || pubs[0].RecordingMode != "disabled" {
		t.Fatalf("publications after takeover: %+v", pubs)
	}
	if err := alice.StopPublication(ctxT(t), first.PublicationID); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("stopping the replaced publication: %v, want NOT_FOUND", err)
	}
	if err := alice.StopPublication(ctxT(t), second.PublicationID); err != nil {
		t.Fatalf("StopPublication: %v", err)
	}
	if _, ok := e.sim.Capabilities().Variant("front-door", "video", "browser-h264-720p"); ok {
		t.Error("variant still advertised after its publication stopped")
	}
	if err := alice.StopPublication(ctxT(t), second.PublicationID); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("second stop: %v, want NOT_FOUND", err)
	}
	// Free again: bob may publish it now.
	if _, err := bob.StartPublication(ctxT(t), startReq(e, "browser-h264-720p", capabilities.RecordingModeDisabled)); err != nil {
		t.Errorf("bob after alice stopped: %v", err)
	}
}

func TestSubscribeWaitsForReady(t *testing.T) {
	e := newEnv(t, sim.Options{ReadyDelay: time.Hour}) // stays PENDING
	alice, bob := e.commands("alice"), e.commands("bob")
	e.publish(alice, "browser-h264-720p")
	_, err := bob.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video", VariantID: "browser-h264-720p"})
	if !errors.Is(err, capabilities.ErrVariantNotReady) {
		t.Errorf("subscribe to a PENDING variant: %v, want VARIANT_NOT_READY", err)
	}
	_, err = bob.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "video", VariantID: "nope"})
	if !errors.Is(err, capabilities.ErrVariantNotReady) {
		t.Errorf("subscribe to an absent variant: %v, want VARIANT_NOT_READY", err)
	}
	if len(e.sim.Subscriptions()) != 0 {
		t.Errorf("subscriptions: %+v", e.sim.Subscriptions())
	}
}

func TestSubscribeAndUnsubscribe(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	alice, bob := e.commands("alice"), e.commands("bob")
	e.publish(alice, "browser-h264-720p")
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", "browser-h264-720p"); err != nil {
		t.Fatal(err)
	}
	session, _, _ := tr.Resolve("front-door")
	sub, err := bob.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: session, StreamID: "video", VariantID: "browser-h264-720p"})
	if err != nil || sub.VariantID != "browser-h264-720p" || sub.SubscriptionID == "" {
		t.Fatalf("subscribe to a READY variant: %+v, %v", sub, err)
	}
	orig, err := bob.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: session, StreamID: "audio"})
	if err != nil || orig.VariantID != sim.OriginalVariantID {
		t.Fatalf("subscribe without a variant: %+v, %v (want the original variant)", orig, err)
	}
	if subs := e.sim.Subscriptions(); len(subs) != 2 {
		t.Fatalf("subscriptions: %+v", subs)
	}
	if err := alice.Unsubscribe(ctxT(t), sub.SubscriptionID); !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
		t.Errorf("alice ending bob's subscription: %v, want NOT_FOUND", err)
	}
	if err := bob.Unsubscribe(ctxT(t), sub.SubscriptionID); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if err := bob.Unsubscribe(ctxT(t), sub.SubscriptionID); !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
		t.Errorf("second Unsubscribe: %v, want SUBSCRIPTION_ERROR_CODE_NOT_FOUND", err)
	}
	if subs := e.sim.Subscriptions(); len(subs) != 1 || subs[0].ID != orig.SubscriptionID {
		t.Errorf("subscriptions after unsubscribe: %+v", subs)
	}
}

func TestInvalidArgumentAndUnknownIDs(t *testing.T) {
	e := newEnv(t, sim.Options{})
	alice := e.commands("alice")
	if _, err := alice.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: e.session("front-door"), StreamID: "a/b"}); !errors.Is(err, capabilities.ErrInvalidArgument) {
		t.Errorf("bad stream id: %v", err)
	}
	if _, err := alice.Subscribe(ctxT(t), capabilities.SubscribeRequest{StreamID: "video"}); !errors.Is(err, capabilities.ErrInvalidArgument) {
		t.Errorf("missing session: %v", err)
	}
	req := startReq(e, "browser-h264-720p", capabilities.RecordingModeInherit)
	req.OutputProfile = ""
	if _, err := alice.StartPublication(ctxT(t), req); !errors.Is(err, capabilities.ErrInvalidArgument) {
		t.Errorf("missing output_profile: %v", err)
	}
	if err := alice.StopPublication(ctxT(t), "pub-unknown"); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("unknown publication: %v", err)
	}
	if err := alice.Unsubscribe(ctxT(t), "sub-unknown"); !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
		t.Errorf("unknown subscription: %v", err)
	}
	var ce *capabilities.Error
	err := alice.StopPublication(ctxT(t), "pub-unknown")
	if !errors.As(err, &ce) || ce.Code != capabilities.CodePublicationNotFound || ce.Message == "" {
		t.Errorf("error %#v: want a *Error with code and message", err)
	}
}

func TestCommandsWithoutMediaServer(t *testing.T) {
	c, err := capabilities.NewCommands(connect(t, startNATS(t)), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopPublication(ctxT(t), "pub-1"); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("no media server: %v, want ErrNoResponders", err)
	}
	if _, err := capabilities.NewCommands(connect(t, startNATS(t)), "Alice.x"); err == nil {
		t.Error("NewCommands accepted an invalid principal")
	}
}

// TestSourceReconnectEndsPublications is the worker's view of a source that drops: its publication
// disappears, the session goes stale, and after re-resolving it can publish again.
func TestSourceReconnectEndsPublications(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	alice := e.commands("alice")
	old := e.publish(alice, "browser-h264-720p")
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", old.VariantID); err != nil {
		t.Fatal(err)
	}

	if err := e.sim.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		_, ok := c.Variant("front-door", "video", old.VariantID)
		return !ok
	}); err != nil {
		t.Fatalf("variant of an offline source still advertised: %v", err)
	}
	if err := alice.StopPublication(ctxT(t), old.PublicationID); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("publication of an offline source: %v, want NOT_FOUND", err)
	}
	if err := e.sim.SetOnline("front-door", true); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		s, _ := c.Source("front-door")
		return s.Online
	}); err != nil {
		t.Fatal(err)
	}
	session, _, _ := tr.Resolve("front-door")
	r, err := alice.StartPublication(ctxT(t), capabilities.StartPublicationRequest{SessionID: session, StreamID: "video",
		VariantID: old.VariantID, OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled})
	if err != nil {
		t.Fatalf("publishing on the new session: %v", err)
	}
	if _, err := tr.WaitReady(ctxT(t), "front-door", "video", r.VariantID); err != nil {
		t.Fatal(err)
	}
}
