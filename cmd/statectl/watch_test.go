package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// runStatectl runs statectl in process with a clean environment for its globals.
func runStatectl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	clearEnv(t)
	var out, errb strings.Builder
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// clearEnv empties statectl's environment variables, so that only the test's arguments count.
func clearEnv(t *testing.T) {
	for _, k := range []string{"STATECTL_NATS_URL", "STATECTL_USER", "STATECTL_PASSWORD", "STATECTL_PREFIX", "STATECTL_TIMEOUT", "STATECTL_JSON"} {
		t.Setenv(k, "")
	}
}

// silentWatchServer takes the dev principal's watch requests on the NATS server at url and never
// answers them: a state server that hangs. The subscription it returns receives the requests.
func silentWatchServer(t *testing.T, url string) *nats.Subscription {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync(wire.StateSubject(wire.DefaultPrefix, defaultUser, wire.OpWatch))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// outcome is how one statectl run ended.
type outcome struct {
	code           int
	stdout, stderr string
}

// runAsync runs statectl with args under ctx, reading stdin, on a goroutine of its own; the channel
// receives how it ended.
func runAsync(ctx context.Context, stdin io.Reader, args ...string) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		var out, errb strings.Builder
		code := run(ctx, args, stdin, &out, &errb)
		done <- outcome{code, out.String(), errb.String()}
	}()
	return done
}

// A watch whose first request gets no answer before --timeout fails like any other command that
// times out (exit 3, TIMEOUT) instead of ending quietly as a watch that ran its course.
func TestWatchNeverOpensBeforeTimeout(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	url := ns.ClientURL()

	// Nothing subscribes to the state API: NATS says so at once (no responders).
	code, stdout, stderr := runStatectl(t, "watch", "service/w", "--nats-url", url, "--timeout", "300ms")
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "statectl: "+string(wire.CodeUnavailable)+": ") {
		t.Fatalf("no state server: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}

	// A state server that takes the request and never answers.
	sub := silentWatchServer(t, url)
	start := time.Now()
	code, stdout, stderr = runStatectl(t, "watch", "service/w", "--nats-url", url, "--timeout", "300ms")
	if code != exitConnection || stdout != "" ||
		!strings.HasPrefix(stderr, "statectl: TIMEOUT: ") || !strings.Contains(stderr, "watch request") ||
		!strings.Contains(stderr, "context deadline exceeded") {
		t.Fatalf("silent state server: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("watch took %v to time out", d)
	}
	if _, err := sub.NextMsg(time.Second); err != nil {
		t.Fatalf("the watch request did not reach the subscriber: %v", err)
	}
}
