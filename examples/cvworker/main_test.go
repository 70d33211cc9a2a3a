package main

import (
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// Connection flags that cannot work are bad usage: exit 2 at once, naming the flag, with the usage,
// before anything connects (a bad --user exited 1; a port out of range was waited for for ever).
func TestCVWorkerRefusesBadConnectionFlags(t *testing.T) {
	bin := e2e.Build(t, "./examples/cvworker", "cvworker")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "BAD", "--nats-url", "nats://127.0.0.1:1"}, "--user"},
		{[]string{"--nats-url", "nats://127.0.0.1:99999"}, "--nats-url"},
	} {
		e2e.WantUsageError(t, bin, nil, append([]string{"--health-listen", ""}, c.args...), c.want)
	}
}
