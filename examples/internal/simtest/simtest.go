// Package simtest sets up what the examples' worker tests share: a state service with principals, a
// media server simulator, and a coordinator's client.
package simtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// Env is a running state service and simulator.
type Env struct {
	*testenv.Env
	Sim   *sim.Sim
	Admin *client.Client // the admin "coordinator"'s client
	Coord *coordinator.Coordinator
}

// Start starts the state service with the admin principal "coordinator", the admin principals
// admins and the media server's principal "media", then the simulator with sources; everything stops
// at the test's cleanup.
func Start(t *testing.T, sources []sim.SourceConfig, admins ...string) *Env {
	t.Helper()
	return StartWith(t, testenv.Options{}, sources, admins...)
}

// StartWith is Start with the state service's options o (a clock offset, bounds); its Principals
// are Start's.
func StartWith(t *testing.T, o testenv.Options, sources []sim.SourceConfig, admins ...string) *Env {
	t.Helper()
	ps := []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "media"}}
	for _, a := range admins {
		ps = append(ps, policy.Principal{ID: a, Admin: true})
	}
	o.Principals = ps
	env := testenv.Start(t, o)
	s := sim.New(env.Connect(t, "media"), sim.Options{Sources: sources, ReadyDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	admin, err := client.New(env.Connect(t, "coordinator"), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Env: env, Sim: s, Admin: admin, Coord: co}
}

// Run runs a worker's Run until the test's cleanup, or until the stop it returns: a graceful stop
// that waits (20 s at most) for Run to return.
func Run(t *testing.T, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = run(ctx) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the worker did not stop within 20 s")
		}
	}
	t.Cleanup(stop)
	return stop
}

// WaitFor polls cond (the simulator's state has no events to await) until it holds, for at most d.
func WaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("%s: not within %v", what, d)
	}
}

// Within reports whether cond holds within d, looking every 20 ms: WaitFor for a test that says more
// when it does not.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Throughout checks, every 50 ms for d, that nothing happens that must not: check returns what it
// saw and whether that is still fine, and the test fails at the first that is not. There is no event
// for nothing happening, so a while is watched.
func Throughout(t *testing.T, d time.Duration, check func() (what string, ok bool)) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if what, ok := check(); !ok {
			t.Fatal(what)
		}
	}
}

// Gate is the media server's network: cut, its connection drops and no reconnect gets through until
// it is opened again. The media server keeps its state meanwhile (same sessions, publications and
// subscriptions): a media server that goes silent and comes back.
type Gate struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// Dial is the media server connection's dialer (nats.SetCustomDialer).
func (g *Gate) Dial(network, address string) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		return nil, errors.New("gate: cut")
	}
	c, err := net.Dial(network, address)
	if err == nil {
		g.conns = append(g.conns, c)
	}
	return c, err
}

// SetCut cuts the network (closing its connections) or opens it again.
func (g *Gate) SetCut(cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = cut
	if cut {
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.conns = nil
	}
}

// ReplaceSim stops the environment's simulator and starts a new one (new sessions, generations
// after the old one's) as the principal "media"; with g, its connection goes through g.
func ReplaceSim(t *testing.T, e *Env, sources []sim.SourceConfig, g *Gate) *sim.Sim {
	t.Helper()
	return replaceSim(t, e, sources, g, 0)
}

// RestartSlow replaces e's simulator as ReplaceSim does, with one that answers every command delay
// after it came, from its start on: a media server restarted, and slow.
func RestartSlow(t *testing.T, e *Env, sources []sim.SourceConfig, delay time.Duration) *sim.Sim {
	t.Helper()
	return replaceSim(t, e, sources, nil, delay)
}

func replaceSim(t *testing.T, e *Env, sources []sim.SourceConfig, g *Gate, delay time.Duration) *sim.Sim {
	t.Helper()
	after := e.Sim.Generation()
	e.Sim.Stop()
	opts := []nats.Option{nats.CustomInboxPrefix(wire.InboxPrefix("media")), nats.Name("media"),
		nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}
	if g != nil {
		opts = append(opts, nats.SetCustomDialer(g))
	}
	nc, err := nats.Connect(e.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := sim.New(nc, sim.Options{Sources: sources, ReadyDelay: 50 * time.Millisecond, After: after})
	s.SetCommandDelay(delay)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	e.Sim = s
	return s
}

// CountCommands counts the commands cmd of principal the simulator received.
func CountCommands(s *sim.Sim, principal, cmd string) int {
	n := 0
	for _, c := range s.Commands() {
		if c.Principal == principal && string(c.Command) == cmd {
			n++
		}
	}
	return n
}

// FastTracker are capabilities tracker options under which a media server's silence reads as stale
// within a second: the workers under test take them, and Silence's tracker too.
var FastTracker = capabilities.TrackerOptions{ResyncInterval: 100 * time.Millisecond, FetchTimeout: 200 * time.Millisecond}

// Silence cuts g and returns once a tracker with FastTracker's options reads the media server's
// snapshot as stale, as the workers' trackers then do. The speak it returns opens g and returns once
// that tracker is current again.
func (g *Gate) Silence(t *testing.T, e *Env) (speak func()) {
	t.Helper()
	probe := capabilities.NewTracker(e.Connect(t, "coordinator"), FastTracker)
	if err := probe.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(probe.Stop)
	g.SetCut(true)
	WaitFor(t, 10*time.Second, "the silence read as stale", probe.Stale)
	return func() {
		t.Helper()
		g.SetCut(false)
		WaitFor(t, 10*time.Second, "the media server current again", func() bool { return !probe.Stale() })
	}
}

// LogTap is a slog handler that keeps every record a worker logs, Debug included, so that a test can
// tell what was said and at which level. Its zero value is ready; use it as slog.New(tap).
type LogTap struct {
	mu      sync.Mutex
	records []LogRecord
}

// LogRecord is a record LogTap kept: its time, level, message and attributes.
type LogRecord struct {
	Time  time.Time
	Level slog.Level
	Msg   string
	Attrs string // key=value ..., as a text handler writes them
}

// Enabled is true for every level: repeats logged at Debug are what a test counts.
func (*LogTap) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r's level and message.
func (l *LogTap) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var attrs strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&attrs, " %s=%v", a.Key, a.Value)
		return true
	})
	l.records = append(l.records, LogRecord{r.Time, r.Level, r.Message, strings.TrimSpace(attrs.String())})
	return nil
}

// String is every record kept, one a line: what a failing test shows of what the worker said.
func (l *LogTap) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.records {
		fmt.Fprintf(&b, "%s %s %s %s\n", r.Time.Format("15:04:05.000"), r.Level, r.Msg, r.Attrs)
	}
	return b.String()
}

// WithAttrs returns l: the attributes are not kept.
func (l *LogTap) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l.
func (l *LogTap) WithGroup(string) slog.Handler { return l }

// Count returns how many records with message msg were logged at level or above.
func (l *LogTap) Count(msg string, level slog.Level) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.records {
		if r.Msg == msg && r.Level >= level {
			n++
		}
	}
	return n
}
