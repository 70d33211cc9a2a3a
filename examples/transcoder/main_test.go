package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// Connection flags that cannot work are bad usage: exit 2 at once, naming the flag, with the usage,
// before anything connects. A --user that is no principal id exited 1, as for a failure at run time;
// a --nats-url with a port out of range or a scheme nats.go does not dial made the transcoder wait
// for ever for a server that cannot exist. No NATS server listens at 127.0.0.1:1 either.
func TestTranscoderRefusesBadConnectionFlags(t *testing.T) {
	bin := e2e.Build(t, "./examples/transcoder", "transcoder")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--user", "BAD", "--nats-url", "nats://127.0.0.1:1"}, "--user"},
		{[]string{"KP_USER=Not_A_Principal"}, []string{"--nats-url", "nats://127.0.0.1:1"}, "--user"},
		{nil, []string{"--nats-url", "nats://127.0.0.1:99999"}, "--nats-url"},
		{nil, []string{"--nats-url", "http://127.0.0.1:1"}, "--nats-url"},
		{[]string{"NATS_URL=nats://127.0.0.1:0"}, nil, "--nats-url"},
		{nil, []string{"--nats-url", "nats://127.0.0.1:1", "--nkey", "/nonexistent", "--password", "x"}, "--nkey and --password"},
	} {
		e2e.WantUsageError(t, bin, c.env, c.args, c.want)
	}
}

// --help exits 0 and names the environment variable of each flag that has one.
func TestTranscoderHelpNamesTheEnvironment(t *testing.T) {
	bin := e2e.Build(t, "./examples/transcoder", "transcoder")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, want := range []string{"NATS_URL", "KP_USER", "KP_PASSWORD", "KP_NKEY", "-lease-ttl", "-service", "-worker-id"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--help does not name %s:\n%s", want, out)
		}
	}
}
