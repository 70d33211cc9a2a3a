package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
)

// The tests in this file stand in for a media server that is not the project's simulator: one that
// speaks SPEC section 12 in ways the simulator does not (its exact reply shapes, a refusal of a
// capability fetch, variants it keeps listing while their source is offline). The media server is
// outside the project; this is the least of one: a NATS responder with canned replies.

// cannedServer answers the subjects it is given with the replies set for them, in order, repeating
// the last.
type cannedServer struct {
	nc *nats.Conn
	mu sync.Mutex
	// replies by subject; the last one repeats
	replies map[string][]string
	got     map[string][]string // request bodies by subject
	arrived chan struct{}       // closed and replaced on every request
}

// noReply, as one of the replies of answer, makes the server receive that request and answer nothing:
// a reply lost in transit, or a media server that hangs or stops with the request in hand.
const noReply = ""

func newCannedServer(t *testing.T, url string) *cannedServer {
	t.Helper()
	return &cannedServer{nc: connect(t, url), replies: map[string][]string{}, got: map[string][]string{}, arrived: make(chan struct{})}
}

// await returns once the server has received n requests on subject.
func (s *cannedServer) await(t *testing.T, subject string, n int) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		s.mu.Lock()
		got, arrived := len(s.got[subject]), s.arrived
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-arrived:
		case <-deadline:
			t.Fatalf("%s: %d requests received, want %d", subject, got, n)
		}
	}
}

// answer makes the server answer subject with replies, one per request, the last repeated (noReply:
// no answer).
func (s *cannedServer) answer(t *testing.T, subject string, replies ...string) {
	t.Helper()
	s.mu.Lock()
	_, subscribed := s.replies[subject]
	s.replies[subject] = replies
	s.mu.Unlock()
	if subscribed {
		return
	}
	sub, err := s.nc.Subscribe(subject, func(m *nats.Msg) {
		s.mu.Lock()
		rs := s.replies[subject]
		r := rs[0]
		if len(rs) > 1 {
			s.replies[subject] = rs[1:]
		}
		s.got[subject] = append(s.got[subject], string(m.Data))
		close(s.arrived)
		s.arrived = make(chan struct{})
		s.mu.Unlock()
		if r != noReply {
			_ = m.Respond([]byte(r))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// announce publishes a changed announcement of gen.
func (s *cannedServer) announce(t *testing.T, gen uint64) {
	t.Helper()
	data, _ := json.Marshal(capabilities.Changed{Generation: gen})
	if err := s.nc.Publish(capabilities.ChangedSubject(capabilities.DefaultPrefix), data); err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func capsJSON(t *testing.T, c capabilities.ServerCapabilities) string {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// oneSource is a capabilities snapshot of source front-door with one video variant.
func oneSource(gen uint64, session string, online bool, v capabilities.Variant) capabilities.ServerCapabilities {
	return capabilities.ServerCapabilities{Generation: gen, Sources: []capabilities.Source{{
		SourceID: "front-door", SessionID: session, Online: online,
		Streams:     []capabilities.Stream{{StreamID: "video", MediaKind: capabilities.MediaKindVideo, Variants: []capabilities.Variant{v}}},
		Publication: capabilities.Publication{RecordingModes: capabilities.RecordingModes()},
	}}}
}

// A reply to caps.v1.get that is not a ServerCapabilities (a refusal while the media server starts,
// a JSON null) is a failed fetch, retried; it is never installed as an empty snapshot that says no
// source exists.
func TestTrackerRefusesAFetchThatIsNotCapabilities(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	v := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 1920, Height: 1080, State: capabilities.StateReady}
	srv.answer(t, capabilities.GetSubject(capabilities.DefaultPrefix),
		`{"ok":false,"error":{"code":"MEDIA_ERROR_CODE_UNAVAILABLE","message":"starting"}}`,
		`{"code":"MEDIA_ERROR_CODE_UNAVAILABLE","message":"starting"}`,
		`null`,
		// More than the model knows, even under names a refusal uses, is ignored.
		`{"error":"none","vendor":{"build":7},`+capsJSON(t, oneSource(4, "sess-1", true, v))[1:])
	log := newFetchLog()
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{RefetchBackoff: time.Millisecond})
	capabilities.SetFetchHook(tr, log.hook)
	t.Cleanup(tr.Stop)
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if g := tr.Generation(); g != 4 {
		t.Errorf("Start returned holding generation %d, want the 4 of the first real snapshot", g)
	}
	if sess, online, ok := tr.Resolve("front-door"); !ok || !online || sess != "sess-1" {
		t.Errorf("Resolve(front-door) = %q, %v, %v after Start", sess, online, ok)
	}
	for i := range 3 {
		if f := log.next(t); f.err == nil {
			t.Errorf("fetch %d of a reply that is not capabilities: no error (generation %d)", i+1, f.gen)
		}
	}
}

// A variant of an offline source cannot be subscribed to, whatever state a media server keeps listing
// for it: WaitReady waits for the source to be online.
func TestWaitReadyWaitsForTheSourceOnline(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	offline := capabilities.Variant{VariantID: "original", Codec: "h264", Width: 640, Height: 360, State: capabilities.StateReady}
	srv.answer(t, capabilities.GetSubject(capabilities.DefaultPrefix), capsJSON(t, oneSource(1, "sess-1", false, offline)))
	tr := capabilities.NewTracker(connect(t, url), capabilities.TrackerOptions{})
	t.Cleanup(tr.Stop)
	if err := tr.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A cancelled context still sees the snapshot held: a wait already satisfied returns at once.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if v, err := tr.WaitReady(cancelled, "front-door", "video", "original"); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady on a variant of an offline source = %+v, %v; want it to wait (context.Canceled)", v, err)
	}

	online := offline
	online.Width, online.Height = 1280, 720
	srv.answer(t, capabilities.GetSubject(capabilities.DefaultPrefix), capsJSON(t, oneSource(2, "sess-2", true, online)))
	srv.announce(t, 2)
	v, err := tr.WaitReady(ctxT(t), "front-door", "video", "original")
	if err != nil || v.Width != 1280 {
		t.Fatalf("WaitReady once the source is online = %+v, %v", v, err)
	}
}

// A media server that answers commands as SPEC section 12 writes them, a bare result
// ({subscription_id, variant_id}) and a bare error ({code, message}), is understood as well as one
// that wraps them in the ok envelope.
func TestCommandsUnderstandBareReplies(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	c, err := capabilities.NewCommands(connect(t, url), "alice")
	if err != nil {
		t.Fatal(err)
	}
	subj := func(cmd capabilities.Command) string {
		return capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", cmd)
	}
	srv.answer(t, subj(capabilities.CommandSubscribe),
		`{"subscription_id":"sub-1","variant_id":"original"}`,
		`{"code":"SUBSCRIPTION_ERROR_CODE_VARIANT_NOT_READY","message":"variant original is PENDING"}`)
	r, err := c.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: "sess-1", StreamID: "video"})
	if err != nil || r.SubscriptionID != "sub-1" || r.VariantID != "original" {
		t.Errorf("Subscribe with a bare result = %+v, %v", r, err)
	}
	_, err = c.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: "sess-1", StreamID: "video"})
	if !errors.Is(err, capabilities.ErrVariantNotReady) {
		t.Errorf("Subscribe with a bare error = %v, want ErrVariantNotReady", err)
	}
	var ce *capabilities.Error
	if !errors.As(err, &ce) || ce.Message != "variant original is PENDING" {
		t.Errorf("bare error decoded as %#v", err)
	}

	srv.answer(t, subj(capabilities.CommandStartPublication),
		`{"publication_id":"pub-1","variant_id":"browser-h264-720p"}`,
		`{"code":"PUBLICATION_ERROR_CODE_CONFLICT","message":"owned by bob"}`)
	req := capabilities.StartPublicationRequest{SessionID: "sess-1", StreamID: "video", VariantID: "browser-h264-720p",
		OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled}
	if p, err := c.StartPublication(ctxT(t), req); err != nil || p.PublicationID != "pub-1" {
		t.Errorf("StartPublication with a bare result = %+v, %v", p, err)
	}
	if _, err := c.StartPublication(ctxT(t), req); !errors.Is(err, capabilities.ErrPublicationConflict) {
		t.Errorf("StartPublication with a bare error = %v, want ErrPublicationConflict", err)
	}

	srv.answer(t, subj(capabilities.CommandUnsubscribe), `{}`, `{"code":"SUBSCRIPTION_ERROR_CODE_NOT_FOUND","message":"no sub-1"}`)
	if err := c.Unsubscribe(ctxT(t), "sub-1"); err != nil {
		t.Errorf("Unsubscribe answered {} = %v", err)
	}
	if err := c.Unsubscribe(ctxT(t), "sub-1"); !errors.Is(err, capabilities.ErrSubscriptionNotFound) {
		t.Errorf("Unsubscribe with a bare error = %v, want ErrSubscriptionNotFound", err)
	}

	// What is neither an envelope nor a bare reply stays a protocol error, never a success.
	srv.answer(t, subj(capabilities.CommandStopPublication), `null`, `[]`, `{"ok":false}`, `{"ok":true,"error":{"code":"X"}}`)
	for range 4 {
		err := c.StopPublication(ctxT(t), "pub-1")
		if err == nil || capabilities.CodeOf(err) != "" {
			t.Errorf("StopPublication with a malformed reply = %v, want a protocol error", err)
		}
	}
}
