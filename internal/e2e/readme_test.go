package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/syncbuf"
)

// The commands of the READMEs, run as written with the binaries they name (on free ports: the
// examples and statectl read NATS_URL and STATECTL_NATS_URL, mediasim takes --nats-url): the root
// README's statectl lines, the transcoder README's flow (stated on the dev principal, the simulator,
// two transcoders, a publish intent, its status reaching active) and the coordinator README's
// commands. A README line that stops working fails here.
func TestReadmeCommands(t *testing.T) {
	s := NewStated(t, Config{})
	s.Start()
	statectl := Binary(t, "statectl")
	mediasim := Binary(t, "mediasim")
	transcoder := Build(t, "./examples/transcoder", "transcoder")
	coordinator := Build(t, "./examples/coordinator", "coordinator")
	env := append(os.Environ(), "NATS_URL="+s.URL(), "STATECTL_NATS_URL="+s.URL())
	const (
		ns        = "service/transcoder-a"
		intentKey = "intents/front-door-video-browser-h264-720p"
		statusKey = "status/front-door-video-browser-h264-720p"
		leaseKey  = "leases/front-door-video-browser-h264-720p"
	)

	// README.md: put create-only from a file (the flag after the arguments), get.
	intent := filepath.Join(t.TempDir(), "intent.json")
	doc := `{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video","recording_mode":"disabled"}`
	if err := os.WriteFile(intent, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	runOK(t, env, statectl, "put", ns, "intents/x", "keeppeek.media-intent.v1", intent, "--expect-revision", "0")
	if out, code := run(t, env, statectl, "put", ns, "intents/x", "keeppeek.media-intent.v1", intent, "--expect-revision", "0"); code != 1 {
		t.Fatalf("a second create-only put exited %d, want 1 (CONFLICT)\n%s", code, out)
	}
	if out := runOK(t, env, statectl, "get", ns, "intents/x"); !strings.Contains(out, `"source_id": "front-door"`) {
		t.Fatalf("statectl get printed\n%s", out)
	}
	runOK(t, env, statectl, "delete", ns, "intents/x")

	// README.md: watch system workers/ sees the transcoders come (their first heartbeats).
	workers := watchJSON(t, env, statectl, "watch", "system", "workers/", "--json")
	status := watchJSON(t, env, statectl, "watch", ns, "status/", "--json")
	leases := watchJSON(t, env, statectl, "watch", ns, "leases/", "--json")

	// examples/transcoder/README.md, in order once stated is ready.
	sim := startProc(t, env, mediasim, "--nats-url", s.URL(), "--sources", "front-door")
	tx1 := startProc(t, env, transcoder, "--worker-id", "tx-1")
	tx2 := startProc(t, env, transcoder, "--worker-id", "tx-2")
	runOK(t, env, coordinator, "publish", "front-door", "--variant", "browser-h264-720p")
	status.await(t, "the status to be active", func(u update) bool {
		return u.Kind == "PUT" && u.Key == statusKey && u.Entry.Document["state"] == "active"
	})
	seen := map[string]bool{}
	workers.await(t, "workers tx-1 and tx-2 in system", func(u update) bool {
		seen[u.Key] = seen[u.Key] || u.Kind == "PUT"
		return seen["workers/dev/tx-1"] && seen["workers/dev/tx-2"]
	})
	if out := runOK(t, env, statectl, "get", ns, statusKey); !strings.Contains(out, `"state": "active"`) {
		t.Fatalf("statectl get %s printed\n%s", statusKey, out)
	}

	// examples/coordinator/README.md.
	if out := runOK(t, env, coordinator, "fleet"); !strings.Contains(out, "tx-1") || !strings.Contains(out, "tx-2") {
		t.Fatalf("coordinator fleet printed\n%s", out)
	}
	runOK(t, env, coordinator, "desired", ns, intentKey, "false")
	status.await(t, "the status to be stopped", func(u update) bool {
		return u.Kind == "PUT" && u.Key == statusKey && u.Entry.Document["state"] == "stopped"
	})
	leases.await(t, "the lease to be released", func(u update) bool { return u.Kind == "DELETE" && u.Key == leaseKey })
	runOK(t, env, coordinator, "delete", ns, intentKey)
	runOK(t, env, coordinator, "model", "front-door", "--service", "cv-a", "--variant", "browser-h264-720p", "--model", "person-detector")

	// The workers stop on SIGTERM and exit 0.
	for _, p := range []*proc{tx1, tx2, sim} {
		if code := p.term(t); code != 0 {
			t.Fatalf("%s exited %d\n%s", p.name, code, p.logs())
		}
	}
	for _, w := range []*watcher{workers, status, leases} {
		w.stop(t)
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
}

// commandTimeout bounds every command and wait of these tests.
const commandTimeout = 30 * time.Second

// run runs bin with args and env and returns its combined output and exit code.
func run(t *testing.T, env []string, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee) && ctx.Err() == nil:
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	return "", -1
}

// runOK runs bin and fails the test unless it exits 0.
func runOK(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	out, code := run(t, env, bin, args...)
	if code != 0 {
		t.Fatalf("%s %s exited %d\n%s", filepath.Base(bin), strings.Join(args, " "), code, out)
	}
	return out
}

// proc is a long-running command; cleanup kills it if the test did not stop it.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
	err  error
}

func startProc(t *testing.T, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(bin) + " " + strings.Join(args, " "), out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) logs() string { return p.out.String() }

// term sends SIGTERM and returns the exit code.
func (p *proc) term(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(commandTimeout):
		t.Fatalf("%s did not exit within %v of SIGTERM\n%s", p.name, commandTimeout, p.logs())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

// update is a line of `statectl watch --json` after the snapshot.
type update struct {
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Entry struct {
		Document map[string]any `json:"document"`
	} `json:"entry"`
}

// watcher is a `statectl watch --json` whose updates the test awaits.
type watcher struct {
	p       *proc
	updates chan update // closed when the watch's output ends; p.done after its exit
}

func watchJSON(t *testing.T, env []string, statectl string, args ...string) *watcher {
	t.Helper()
	cmd := exec.Command(statectl, args...)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{p: &proc{name: "statectl " + strings.Join(args, " "), cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})},
		updates: make(chan update, 4096)}
	cmd.Stderr = w.p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	snapshot := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for first := true; sc.Scan(); {
			if first { // the snapshot: the watch is registered
				first = false
				close(snapshot)
				continue
			}
			var u update
			if json.Unmarshal(sc.Bytes(), &u) == nil {
				w.updates <- u
			}
		}
		close(w.updates)
		w.p.err = cmd.Wait() // after the last read of stdout, as StdoutPipe requires
		close(w.p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		w.drain()
	})
	select {
	case <-snapshot:
	case <-w.p.done:
		t.Fatalf("%s exited before its snapshot: %v\n%s", w.p.name, w.p.err, w.p.logs())
	case <-time.After(commandTimeout):
		t.Fatalf("%s printed no snapshot within %v\n%s", w.p.name, commandTimeout, w.p.logs())
	}
	return w
}

// drain discards updates until the watch has exited.
func (w *watcher) drain() {
	for range w.updates {
	}
	<-w.p.done
}

// await reads updates until want accepts one.
func (w *watcher) await(t *testing.T, what string, want func(update) bool) {
	t.Helper()
	timeout := time.After(commandTimeout)
	for {
		select {
		case u, ok := <-w.updates:
			if !ok {
				t.Fatalf("waiting for %s: %s ended\n%s", what, w.p.name, w.p.logs())
			}
			if want(u) {
				return
			}
		case <-timeout:
			t.Fatalf("waiting for %s: nothing within %v\n%s", what, commandTimeout, w.p.logs())
		}
	}
}

// stop interrupts the watch (Ctrl-C) and checks that it exits 0.
func (w *watcher) stop(t *testing.T) {
	t.Helper()
	_ = w.p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-w.p.done:
	case <-time.After(commandTimeout):
		t.Fatalf("%s did not exit within %v of Ctrl-C\n%s", w.p.name, commandTimeout, w.p.logs())
	}
	if w.p.err != nil {
		t.Fatalf("%s after Ctrl-C: %v\n%s", w.p.name, w.p.err, w.p.logs())
	}
}

// The simulator and a worker started before stated (a machine booting, a service manager that starts
// them in any order) wait for its NATS server instead of exiting, and then do their work.
func TestProcessesStartedBeforeStatedWaitForIt(t *testing.T) {
	s := NewStated(t, Config{})
	statectl := Binary(t, "statectl")
	mediasim := Binary(t, "mediasim")
	transcoder := Build(t, "./examples/transcoder", "transcoder")
	coordinator := Build(t, "./examples/coordinator", "coordinator")
	env := append(os.Environ(), "NATS_URL="+s.URL(), "STATECTL_NATS_URL="+s.URL())
	sim := startProc(t, env, mediasim, "--nats-url", s.URL(), "--sources", "front-door")
	tx := startProc(t, env, transcoder, "--worker-id", "tx-1")
	s.Start()
	runOK(t, env, coordinator, "publish", "front-door", "--variant", "browser-h264-720p")
	deadline := time.Now().Add(commandTimeout)
	for {
		out, code := run(t, env, statectl, "get", "service/transcoder-a", "status/front-door-video-browser-h264-720p")
		if code == 0 && strings.Contains(out, `"state": "active"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status never became active: %s\nsimulator:\n%s\ntranscoder:\n%s", out, sim.logs(), tx.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range []*proc{tx, sim} {
		if code := p.term(t); code != 0 {
			t.Fatalf("%s exited %d\n%s", p.name, code, p.logs())
		}
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
}
