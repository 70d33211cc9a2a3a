package main

import (
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// Flags that make an intent the store refuses, or no intent worth watching (an empty variant was
// written as `intents/front-door-video-` and waited on for ever), and connection flags that cannot
// work, are bad usage: exit 2 at once, naming the flag, with the usage, before anything connects.
// Before, they were found only once stated answered (exit 1), and while it was not up the viewer
// retried the refused write for ever; a bad --user exited 1. No NATS server listens at 127.0.0.1:1.
func TestViewerRefusesBadFlags(t *testing.T) {
	bin := e2e.Build(t, "./examples/viewer", "viewer")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--source", "front door"}, "--source"},
		{[]string{"--source", ""}, "--source"},
		{[]string{"--kind", "nope"}, "--kind"},
		{[]string{"--variant", ""}, "--variant"},
		{[]string{"--variant", "a/b"}, "--variant"},
		{[]string{"--source", strings.Repeat("s", 128), "--variant", strings.Repeat("v", 128)}, "key"},
		{[]string{"--user", "BAD"}, "--user"},
		{[]string{"--nats-url", "nats://127.0.0.1:70000"}, "--nats-url"},
	} {
		e2e.WantUsageError(t, bin, nil, append([]string{"--nats-url", "nats://127.0.0.1:1", "--worker-id", "v1"}, c.args...), c.want)
	}
}
