package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMediasimServesUntilCancelled(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{
		{Name: "media", Password: "m"}, {Name: "alice", Password: "a"},
	}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--nats-url", ns.ClientURL(), "--user", "media", "--password", "m",
			"--sources", "front-door,back-yard", "--ready-delay", "10ms"}, &logs)
	}()

	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("alice", "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{RefetchBackoff: 10 * time.Millisecond})
	startCtx, startCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer startCancel()
	if err := tr.Start(startCtx); err != nil {
		t.Fatalf("tracker: %v (logs: %s)", err, logs.String())
	}
	defer tr.Stop()
	session, online, ok := tr.Resolve("back-yard")
	if !ok || !online {
		t.Fatalf("back-yard not resolved: %+v", tr.Current())
	}
	cmds, err := capabilities.NewCommands(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmds.StartPublication(startCtx, capabilities.StartPublicationRequest{SessionID: session, StreamID: "video",
		VariantID: "browser-h264-720p", OutputProfile: "browser-h264-720p", RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WaitReady(startCtx, "back-yard", "video", "browser-h264-720p"); err != nil {
		t.Fatal(err)
	}
	if err := cmds.StopPublication(startCtx, "pub-nope"); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("StopPublication: %v", err)
	}

	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit code %d", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mediasim did not stop")
	}
	out := logs.String()
	for _, want := range []string{"command ok", "principal=alice", "command=start_publication", "command failed", "PUBLICATION_ERROR_CODE_NOT_FOUND", "stopping"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestMediasimFlags(t *testing.T) {
	var out syncBuffer
	if c := run(context.Background(), []string{"--fail", "front-door/video"}, &out); c != 2 {
		t.Errorf("bad --fail: exit %d", c)
	}
	if c := run(context.Background(), []string{"extra"}, &out); c != 2 {
		t.Errorf("extra argument: exit %d", c)
	}
	if c := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--sources", "a"}, &out); c != 1 {
		t.Errorf("unreachable NATS: exit %d", c)
	}
}

// A restarted mediasim announces generations above the ones its predecessor announced (SPEC section
// 12: generations only grow), so a tracker that followed the first one installs the second one's
// capabilities, with its new sessions, without a restart of its own.
func TestMediasimRestartKeepsGenerationsGrowing(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{RefetchBackoff: 10 * time.Millisecond})
	defer tr.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var lastGen uint64
	var lastSession string
	for i := range 2 {
		var logs syncBuffer
		runCtx, stop := context.WithCancel(ctx)
		code := make(chan int, 1)
		go func() { code <- run(runCtx, []string{"--nats-url", ns.ClientURL(), "--sources", "front-door"}, &logs) }()
		if i == 0 {
			if err := tr.Start(ctx); err != nil {
				t.Fatalf("tracker: %v (logs: %s)", err, logs.String())
			}
		}
		if err := tr.WaitFor(ctx, func(c *capabilities.ServerCapabilities) bool {
			s, ok := c.Source("front-door")
			return ok && s.SessionID != lastSession && c.Generation > lastGen
		}); err != nil {
			t.Fatalf("instance %d: the tracker never installed its capabilities: %v (held %+v; logs: %s)", i+1, err, tr.Current(), logs.String())
		}
		lastGen = tr.Generation()
		lastSession, _, _ = tr.Resolve("front-door")
		stop()
		if c := <-code; c != 0 {
			t.Fatalf("instance %d: exit %d: %s", i+1, c, logs.String())
		}
	}
}

// Flags the simulator cannot run with are usage errors (exit 2), found before it connects: they were
// found only at Start, after connecting, and exited 1 like an unreachable NATS server (or, with no
// server at all, that is all they said).
func TestMediasimBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--ready-delay", "-1s"},
		{"--sources", "front door"},
		{"--sources", "a,a"},
		{"--prefix", "kp.*"},
		{"--fail", "a/b c/d"},
	} {
		var out syncBuffer
		if c := run(context.Background(), append(args, "--nats-url", "nats://127.0.0.1:1"), &out); c != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, c, out.String())
		}
	}
}
