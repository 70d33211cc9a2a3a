package acceptance_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// The example worker commands as an operator runs them: their binaries, their flags, their signals.

// workerCommands are the example commands that serve until stopped, with the arguments that make
// each one a valid worker.
var workerCommands = []struct {
	name, pkg string
	args      []string
}{
	{"transcoder", "./examples/transcoder", []string{"--worker-id", "cmd-tx"}},
	{"cvworker", "./examples/cvworker", []string{"--worker-id", "cmd-cv", "--health-listen", ""}},
	{"viewer", "./examples/viewer", []string{"--worker-id", "cmd-viewer"}},
}

// commandProcess is a running command whose output is read line by line.
type commandProcess struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once it exited
	exitErr error

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed (and replaced) at each new line and at exit
}

// startCommand runs bin with args and env added to the test's environment. The cleanup kills it if
// it still runs.
func startCommand(t *testing.T, bin string, env []string, args ...string) *commandProcess {
	t.Helper()
	p := &commandProcess{done: make(chan struct{}), changed: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout // one pipe for both: lines keep their order
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *commandProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLines waits until n lines of the output contain s. It fails the test when the command exits
// first or the wait takes longer than d.
func (p *commandProcess) waitLines(t *testing.T, s string, n int, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		p.mu.Lock()
		count := 0
		for _, l := range p.lines {
			if strings.Contains(l, s) {
				count++
			}
		}
		changed := p.changed
		p.mu.Unlock()
		if count >= n {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			t.Fatalf("%s exited (%v) after %d of %d lines with %q:\n%s", p.cmd.Path, p.exitErr, count, n, s, p.output())
		case <-deadline:
			t.Fatalf("%s: %d of %d lines with %q within %v:\n%s", p.cmd.Path, count, n, s, d, p.output())
		}
	}
}

// stop sends sig and returns the exit code.
func (p *commandProcess) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not exit within 20 s after %v:\n%s", p.cmd.Path, sig, p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) {
		return ee.ExitCode()
	}
	if p.exitErr != nil {
		t.Fatal(p.exitErr)
	}
	return 0
}

// A worker stopped with SIGTERM or SIGINT while it still waits for what it needs (here NATS itself,
// as when it was started before stated) is stopped as asked: exit 0, no error. It exited 1 with
// "worker: start: context canceled" logged as an error (the viewer: its intent not written), so a
// supervisor took a requested stop for a failure.
func TestWorkerCommandsStopCleanlyWhileWaiting(t *testing.T) {
	url := fmt.Sprintf("nats://127.0.0.1:%d", e2e.FreePort(t)) // nothing listens there
	for _, c := range workerCommands {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			t.Run(c.name+"/"+sig.String(), func(t *testing.T) {
				bin := e2e.Build(t, c.pkg, c.name)
				p := startCommand(t, bin, []string{"NATS_URL=" + url, "KP_USER=dev", "KP_PASSWORD="}, c.args...)
				p.waitLines(t, "NATS not reachable", 3, waitTimeout)
				if code := p.stop(t, sig); code != 0 {
					t.Fatalf("exit %d after %v, want 0:\n%s", code, sig, p.output())
				}
				if out := p.output(); strings.Contains(out, "level=ERROR") {
					t.Fatalf("a requested stop logged as an error:\n%s", out)
				}
			})
		}
	}
}

// A worker's usage (shown for -h and for a mistyped flag) never shows the password it took from
// KP_PASSWORD: it showed it as the --password flag's default, on a terminal or into a log.
func TestWorkerCommandsHideThePassword(t *testing.T) {
	const secret = "s3cret-from-the-environment"
	for _, c := range workerCommands {
		for _, args := range [][]string{{"-h"}, {"--no-such-flag"}} {
			t.Run(c.name+"/"+args[0], func(t *testing.T) {
				bin := e2e.Build(t, c.pkg, c.name)
				p := startCommand(t, bin, []string{"KP_PASSWORD=" + secret}, args...)
				select {
				case <-p.done:
				case <-time.After(waitTimeout):
					t.Fatalf("%s %s did not exit", c.name, args[0])
				}
				out := p.output()
				if !strings.Contains(out, "-password") {
					t.Fatalf("no usage printed:\n%s", out)
				}
				if strings.Contains(out, secret) {
					t.Fatalf("the usage shows KP_PASSWORD:\n%s", out)
				}
			})
		}
	}
}

// The viewer started before stated (as the README's commands may be, in any order) waits for it,
// as the workers do, and writes its subscription intent once stated serves: it gave up after one
// request timeout (5 s), exit 1.
func TestViewerWaitsForStated(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{}) // the dev principal; not started yet
	bin := e2e.Build(t, "./examples/viewer", "viewer")
	p := startCommand(t, bin, []string{"NATS_URL=" + s.URL(), "KP_USER=dev", "KP_PASSWORD="},
		"--worker-id", "early-viewer", "--source", "early-door", "--variant", "early-720p")
	// Seven failed connection attempts, one a second: longer than a request may take.
	p.waitLines(t, "NATS not reachable", 7, 3*waitTimeout)
	s.Start()
	nc, err := client.Connect(s.URL(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "dev")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "early-viewer-intents", Namespace: "user/dev", KeyPrefix: "intents/early-door-"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	if len(w.Snapshot().Entries) == 0 {
		select {
		case m, ok := <-w.Messages():
			if !ok || m.Kind != wire.UpdatePut || m.Key != "intents/early-door-video-early-720p" {
				t.Fatalf("watch message %+v (open %v), want the viewer's intent:\n%s", m, ok, p.output())
			}
		case <-p.done:
			t.Fatalf("the viewer exited (%v):\n%s", p.exitErr, p.output())
		case <-ctx.Done():
			t.Fatalf("the viewer's intent was not written:\n%s", p.output())
		}
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.output())
	}
}
