package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/stated"
)

// The demo's stated is its own, or the demo stops with stated's reason. An address taken between
// listenAddr's check and stated's start (another demo starting at the same moment, say) made stated
// fail, with its error in a log nobody reads; the demo then waited for its whole --timeout and said
// only "stated did not answer", or, with another stated's NATS server on the address, took that
// stated for its own and ran the tour on it.
func TestStartStatedReportsWhyItCannotStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other := stated.DefaultConfig()
	other.DataDir = t.TempDir()
	other.NATS.Listen = listenAddr("127.0.0.1:0")
	other.HTTPListen = listenAddr("127.0.0.1:0")
	stopOther, err := startStated(ctx, other, io.Discard)
	if err != nil {
		t.Fatalf("the other stated: %v", err)
	}
	defer stopOther()

	for _, tc := range []struct {
		name       string
		nats, http string
		taken      string
	}{
		{"NATS address taken by another stated", other.NATS.Listen, listenAddr("127.0.0.1:0"), other.NATS.Listen},
		{"HTTP address taken by another stated", listenAddr("127.0.0.1:0"), other.HTTPListen, other.HTTPListen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stated.DefaultConfig()
			cfg.DataDir = t.TempDir()
			cfg.NATS.Listen, cfg.HTTPListen = tc.nats, tc.http
			stop, err := startStated(ctx, cfg, io.Discard)
			if err == nil {
				stop()
				t.Fatalf("started, although %s listens on %s", "another stated", tc.taken)
			}
			if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("error %q, want stated's own reason (the address %s is in use)", err, tc.taken)
			}
		})
	}
}
