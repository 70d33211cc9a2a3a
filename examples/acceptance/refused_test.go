package acceptance_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
)

// A worker command whose credentials NATS refuses ends, exit 1, once NATS has closed its
// connection for good (nats.go closes it after the same authorization error twice): nothing it does
// can reach anyone any more. The viewer kept retrying its subscription intent on the closed
// connection for ever, logging "stated not reachable".
func TestWorkerCommandsEndWhenTheirCredentialsAreRefused(t *testing.T) {
	s := startStated(t, "")
	for _, c := range workerCommands {
		t.Run(c.name, func(t *testing.T) {
			bin := e2e.Build(t, c.pkg, c.name)
			p := startCommand(t, bin, []string{"NATS_URL=" + s.URL(), "KP_USER=transcoder-a", "KP_PASSWORD=wrong"}, c.args...)
			select {
			case <-p.done:
			case <-time.After(3 * waitTimeout):
				out := p.output()
				p.stop(t, syscall.SIGKILL)
				t.Fatalf("%s still runs with refused credentials:\n%s", c.name, out)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, p.output())
			}
		})
	}
}

// A transcoder given a lease TTL outside 1 s to 24 h (its README's range) exits 2 at once, as for
// any other bad flag (a mistyped one, a positional argument, the demo's --timeout), naming the flag
// and its value and printing the usage, without waiting for NATS; 0 was taken silently for the
// default 5 s, and then it exited 1, as for a failure at run time, without the usage.
func TestTranscoderRefusesALeaseTTLOutOfRange(t *testing.T) {
	bin := e2e.Build(t, "./examples/transcoder", "transcoder")
	for _, ttl := range []string{"0s", "500ms", "25h"} {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		// No NATS server listens there: a transcoder that accepted the flag would wait for one.
		out, err := exec.CommandContext(ctx, bin, "--lease-ttl", ttl, "--nats-url", "nats://127.0.0.1:1").CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--lease-ttl "+ttl) || !strings.Contains(string(out), "Usage of") {
			t.Fatalf("--lease-ttl %s: %v, want exit 2 naming the flag, with the usage:\n%s", ttl, err, out)
		}
	}
}

// A worker command (or the demo) given a positional argument exits 2 at once, naming it: Go's flag
// package stops parsing at the first one, so every flag after it was ignored silently, and
// `transcoder extra --worker-id tx-1` ran as tx-<pid> on the defaults (waiting for NATS, here).
func TestWorkerCommandsRefusePositionalArguments(t *testing.T) {
	commands := append(slices.Clone(workerCommands), struct {
		name, pkg string
		args      []string
	}{"demo", "./examples/demo", []string{"--timeout", "1s"}})
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			bin := e2e.Build(t, c.pkg, c.name)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			// No NATS server listens there: a command that took the argument would wait for one.
			args := append([]string{"--nats-url", "nats://127.0.0.1:1", "tx-1"}, c.args...)
			if c.name == "demo" {
				args = append([]string{"keep"}, c.args...)
			}
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			var ee *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "unexpected argument") {
				t.Fatalf("%s %v: %v (context: %v), want exit 2 naming the argument:\n%s", c.name, args, err, ctx.Err(), out)
			}
		})
	}
}

// A CV worker whose --health-listen address cannot be listened on (another CV worker's, started by
// hand with the defaults) exits 1 at once, naming it: it logged the error and ran on, so that its
// health was not served, and a probe of that address read another process's.
func TestCVWorkerRefusesAHealthAddressItCannotListenOn(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	bin := e2e.Build(t, "./examples/cvworker", "cvworker")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// No NATS server listens there: a worker that went on would wait for one.
	out, err := exec.CommandContext(ctx, bin, "--nats-url", "nats://127.0.0.1:1", "--health-listen", taken.Addr().String()).CombinedOutput()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), taken.Addr().String()) {
		t.Fatalf("%v (context: %v), want exit 1 naming %s:\n%s", err, ctx.Err(), taken.Addr(), out)
	}
}

// A worker command given a --worker-id or --service its rule refuses exits 2 at once, naming the
// flag, with the usage, as for any other bad flag: it exited 1 with the worker runtime's error, as
// for a failure at run time.
func TestWorkerCommandsRefuseABadWorkerIDOrService(t *testing.T) {
	for _, c := range workerCommands {
		bad := [][]string{{"--worker-id", "a b"}}
		if c.name != "viewer" { // the viewer has no --service: its namespace is its user's
			bad = append(bad, []string{"--service", "A/B"})
		}
		for _, flagArgs := range bad {
			t.Run(c.name+flagArgs[0], func(t *testing.T) {
				bin := e2e.Build(t, c.pkg, c.name)
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				defer cancel()
				// No NATS server listens there: a command that took the flag would wait for one.
				args := append(append([]string{"--nats-url", "nats://127.0.0.1:1"}, c.args...), flagArgs...)
				out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
				var ee *exec.ExitError
				if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), flagArgs[0]+" ") || !strings.Contains(string(out), "Usage of") {
					t.Fatalf("%s %v: %v (context: %v), want exit 2 naming %s, with the usage:\n%s", c.name, args, err, ctx.Err(), flagArgs[0], out)
				}
			})
		}
	}
}
