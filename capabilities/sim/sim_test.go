package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testTimeout = 10 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// start runs NATS and a simulator with opts; it returns the simulator and a client connection.
func start(t *testing.T, opts sim.Options) (*sim.Sim, *nats.Conn) {
	t.Helper()
	ns := natstest.Start(t, natsserver.Options{})
	conn := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	s := sim.New(conn(), opts)
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s, conn()
}

// request sends a raw command as principal and decodes the reply envelope.
func request(t *testing.T, nc *nats.Conn, prefix, principal string, cmd capabilities.Command, body string) (capabilities.Reply, string) {
	t.Helper()
	msg, err := nc.RequestWithContext(ctxT(t), capabilities.CommandSubject(prefix, principal, cmd), []byte(body))
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	var r capabilities.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("%s reply %s: %v", cmd, msg.Data, err)
	}
	return r, string(msg.Data)
}

func fetch(t *testing.T, nc *nats.Conn, prefix string) (capabilities.ServerCapabilities, string) {
	t.Helper()
	msg, err := nc.RequestWithContext(ctxT(t), capabilities.GetSubject(prefix), nil)
	if err != nil {
		t.Fatal(err)
	}
	var c capabilities.ServerCapabilities
	if err := json.Unmarshal(msg.Data, &c); err != nil {
		t.Fatal(err)
	}
	return c, string(msg.Data)
}

// changes subscribes to the changed subject and returns a function that awaits the next generation.
func changes(t *testing.T, nc *nats.Conn, prefix string) func() uint64 {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(capabilities.ChangedSubject(prefix), ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() uint64 {
		t.Helper()
		select {
		case m := <-ch:
			var c capabilities.Changed
			if err := json.Unmarshal(m.Data, &c); err != nil {
				t.Fatalf("changed %s: %v", m.Data, err)
			}
			return c.Generation
		case <-time.After(testTimeout):
			t.Fatal("no changed message")
			return 0
		}
	}
}

func TestGetAnswersTheWholeCapabilities(t *testing.T) {
	s, nc := start(t, sim.Options{Prefix: "test.kp", Sources: []sim.SourceConfig{{
		SourceID: "front-door", RecordingModes: []string{"disabled"},
		Streams: []sim.StreamConfig{{StreamID: "video", MediaKind: "video", Codec: "h264", Width: 640, Height: 480}},
	}}})
	c, raw := fetch(t, nc, "test.kp")
	session, _, _ := s.SessionID("front-door")
	want := `{"generation":1,"sources":[{"source_id":"front-door","session_id":"` + session + `","online":true,"streams":[{"stream_id":"video","media_kind":"video","variants":[{"variant_id":"source","codec":"h264","width":640,"height":480,"state":"READY","publisher":""}]}],"publication":{"recording_modes":["disabled"]}}]}`
	if raw != want {
		t.Errorf("caps.v1.get\n got %s\nwant %s", raw, want)
	}
	if c.Generation != s.Generation() {
		t.Errorf("generation %d, sim %d", c.Generation, s.Generation())
	}
}

func TestDefaultSources(t *testing.T) {
	_, nc := start(t, sim.Options{Sources: sim.Sources("front-door", "back-yard")})
	c, _ := fetch(t, nc, capabilities.DefaultPrefix)
	if len(c.Sources) != 2 || c.Sources[0].SourceID != "front-door" || c.Sources[1].SourceID != "back-yard" {
		t.Fatalf("sources %+v", c.Sources)
	}
	for _, src := range c.Sources {
		if !src.Online || src.SessionID == "" || !slices.Equal(src.Publication.RecordingModes, capabilities.RecordingModes()) {
			t.Errorf("source %+v", src)
		}
		v, ok := c.Variant(src.SourceID, "video", sim.OriginalVariantID)
		a, aok := c.Variant(src.SourceID, "audio", sim.OriginalVariantID)
		if !ok || !aok || v.State != capabilities.StateReady || a.Codec != "opus" {
			t.Errorf("%s streams %+v", src.SourceID, src.Streams)
		}
	}
	if c.Sources[0].SessionID == c.Sources[1].SessionID {
		t.Error("two sources share a session")
	}
}

func TestEveryChangeIsTheNextGeneration(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: 10 * time.Millisecond})
	next := changes(t, nc, capabilities.DefaultPrefix)
	session, _, _ := s.SessionID("front-door")

	r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication,
		`{"session_id":"`+session+`","stream_id":"video","variant_id":"cv-640","output_profile":"cv-h264-360p","recording_mode":"inherit"}`)
	if !r.OK || r.PublicationID == "" || r.VariantID != "cv-640" {
		t.Fatalf("start_publication reply %s", raw)
	}
	if g := next(); g != 2 { // PENDING
		t.Errorf("generation %d, want 2", g)
	}
	if g := next(); g != 3 { // READY
		t.Errorf("generation %d, want 3", g)
	}
	c, _ := fetch(t, nc, "kp")
	v, _ := c.Variant("front-door", "video", "cv-640")
	if c.Generation != 3 || v != (capabilities.Variant{VariantID: "cv-640", Codec: "h264", Width: 640, Height: 360, State: capabilities.StateReady, Publisher: "alice"}) {
		t.Errorf("generation %d, variant %+v", c.Generation, v)
	}
	r, raw = request(t, nc, "kp", "alice", capabilities.CommandStopPublication, `{"publication_id":"`+r.PublicationID+`"}`)
	if !r.OK || raw != `{"ok":true}` {
		t.Fatalf("stop_publication reply %s", raw)
	}
	if g := next(); g != 4 {
		t.Errorf("generation %d, want 4", g)
	}
	if err := s.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetOnline("front-door", false); err != nil { // no change
		t.Fatal(err)
	}
	if err := s.SetOnline("front-door", true); err != nil {
		t.Fatal(err)
	}
	if g1, g2 := next(), next(); g1 != 5 || g2 != 6 {
		t.Errorf("generations %d, %d; want 5, 6", g1, g2)
	}
	if err := s.AddSource(sim.SourceConfig{SourceID: "garage"}); err != nil {
		t.Fatal(err)
	}
	if g := next(); g != 7 {
		t.Errorf("generation %d, want 7", g)
	}
	if err := s.AddSource(sim.SourceConfig{SourceID: "garage"}); err == nil {
		t.Error("duplicate source added")
	}
	if err := s.SetOnline("attic", true); err == nil {
		t.Error("SetOnline of an unknown source")
	}
}

func TestStartPublicationProtocolErrors(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: time.Hour})
	session, _, _ := s.SessionID("front-door")
	for _, tc := range []struct {
		name, body string
		code       capabilities.Code
	}{
		{"zero value", `{}`, capabilities.CodeRecordingModeInvalid},
		{"zero value fields", `{"session_id":"","stream_id":"","variant_id":"","output_profile":"","recording_mode":""}`, capabilities.CodeRecordingModeInvalid},
		{"no mode", `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p"}`, capabilities.CodeRecordingModeInvalid},
		{"unknown mode", `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"sometimes"}`, capabilities.CodeRecordingModeInvalid},
		{"unknown field", `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit","owner":"bob"}`, capabilities.CodeInvalidArgument},
		{"not json", `start please`, capabilities.CodeInvalidArgument},
		{"no variant", `{"session_id":"` + session + `","stream_id":"video","output_profile":"p","recording_mode":"inherit"}`, capabilities.CodeInvalidArgument},
		{"unknown stream", `{"session_id":"` + session + `","stream_id":"depth","variant_id":"v","output_profile":"p","recording_mode":"inherit"}`, capabilities.CodeSourceUnavailable},
		{"unknown session", `{"session_id":"sess-0","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}`, capabilities.CodeSourceUnavailable},
		// Data after the object is INVALID_ARGUMENT whatever it is, a stray closing bracket or brace
		// included (json.Decoder.More reports neither), and the request is not carried out.
		{"bracket after", `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}]`, capabilities.CodeInvalidArgument},
		{"brace after", `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}}`, capabilities.CodeInvalidArgument},
		{"object after", `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"} {}`, capabilities.CodeInvalidArgument},
	} {
		r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, tc.body)
		if r.OK || r.Error == nil || r.Error.Code != tc.code || r.Error.Message == "" {
			t.Errorf("%s: reply %s, want %s", tc.name, raw, tc.code)
		}
		// SPEC section 12 writes errors as {code, message}: a client that knows no envelope reads
		// the same error at the top level.
		var bare struct {
			Code    capabilities.Code `json:"code"`
			Message string            `json:"message"`
		}
		if err := json.Unmarshal([]byte(raw), &bare); err != nil || bare.Code != tc.code || r.Error == nil || bare.Message != r.Error.Message {
			t.Errorf("%s: reply %s has no top-level code %s and message as SPEC section 12 writes errors (%v)", tc.name, raw, tc.code, err)
		}
	}
	if len(s.Publications()) != 0 {
		t.Errorf("publications after refused commands: %+v", s.Publications())
	}
	cmds := s.Commands()
	if len(cmds) != 12 || cmds[0].Principal != "alice" || cmds[0].Command != capabilities.CommandStartPublication || string(cmds[0].Body) != `{}` {
		t.Errorf("commands %+v", cmds)
	}
}

func TestOfflineEndsPublicationsAndSubscriptions(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door", "back-yard"), ReadyDelay: time.Hour})
	fd, _, _ := s.SessionID("front-door")
	by, _, _ := s.SessionID("back-yard")
	for _, session := range []string{fd, by} {
		if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication,
			`{"session_id":"`+session+`","stream_id":"video","variant_id":"v","output_profile":"browser-vp9-1080p","recording_mode":"required"}`); !r.OK {
			t.Fatal(raw)
		}
		if r, raw := request(t, nc, "kp", "bob", capabilities.CommandSubscribe, `{"session_id":"`+session+`","stream_id":"audio"}`); !r.OK || r.VariantID != sim.OriginalVariantID {
			t.Fatal(raw)
		}
	}
	if len(s.Publications()) != 2 || len(s.Subscriptions()) != 2 {
		t.Fatalf("publications %+v, subscriptions %+v", s.Publications(), s.Subscriptions())
	}
	if err := s.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	pubs, subs := s.Publications(), s.Subscriptions()
	if len(pubs) != 1 || pubs[0].SourceID != "back-yard" || len(subs) != 1 || subs[0].SourceID != "back-yard" {
		t.Errorf("after offline: publications %+v, subscriptions %+v", pubs, subs)
	}
	c := s.Capabilities()
	src, _ := c.Source("front-door")
	if src.Online || src.SessionID != fd {
		t.Errorf("offline source %+v", src)
	}
	for _, st := range src.Streams {
		if len(st.Variants) != 0 {
			t.Errorf("offline source advertises variants: %+v", st)
		}
	}
	if v, ok := c.Variant("back-yard", "video", "v"); !ok || v.Codec != "vp9" || v.Width != 1920 || v.State != capabilities.StatePending {
		t.Errorf("back-yard variant %+v", v)
	}
	if err := s.SetOnline("front-door", true); err != nil {
		t.Fatal(err)
	}
	if now, online, _ := s.SessionID("front-door"); !online || now == fd {
		t.Errorf("back online with session %q (old %q)", now, fd)
	}
	if v, ok := s.Capabilities().Variant("front-door", "video", sim.OriginalVariantID); !ok || v.State != capabilities.StateReady {
		t.Errorf("original variant after reconnect: %+v %v", v, ok)
	}
}

func TestSetFailingAtRuntime(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: 10 * time.Millisecond})
	next := changes(t, nc, "kp")
	session, _, _ := s.SessionID("front-door")
	ref := sim.VariantRef{SourceID: "front-door", StreamID: "audio", VariantID: "aac"}
	s.SetFailing(ref, true)
	body := `{"session_id":"` + session + `","stream_id":"audio","variant_id":"aac","output_profile":"aac-128k","recording_mode":"inherit"}`
	if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, body); !r.OK {
		t.Fatal(raw)
	}
	next() // PENDING
	next() // FAILED
	if v, _ := s.Capabilities().Variant("front-door", "audio", "aac"); v.State != capabilities.StateFailed || v.Codec != "aac" {
		t.Errorf("variant %+v, want FAILED aac", v)
	}
	// Retried after the fault is cleared: the same principal takes it over and it turns READY.
	s.SetFailing(ref, false)
	if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, body); !r.OK {
		t.Fatal(raw)
	}
	next()
	next()
	if v, _ := s.Capabilities().Variant("front-door", "audio", "aac"); v.State != capabilities.StateReady {
		t.Errorf("variant %+v, want READY", v)
	}
}

func TestStopStopsServing(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: time.Hour})
	session, _, _ := s.SessionID("front-door")
	if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication,
		`{"session_id":"`+session+`","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}`); !r.OK {
		t.Fatal(raw)
	}
	s.Stop() // stops the hour-long READY timer (goleak checks)
	s.Stop()
	if _, err := nc.RequestWithContext(ctxT(t), capabilities.GetSubject("kp"), nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("get after Stop: %v, want no responders", err)
	}
	if err := s.Start(ctxT(t)); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

func TestInvalidOptions(t *testing.T) {
	nc := &nats.Conn{}
	for name, o := range map[string]sim.Options{
		"prefix":        {Prefix: "kp.*"},
		"ready delay":   {ReadyDelay: -time.Second},
		"source id":     {Sources: sim.Sources("a/b")},
		"duplicate":     {Sources: sim.Sources("a", "a")},
		"stream id":     {Sources: []sim.SourceConfig{{SourceID: "a", Streams: []sim.StreamConfig{{StreamID: ""}}}}},
		"stream repeat": {Sources: []sim.SourceConfig{{SourceID: "a", Streams: []sim.StreamConfig{{StreamID: "v"}, {StreamID: "v"}}}}},
	} {
		if err := sim.New(nc, o).Start(ctxT(t)); err == nil {
			t.Errorf("%s: Start accepted invalid options", name)
		}
	}
	if err := sim.New(nil, sim.Options{}).Start(ctxT(t)); err == nil {
		t.Error("nil connection accepted")
	}
}

func TestParseOutputProfile(t *testing.T) {
	for _, tc := range []struct {
		profile string
		codec   string
		w, h    int
	}{
		{"browser-h264-720p", "h264", 1280, 720},
		{"browser-H264-1080p", "h264", 1920, 1080},
		{"cv-vp9-360p", "vp9", 640, 360},
		{"opus-48k", "opus", 0, 0},
		{"av1", "av1", 0, 0},
		{"thumbnail-720p", "unknown", 0, 0},
		{"", "unknown", 0, 0},
	} {
		c, w, h := sim.ParseOutputProfile(tc.profile)
		if c != tc.codec || w != tc.w || h != tc.h {
			t.Errorf("%q: %s %dx%d, want %s %dx%d", tc.profile, c, w, h, tc.codec, tc.w, tc.h)
		}
	}
}

// A slow media server: with a command delay, a command is carried out and answered only after it,
// Pending counts it meanwhile, and a Stop drops it unanswered (the handler does not outlive Stop).
func TestCommandDelay(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: time.Hour})
	session, _, _ := s.SessionID("front-door")
	body := `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}`
	s.SetCommandDelay(time.Hour)
	replies := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	go func() {
		_, err := nc.RequestWithContext(rctx, capabilities.CommandSubject("kp", "alice", capabilities.CommandStartPublication), []byte(body))
		replies <- err
	}()
	deadline := time.Now().Add(testTimeout)
	for s.Pending() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the delayed command is not pending")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(s.Commands()); n != 0 || len(s.Publications()) != 0 {
		t.Fatalf("a delayed command was carried out at once: %d commands, %d publications", n, len(s.Publications()))
	}
	s.SetCommandDelay(0) // later commands at once (those of another kind: each kind is served in order)
	if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStopPublication, `{"publication_id":"pub-0"}`); r.OK {
		t.Fatal(raw)
	}
	if s.Pending() != 1 || len(s.Commands()) != 1 {
		t.Fatalf("pending %d, commands %d: want the delayed one pending and the other done", s.Pending(), len(s.Commands()))
	}
	s.Stop()
	if s.Pending() != 0 {
		t.Fatalf("%d commands pending after Stop", s.Pending())
	}
	cancel() // the request gave up: it must not have had a reply
	if err := <-replies; !errors.Is(err, context.Canceled) {
		t.Fatalf("the command pending at Stop: %v, want no answer", err)
	}
	if n := len(s.Commands()); n != 1 {
		t.Fatalf("%d commands carried out, want 1", n)
	}
}

// Start needs no deadline on its context (its flush is bounded by its own).
func TestStartWithoutADeadline(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s := sim.New(nc, sim.Options{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start without a deadline: %v", err)
	}
	s.Stop()
}

// A simulator that runs for long keeps only the newest KeepCommands commands: its memory does not grow
// with every command it serves (cmd/mediasim ran out of it in time), and Commands still lists the
// newest, in order.
func TestKeepCommandsBoundsTheRecord(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), KeepCommands: 3})
	for i := range 10 {
		if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStopPublication, fmt.Sprintf(`{"publication_id":"pub-%d"}`, i)); r.OK {
			t.Fatal(raw)
		}
		cmds := s.Commands()
		if want := min(i+1, 3); len(cmds) != want {
			t.Fatalf("after %d commands, Commands holds %d, want %d", i+1, len(cmds), want)
		}
		if last := string(cmds[len(cmds)-1].Body); last != fmt.Sprintf(`{"publication_id":"pub-%d"}`, i) {
			t.Fatalf("after %d commands, the newest record is %s", i+1, last)
		}
		if first := string(cmds[0].Body); first != fmt.Sprintf(`{"publication_id":"pub-%d"}`, max(i-2, 0)) {
			t.Fatalf("after %d commands, the oldest record is %s", i+1, first)
		}
	}
	if err := sim.New(nc, sim.Options{KeepCommands: -1}).Start(ctxT(t)); err == nil {
		t.Error("a negative KeepCommands was accepted")
	}
}

// A publication can fail after its variant was READY, as a real media server's does when its encoder
// dies: the variant turns FAILED (a new generation), its publisher still holds it, and subscriptions
// to it end. A worker that stops looking once the variant is READY is caught by this.
func TestFailPublicationAfterReady(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: time.Millisecond})
	next := changes(t, nc, "kp")
	session, _, _ := s.SessionID("front-door")
	r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication,
		`{"session_id":"`+session+`","stream_id":"video","variant_id":"v","output_profile":"browser-h264-720p","recording_mode":"inherit"}`)
	if !r.OK {
		t.Fatal(raw)
	}
	next() // PENDING
	next() // READY
	if r, raw := request(t, nc, "kp", "bob", capabilities.CommandSubscribe, `{"session_id":"`+session+`","stream_id":"video","variant_id":"v"}`); !r.OK {
		t.Fatal(raw)
	}
	before := s.Generation()
	if err := s.FailPublication(r.PublicationID); err != nil {
		t.Fatal(err)
	}
	if g := next(); g != before+1 {
		t.Errorf("the failure announced generation %d, want %d", g, before+1)
	}
	if v, ok := s.Capabilities().Variant("front-door", "video", "v"); !ok || v.State != capabilities.StateFailed || v.Publisher != "alice" {
		t.Errorf("variant after the failure: %+v %v", v, ok)
	}
	if subs := s.Subscriptions(); len(subs) != 0 {
		t.Errorf("subscriptions to a failed variant: %+v", subs)
	}
	if r, raw := request(t, nc, "kp", "bob", capabilities.CommandSubscribe, `{"session_id":"`+session+`","stream_id":"video","variant_id":"v"}`); r.OK || r.Error.Code != capabilities.CodeVariantNotReady {
		t.Errorf("subscribe to the failed variant: %s", raw)
	}
	if r, raw := request(t, nc, "kp", "bob", capabilities.CommandStartPublication,
		`{"session_id":"`+session+`","stream_id":"video","variant_id":"v","output_profile":"p","recording_mode":"inherit"}`); r.OK || r.Error.Code != capabilities.CodePublicationConflict {
		t.Errorf("another principal's start of the failed variant: %s", raw)
	}
	if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStopPublication, `{"publication_id":"`+r.PublicationID+`"}`); !r.OK {
		t.Errorf("the publisher's stop of its failed publication: %s", raw)
	}
	if err := s.FailPublication("pub-none"); err == nil {
		t.Error("FailPublication of an unknown publication succeeded")
	}
}

// A stopped simulator is a media server that is gone: it announces nothing either. A change made to
// it afterwards (a test inspecting or driving its state) or Announce must not publish a generation on
// `changed`, where trackers would take it for a live media server's (and a restarted one, counting on
// from the same generation, may announce the same numbers).
func TestStopStopsAnnouncing(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	simNC, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simNC.Close)
	s := sim.New(simNC, sim.Options{Sources: sim.Sources("front-door")})
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	watcher, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watcher.Close)
	next := changes(t, watcher, "kp")
	s.Stop()
	if err := s.SetOnline("front-door", false); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSource(sim.SourceConfig{SourceID: "garage"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(); err == nil {
		t.Error("Announce of a stopped simulator succeeded")
	}
	// Anything the simulator published is at the NATS server once its connection is flushed, and
	// reaches the watcher before a marker the watcher publishes after that.
	if err := simNC.Flush(); err != nil {
		t.Fatal(err)
	}
	const marker = 1 << 40
	data, _ := json.Marshal(capabilities.Changed{Generation: marker})
	if err := watcher.Publish(capabilities.ChangedSubject("kp"), data); err != nil {
		t.Fatal(err)
	}
	if g := next(); g != marker {
		t.Fatalf("a stopped simulator announced generation %d", g)
	}
	if g := s.Generation(); g != 3 {
		t.Errorf("generation %d after two changes of the stopped simulator, want 3 (its state goes on)", g)
	}
}

// Pending counts every command received and not answered, those queued behind a delayed one of their
// kind included (tests wait for it to reach 0 as "every command answered"), and never one whose
// answer is out. Stop drops every one of them unanswered.
func TestPendingCountsQueuedCommands(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: time.Hour})
	for i := range 20 { // an answered command is no longer pending once its answer is out
		if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStopPublication, fmt.Sprintf(`{"publication_id":"pub-%d"}`, i)); r.OK {
			t.Fatal(raw)
		}
		if n := s.Pending(); n != 0 {
			t.Fatalf("%d commands pending once the only one sent was answered", n)
		}
	}
	s.SetCommandDelay(time.Hour)
	subj := capabilities.CommandSubject("kp", "alice", capabilities.CommandSubscribe)
	for range 3 {
		if err := nc.PublishRequest(subj, nc.NewRespInbox(), []byte(`{"session_id":"sess-x","stream_id":"video"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for s.Pending() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d commands pending, want the 3 received (one waiting out its delay, two queued behind it)", s.Pending())
		}
		time.Sleep(5 * time.Millisecond) // the simulator's count has no event to await
	}
	s.Stop()
	if n, cmds := s.Pending(), len(s.Commands()); n != 0 || cmds != 20 {
		t.Fatalf("after Stop: %d pending, %d commands carried out; want 0 and the 20 answered before the delay", n, cmds)
	}
}

// A source's recording modes change at runtime: a new generation showing them; a running publication
// keeps its mode, a new start asking for a mode withdrawn is RECORDING_MODE_INVALID.
func TestSetRecordingModesAtRuntime(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: time.Hour})
	next := changes(t, nc, "kp")
	session, _, _ := s.SessionID("front-door")
	body := func(v string) string {
		return `{"session_id":"` + session + `","stream_id":"video","variant_id":"` + v + `","output_profile":"p","recording_mode":"required"}`
	}
	if r, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, body("a")); !r.OK {
		t.Fatal(raw)
	}
	next()
	gen := s.Generation()
	if err := s.SetRecordingModes("front-door", []string{"disabled"}); err != nil {
		t.Fatal(err)
	}
	next()
	if s.Generation() != gen+1 {
		t.Errorf("generation %d, want %d", s.Generation(), gen+1)
	}
	src, _ := s.Capabilities().Source("front-door")
	if !slices.Equal(src.Publication.RecordingModes, []string{"disabled"}) {
		t.Errorf("recording modes %v, want [disabled]", src.Publication.RecordingModes)
	}
	if err := s.SetRecordingModes("front-door", []string{"disabled"}); err != nil || s.Generation() != gen+1 {
		t.Errorf("setting the same modes again: %v, generation %d", err, s.Generation())
	}
	if r, _ := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, body("b")); r.OK || r.Error.Code != capabilities.CodeRecordingModeInvalid {
		t.Errorf("start with a withdrawn mode: %+v", r)
	}
	if pubs := s.Publications(); len(pubs) != 1 || pubs[0].VariantID != "a" {
		t.Errorf("publications %+v, want the running one kept", pubs)
	}
	if err := s.SetRecordingModes("front-door", []string{"bogus"}); err == nil {
		t.Error("an invalid mode was taken")
	}
	if err := s.SetRecordingModes("nowhere", nil); err == nil {
		t.Error("an unknown source was taken")
	}
}

// A takeover (the publisher starting its variant again) replaces the publication: the variant is
// PENDING again, published by the same principal, and the subscriptions to it end, as when the
// publication stops (sim doc, capabilities.Commands.StartPublication doc).
func TestTakeoverEndsTheVariantsSubscriptions(t *testing.T) {
	s, nc := start(t, sim.Options{Sources: sim.Sources("front-door"), ReadyDelay: 10 * time.Millisecond})
	next := changes(t, nc, "kp")
	session, _, _ := s.SessionID("front-door")
	start := `{"session_id":"` + session + `","stream_id":"video","variant_id":"v","output_profile":"browser-h264-720p","recording_mode":"disabled"}`
	first, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, start)
	if !first.OK {
		t.Fatal(raw)
	}
	next() // started
	next() // READY
	sub, raw := request(t, nc, "kp", "bob", capabilities.CommandSubscribe, `{"session_id":"`+session+`","stream_id":"video","variant_id":"v"}`)
	if !sub.OK {
		t.Fatal(raw)
	}
	second, raw := request(t, nc, "kp", "alice", capabilities.CommandStartPublication, start)
	if !second.OK || second.PublicationID == first.PublicationID {
		t.Fatal(raw)
	}
	if subs := s.Subscriptions(); len(subs) != 0 {
		t.Errorf("subscriptions after the takeover: %+v, want none", subs)
	}
	if v, ok := s.Capabilities().Variant("front-door", "video", "v"); !ok || v.State != capabilities.StatePending || v.Publisher != "alice" {
		t.Errorf("variant after the takeover: %+v, %v; want PENDING, published by alice", v, ok)
	}
	if r, raw := request(t, nc, "kp", "bob", capabilities.CommandUnsubscribe, `{"subscription_id":"`+sub.SubscriptionID+`"}`); r.OK ||
		r.Error == nil || r.Error.Code != capabilities.CodeSubscriptionNotFound {
		t.Errorf("unsubscribe after the takeover: %s, want SUBSCRIPTION_ERROR_CODE_NOT_FOUND", raw)
	}
}
