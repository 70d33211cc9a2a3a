package main

import (
	"context"
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
	for _, k := range []string{"STATECTL_NATS_URL", "STATECTL_USER", "STATECTL_PASSWORD", "STATECTL_PREFIX", "STATECTL_TIMEOUT", "STATECTL_JSON"} {
		t.Setenv(k, "")
	}
	var out, errb strings.Builder
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
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
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(wire.StateSubject(wire.DefaultPrefix, defaultUser, wire.OpWatch))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
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
