package capabilities_test

import (
	"context"
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

// testTimeout bounds every wait in the tests.
const testTimeout = 10 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// env is an in-process NATS server with a media simulator on it.
type env struct {
	t   testing.TB
	url string
	sim *sim.Sim
}

// startNATS starts an in-process nats-server, shut down at cleanup, and returns its URL.
func startNATS(t testing.TB) string {
	t.Helper()
	return natstest.Start(t, natsserver.Options{}).ClientURL()
}

// connect opens a NATS connection closed at cleanup.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newEnv starts NATS and a simulator (sources front-door and back-yard unless o names others, ready
// delay 20 ms unless o sets one).
func newEnv(t testing.TB, o sim.Options) *env {
	t.Helper()
	url := startNATS(t)
	if o.Sources == nil {
		o.Sources = sim.Sources("front-door", "back-yard")
	}
	if o.ReadyDelay == 0 {
		o.ReadyDelay = 20 * time.Millisecond
	}
	s := sim.New(connect(t, url), o)
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatalf("sim start: %v", err)
	}
	t.Cleanup(s.Stop)
	return &env{t: t, url: url, sim: s}
}

// tracker starts a tracker on its own connection; it stops at cleanup.
func (e *env) tracker(opts capabilities.TrackerOptions, hook func(gen uint64, err error)) (*capabilities.Tracker, *nats.Conn) {
	e.t.Helper()
	nc := connect(e.t, e.url)
	tr := capabilities.NewTracker(nc, opts)
	if hook != nil {
		capabilities.SetFetchHook(tr, hook)
	}
	if err := tr.Start(ctxT(e.t)); err != nil {
		e.t.Fatalf("tracker start: %v", err)
	}
	e.t.Cleanup(tr.Stop)
	return tr, nc
}

// commands returns a command client for principal on its own connection.
func (e *env) commands(principal string) *capabilities.Commands {
	e.t.Helper()
	c, err := capabilities.NewCommands(connect(e.t, e.url), principal)
	if err != nil {
		e.t.Fatalf("NewCommands: %v", err)
	}
	return c
}

// session returns the current session of a source, which must exist.
func (e *env) session(sourceID string) string {
	e.t.Helper()
	id, _, ok := e.sim.SessionID(sourceID)
	if !ok {
		e.t.Fatalf("no source %q", sourceID)
	}
	return id
}

// publish starts a publication of variant on front-door/video as c and fails the test on error.
func (e *env) publish(c *capabilities.Commands, variantID string) capabilities.StartPublicationReply {
	e.t.Helper()
	r, err := c.StartPublication(ctxT(e.t), capabilities.StartPublicationRequest{
		SessionID: e.session("front-door"), StreamID: "video", VariantID: variantID,
		OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled,
	})
	if err != nil {
		e.t.Fatalf("StartPublication(%s) as %s: %v", variantID, c.Principal(), err)
	}
	return r
}

// fetchLog collects a tracker's fetches for a test.
type fetchLog chan fetch

type fetch struct {
	gen uint64
	err error
}

func newFetchLog() fetchLog { return make(fetchLog, 1024) }

func (l fetchLog) hook(gen uint64, err error) {
	select {
	case l <- fetch{gen, err}:
	default:
	}
}

// next returns the next fetch, failing the test after testTimeout.
func (l fetchLog) next(t testing.TB) fetch {
	t.Helper()
	select {
	case f := <-l:
		return f
	case <-time.After(testTimeout):
		t.Fatal("no fetch")
		return fetch{}
	}
}

// drain discards the fetches logged so far.
func (l fetchLog) drain() {
	for {
		select {
		case <-l:
		default:
			return
		}
	}
}

// wireView returns c without what the tracker adds to what it fetched (Variant.ReadySince): what
// the media server answered.
func wireView(c capabilities.ServerCapabilities) capabilities.ServerCapabilities {
	c = c.Clone()
	for i := range c.Sources {
		for j := range c.Sources[i].Streams {
			for k := range c.Sources[i].Streams[j].Variants {
				c.Sources[i].Streams[j].Variants[k].ReadySince = 0
			}
		}
	}
	return c
}
