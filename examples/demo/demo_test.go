package main_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// TestDemoRunsToTheEnd runs the README's first command as a newcomer would and checks that it tells
// the whole story and exits 0.
func TestDemoRunsToTheEnd(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"stated: NATS", "intent written", "lease claimed", "standby", "publication started",
		"capability ready", "viewer subscribed", "cv subscribed", "first detection", "KILLED", "failover complete", "done"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the demo's story lacks %q:\n%s", want, text)
		}
	}
	// The standby, not the killed worker, finishes the story.
	killed := between(text, "KILLED ", " ")
	took := between(text, "failover complete: ", " ")
	if killed == "" || took == "" || killed == took {
		t.Fatalf("killed %q, took over %q:\n%s", killed, took, text)
	}
}

func between(s, after, before string) string {
	_, rest, ok := strings.Cut(s, after)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, before)
	return v
}
