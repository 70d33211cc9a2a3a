package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/syncbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMediasimServesUntilCancelled(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{
		{Name: "media", Password: "m"}, {Name: "alice", Password: "a"},
	}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
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
	tr := startTracker(t, nc, &logs)
	session, online, ok := tr.Resolve("back-yard")
	if !ok || !online {
		t.Fatalf("back-yard not resolved: %+v", tr.Current())
	}
	cmds, err := capabilities.NewCommands(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	startCtx, startCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer startCancel()
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
	var out syncbuf.Buffer
	if c := run(context.Background(), []string{"--fail", "front-door/video"}, &out); c != 2 {
		t.Errorf("bad --fail: exit %d", c)
	}
	if c := run(context.Background(), []string{"extra"}, &out); c != 2 {
		t.Errorf("extra argument: exit %d", c)
	}
}

// logWatch is a log that tells each write: a test waits for a log line as an event.
type logWatch struct {
	syncbuf.Buffer
	wrote chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{wrote: make(chan struct{}, 1)} }

func (l *logWatch) Write(p []byte) (int, error) {
	n, err := l.Buffer.Write(p)
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return n, err
}

// await waits until the log holds n lines with s, failing when code delivers first (the simulator
// exited) or after d.
func (l *logWatch) await(t *testing.T, s string, n int, code <-chan int, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for strings.Count(l.String(), s) < n {
		select {
		case <-l.wrote:
		case c := <-code:
			t.Fatalf("mediasim exited %d before %d lines with %q:\n%s", c, n, s, l.String())
		case <-deadline:
			t.Fatalf("no %d lines with %q within %v:\n%s", n, s, d, l.String())
		}
	}
}

// Started before the NATS server is up (before stated, as the README's commands may be), mediasim
// waits for it for as long as it takes, as its doc says: it gave up after 10 s ("sim: flush: context
// deadline exceeded", exit 1). Stopped while it waits, it exits 0.
func TestMediasimWaitsForNATS(t *testing.T) {
	addr := natstest.ReserveAddr(t) // nothing listens there until the server starts below

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLogWatch()
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"--nats-url", "nats://" + addr, "--sources", "front-door"}, logs) }()
	// Six failed attempts, one each 2 s: longer than the 10 s it waited.
	logs.await(t, "NATS not reachable", 6, code, 30*time.Second)
	ns := natstest.Start(t, natsserver.Options{Listen: addr})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{RefetchBackoff: 10 * time.Millisecond})
	defer tr.Stop()
	startCtx, startCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer startCancel()
	if err := tr.Start(startCtx); err != nil {
		t.Fatalf("tracker: %v (logs: %s)", err, logs.String())
	}
	if err := tr.WaitFor(startCtx, func(c *capabilities.ServerCapabilities) bool { _, ok := c.Source("front-door"); return ok }); err != nil {
		t.Fatalf("the simulator's capabilities never came: %v (logs: %s)", err, logs.String())
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d after it was stopped:\n%s", c, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mediasim did not stop")
	}

	// Stopped while it still waits for NATS: exit 0, nothing failed.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	logs2 := newLogWatch()
	code2 := make(chan int, 1)
	go func() { code2 <- run(ctx2, []string{"--nats-url", "nats://127.0.0.1:1", "--sources", "a"}, logs2) }()
	logs2.await(t, "NATS not reachable", 1, code2, 30*time.Second)
	cancel2()
	select {
	case c := <-code2:
		if c != 0 {
			t.Fatalf("exit %d when stopped while waiting for NATS:\n%s", c, logs2.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mediasim did not stop while waiting for NATS")
	}
}

// NATS refusing the simulator's credentials ends the wait at once with what NATS said: it waited out
// its 10 s and exited with "sim: flush: nats: connection closed".
func TestMediasimRefusedCredentialsSayWhy(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{Users: []natsserver.User{{Name: "media", Password: "m"}}})
	logs := newLogWatch()
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"--nats-url", ns.ClientURL(), "--user", "media", "--password", "wrong"}, logs)
	}()
	select {
	case c := <-code:
		if c != 1 {
			t.Fatalf("exit %d, want 1:\n%s", c, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("mediasim did not give up on refused credentials:\n%s", logs.String())
	}
	last := strings.TrimSpace(logs.String())
	last = last[strings.LastIndexByte(last, '\n')+1:]
	if !strings.Contains(strings.ToLower(last), "authorization violation") {
		t.Fatalf("the last line does not say why: %s", last)
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
		var logs syncbuf.Buffer
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
		{"--sources", ""},    // an empty variable: a simulator of no source serves nothing anyone asks for
		{"--sources", " , "}, // likewise
		{"--prefix", "kp.*"},
		{"--fail", "a/b c/d"},
		{"--password", "p"},                 // no --user: the password would be dropped, unsent
		{"--user", "a*", "--password", "p"}, // not a principal id (nor a subject token)
		{"--user", "Media", "--password", "p"},
		{"--sources", "a", "--fail", "b/video/x"}, // a source the simulator does not have: never fails
		{"--sources", "a", "--fail", "a/vidoe/x"}, // a stream it does not have
	} {
		// Bounded: flags taken for good would have it wait for NATS until stopped (exit 0).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var out syncbuf.Buffer
		if c := run(ctx, append(args, "--nats-url", "nats://127.0.0.1:1"), &out); c != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, c, out.String())
		}
		cancel()
	}
}

// With --tls-ca (and a client certificate for a server that verifies clients) the simulator serves
// over a NATS server that requires TLS, as stated's embedded one does with listen_tls_*; TLS flags
// that cannot work are usage errors naming the flag.
func TestMediasimOverTLS(t *testing.T) {
	f := natstest.NewTLSFiles(t)
	ns := natstest.StartEmbeddedTLS(t, f, true)
	url := "nats://" + ns.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--nats-url", url, "--tls-ca", f.CA, "--tls-cert", f.ClientCert, "--tls-key", f.ClientKey,
			"--sources", "front-door"}, &logs)
	}()
	nc, err := nats.Connect(url, nats.RootCAs(f.CA), nats.ClientCert(f.ClientCert, f.ClientKey))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tr := startTracker(t, nc, &logs)
	if _, online, ok := tr.Resolve("front-door"); !ok || !online {
		t.Fatalf("front-door not served over TLS: %+v\n%s", tr.Current(), logs.String())
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d:\n%s", c, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mediasim did not stop")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", f.ClientCert}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-ca", f.NotPEM}, "--tls-ca"},
		{[]string{"--tls-cert", f.ClientCert, "--tls-key", f.ServerKey}, "--tls-key"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var out syncbuf.Buffer
		if c := run(ctx, append(tc.args, "--nats-url", url), &out); c != 2 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: exit %d, want 2 saying %q:\n%s", tc.args, c, tc.want, out.String())
		}
		cancel()
	}
}

// startTracker starts a capabilities tracker over nc, within 10 s, stopped at the test's end; logs
// are the simulator's, shown when it does not start.
func startTracker(t *testing.T, nc *nats.Conn, logs *syncbuf.Buffer) *capabilities.Tracker {
	t.Helper()
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{RefetchBackoff: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Start(ctx); err != nil {
		t.Fatalf("tracker: %v (logs: %s)", err, logs.String())
	}
	t.Cleanup(tr.Stop)
	return tr
}
