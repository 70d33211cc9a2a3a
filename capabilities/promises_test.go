package capabilities_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// Tests of promises the doc comments make that no other test checked.

// Before its first snapshot a tracker shows nothing: Current and Snapshot the zero value and not
// stale, Generation 0, Resolve not found (Current, Stale, Generation, Resolve docs).
func TestTrackerBeforeItsFirstSnapshot(t *testing.T) {
	tr := capabilities.NewTracker(connect(t, startNATS(t)), capabilities.TrackerOptions{})
	defer tr.Stop()
	if c := tr.Current(); c.Generation != 0 || c.Sources != nil {
		t.Errorf("Current before the first snapshot = %+v, want the zero value", c)
	}
	if c, stale := tr.Snapshot(); c.Generation != 0 || c.Sources != nil || stale {
		t.Errorf("Snapshot before the first snapshot = %+v, %v; want the zero value and false", c, stale)
	}
	if tr.Stale() || tr.Generation() != 0 {
		t.Errorf("Stale %v, Generation %d before the first snapshot; want false, 0", tr.Stale(), tr.Generation())
	}
	if s, online, ok := tr.Resolve("front-door"); ok || online || s != "" {
		t.Errorf("Resolve before the first snapshot = %q, %v, %v; want not found", s, online, ok)
	}
}

// Start may be called once; a second Start of a running tracker is an error, Start after Stop is
// ErrTrackerStopped, Stop may be called before Start and more than once (Start, Stop docs).
func TestTrackerStartOnceStopAnyTime(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	if err := tr.Start(ctxT(t)); err == nil {
		t.Error("a second Start of a running tracker succeeded")
	}
	if tr.Generation() == 0 {
		t.Error("the second Start disturbed the running tracker")
	}
	tr.Stop()
	tr.Stop()
	if err := tr.Start(ctxT(t)); !errors.Is(err, capabilities.ErrTrackerStopped) {
		t.Errorf("Start after Stop = %v, want ErrTrackerStopped", err)
	}

	early := capabilities.NewTracker(connect(t, e.url), capabilities.TrackerOptions{})
	early.Stop()
	if err := early.Start(ctxT(t)); !errors.Is(err, capabilities.ErrTrackerStopped) {
		t.Errorf("Start after a Stop before Start = %v, want ErrTrackerStopped", err)
	}
	if err := early.WaitGeneration(ctxT(t), 1); !errors.Is(err, capabilities.ErrTrackerStopped) {
		t.Errorf("a wait on a tracker stopped before Start = %v, want ErrTrackerStopped", err)
	}
}

// Invalid options make Start fail, without a goroutine left behind (NewTracker doc).
func TestTrackerInvalidOptionsFailStart(t *testing.T) {
	nc := connect(t, startNATS(t))
	for name, tc := range map[string]struct {
		nc *nats.Conn
		o  capabilities.TrackerOptions
	}{
		"nil connection":          {nil, capabilities.TrackerOptions{}},
		"invalid prefix":          {nc, capabilities.TrackerOptions{Prefix: "kp.*"}},
		"negative RefetchBackoff": {nc, capabilities.TrackerOptions{RefetchBackoff: -time.Second}},
		"negative FetchTimeout":   {nc, capabilities.TrackerOptions{FetchTimeout: -time.Second}},
	} {
		tr := capabilities.NewTracker(tc.nc, tc.o)
		if err := tr.Start(ctxT(t)); err == nil || errors.Is(err, capabilities.ErrTrackerStopped) {
			t.Errorf("%s: Start = %v, want the options' error", name, err)
		}
		tr.Stop()
	}
}

// On a stopped tracker WaitFor returns ErrTrackerStopped at once, without calling cond (WaitFor doc).
func TestWaitForOnAStoppedTrackerCallsNoCond(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	tr.Stop()
	called := false
	err := tr.WaitFor(ctxT(t), func(*capabilities.ServerCapabilities) bool { called = true; return true })
	if !errors.Is(err, capabilities.ErrTrackerStopped) || called {
		t.Fatalf("WaitFor on a stopped tracker = %v, cond called %v; want ErrTrackerStopped without a call", err, called)
	}
}

// WaitGeneration returns once the tracker holds the generation, stale or not (WaitGeneration doc).
func TestWaitGenerationAnswersWhileStale(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	gen := tr.Generation()
	stale, cancel := tr.Subscribe()
	defer cancel()
	e.sim.Stop() // nobody answers caps.v1.get: the next fetch makes the snapshot stale
	tr.Refresh()
	for !tr.Stale() {
		select {
		case <-stale:
		case <-ctxT(t).Done():
			t.Fatal("the snapshot did not go stale once the media server was gone")
		}
	}
	ctx, cancelWait := context.WithTimeout(ctxT(t), time.Second)
	defer cancelWait()
	if err := tr.WaitGeneration(ctx, gen); err != nil {
		t.Fatalf("WaitGeneration(%d) of a stale snapshot at that generation = %v, want nil", gen, err)
	}
}

// The channel of Subscribe is never closed, not by its cancel and not by Stop (Subscribe doc).
func TestTrackerSubscriptionChannelIsNeverClosed(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	ch, cancel := tr.Subscribe()
	cancel()
	tr.Stop()
	cancel() // twice: harmless
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("the subscription channel was closed")
		}
		t.Fatal("a cancelled subscription was notified")
	default:
	}
}

// Current returns a copy: changing it changes nothing the tracker holds (Current doc).
func TestTrackerCurrentIsACopy(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	c := tr.Current()
	if len(c.Sources) == 0 || len(c.Sources[0].Streams) == 0 || len(c.Sources[0].Streams[0].Variants) == 0 {
		t.Fatalf("capabilities %+v: want a source with a stream and a variant", c)
	}
	want := c.Clone()
	c.Sources[0].Online = !c.Sources[0].Online
	c.Sources[0].Streams[0].Variants[0].State = capabilities.StateFailed
	c.Sources[0].Publication.RecordingModes = append(c.Sources[0].Publication.RecordingModes[:0], "changed")
	got := tr.Current()
	if got.Sources[0].Online != want.Sources[0].Online || got.Sources[0].Streams[0].Variants[0] != want.Sources[0].Streams[0].Variants[0] ||
		fmt.Sprint(got.Sources[0].Publication.RecordingModes) != fmt.Sprint(want.Sources[0].Publication.RecordingModes) {
		t.Fatalf("changing a copy from Current changed the tracker's capabilities: %+v, was %+v", got, want)
	}
}

// Clone is a deep copy (Clone docs).
func TestCloneIsDeep(t *testing.T) {
	orig := capabilities.ServerCapabilities{Generation: 3, Sources: []capabilities.Source{{SourceID: "front-door",
		Streams:     []capabilities.Stream{{StreamID: "video", Variants: []capabilities.Variant{{VariantID: "v", State: capabilities.StateReady}}}},
		Publication: capabilities.Publication{RecordingModes: []string{"inherit"}}}}}
	c := orig.Clone()
	c.Sources[0].SourceID = "x"
	c.Sources[0].Streams[0].StreamID = "x"
	c.Sources[0].Streams[0].Variants[0].State = capabilities.StateFailed
	c.Sources[0].Publication.RecordingModes[0] = "x"
	s := orig.Sources[0]
	if s.SourceID != "front-door" || s.Streams[0].StreamID != "video" || s.Streams[0].Variants[0].State != capabilities.StateReady ||
		s.Publication.RecordingModes[0] != "inherit" {
		t.Fatalf("changing the clone changed the original: %+v", orig)
	}
	if (capabilities.ServerCapabilities{}).Clone().Sources != nil {
		t.Error("the clone of no sources has sources")
	}
}

// The small predicates: VariantState.Valid, Command.Valid, AllCommands, RecordingModes and
// ValidRecordingMode say what their docs say.
func TestValidityPredicates(t *testing.T) {
	for s, want := range map[capabilities.VariantState]bool{"PENDING": true, "READY": true, "FAILED": true, "ready": false, "": false} {
		if s.Valid() != want {
			t.Errorf("VariantState(%q).Valid() != %v", s, want)
		}
	}
	if cmds := capabilities.AllCommands(); len(cmds) != 4 {
		t.Errorf("AllCommands = %v, want the four commands", cmds)
	} else {
		for _, c := range cmds {
			if !c.Valid() {
				t.Errorf("%q is not Valid", c)
			}
		}
	}
	if capabilities.Command("reboot").Valid() || capabilities.Command("").Valid() {
		t.Error("an unknown command is Valid")
	}
	modes := capabilities.RecordingModes()
	if fmt.Sprint(modes) != "[inherit disabled required]" {
		t.Errorf("RecordingModes = %v", modes)
	}
	for _, m := range modes {
		if !capabilities.ValidRecordingMode(m) {
			t.Errorf("ValidRecordingMode(%q) = false", m)
		}
	}
	if capabilities.ValidRecordingMode("") || capabilities.ValidRecordingMode("Inherit") {
		t.Error("ValidRecordingMode accepts a missing or misspelt mode")
	}
}

// NewCommands refuses what it cannot work with: a nil connection, an invalid principal or prefix, a
// request timeout that is not positive (NewCommands, WithPrefix, WithRequestTimeout docs).
func TestNewCommandsValidates(t *testing.T) {
	nc := connect(t, startNATS(t))
	for name, f := range map[string]func() (*capabilities.Commands, error){
		"nil connection":    func() (*capabilities.Commands, error) { return capabilities.NewCommands(nil, "alice") },
		"invalid principal": func() (*capabilities.Commands, error) { return capabilities.NewCommands(nc, "a.b") },
		"invalid prefix": func() (*capabilities.Commands, error) {
			return capabilities.NewCommands(nc, "alice", capabilities.WithPrefix("kp.>"))
		},
		"zero timeout": func() (*capabilities.Commands, error) {
			return capabilities.NewCommands(nc, "alice", capabilities.WithRequestTimeout(0))
		},
	} {
		if c, err := f(); err == nil || c != nil {
			t.Errorf("%s: NewCommands = %v, %v; want an error", name, c, err)
		}
	}
	c, err := capabilities.NewCommands(nc, "alice", capabilities.WithPrefix("acme.kp"))
	if err != nil || c.Principal() != "alice" {
		t.Fatalf("NewCommands with a prefix: %v, %v", c, err)
	}
	// The prefix is the one the commands go to.
	sub, err := nc.Subscribe("acme.kp.media.v1.alice.stop_publication", func(m *nats.Msg) { _ = m.Respond([]byte(`{"ok":true}`)) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.StopPublication(ctxT(t), "pub-1"); err != nil {
		t.Fatalf("StopPublication under the prefix acme.kp: %v", err)
	}
}

// The request timeout bounds a command whose context has no deadline, and a context deadline always
// wins, a later one included (WithRequestTimeout doc).
func TestCommandsRequestTimeoutAndContextDeadline(t *testing.T) {
	nc := connect(t, startNATS(t))
	const timeout = 100 * time.Millisecond
	// A media server that answers three request timeouts late.
	sub, err := nc.Subscribe(capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandStopPublication), func(m *nats.Msg) {
		go func() {
			<-time.After(3 * timeout)
			_ = m.Respond([]byte(`{"ok":true}`))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := capabilities.NewCommands(nc, "alice", capabilities.WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopPublication(context.Background(), "pub-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a late answer without a context deadline = %v, want the request timeout (DeadlineExceeded)", err)
	}
	if err := c.StopPublication(ctxT(t), "pub-1"); err != nil {
		t.Errorf("a late answer within the context's deadline = %v, want it waited for", err)
	}
}

// errors.Is compares by code and never panics, whatever target it is given (Error.Is doc): a typed
// nil *Error is no code at all.
func TestErrorIsWithANilTarget(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", capabilities.Errorf(capabilities.CodePublicationConflict, "owned by bob"))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("errors.Is with a nil *Error target panicked: %v", r)
		}
	}()
	if errors.Is(err, (*capabilities.Error)(nil)) {
		t.Error("errors.Is matched a nil *Error")
	}
}
