package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// liveWatches reads stated's state_watches gauge from its metrics.
func (e *env) liveWatches() int {
	e.t.Helper()
	return e.metric("state_watches")
}

// awaitMetric waits until stated's metric name (with its labels) reaches want.
func (e *env) awaitMetric(name string, want int) {
	e.t.Helper()
	natstest.Poll(e.t, timeout, name, func() (bool, string) {
		n := e.metric(name)
		return n >= want, fmt.Sprintf("%d, want %d", n, want)
	})
}

// metric reads one metric (its name with its labels) from stated's metrics; 0 when absent (a
// counter not incremented yet).
func (e *env) metric(name string) int {
	e.t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(e.s.HTTP() + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				e.t.Fatalf("%s %q: %v", name, v, err)
			}
			return n
		}
	}
	if name == "state_watches" {
		e.t.Fatalf("no state_watches in the metrics:\n%s", b)
	}
	return 0
}

// A NATS URL may carry its login (nats://user:password@host, nats://token@host), as the nats CLI
// takes it. stated never prints one; statectl printed it whole in every connection error, which in
// a CI job's log gives the password away.
func TestConnectionErrorsDoNotPrintTheURLLogin(t *testing.T) {
	e := start(t, "")
	hostPort := strings.TrimPrefix(e.s.URL(), "nats://")
	closed := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
	for _, c := range []struct {
		url, secret string
		args        []string
	}{
		{"nats://coordinator:wr0ng-url-pw@" + hostPort, "wr0ng-url-pw", []string{"info"}},
		{"nats://coordinator:s3cret-url-pw@" + closed, "s3cret-url-pw", []string{"get", "service/tx", "k"}},
		{"nats://t0ken-in-url@" + closed, "t0ken-in-url", []string{"ls", "service/tx"}},
		{"nats://other:0ther-pw@127.0.0.1:1,nats://coordinator:s3cret-url-pw@" + closed, "pw@", []string{"info"}},
		// A list written with a space after its comma (as nats.Connect takes it): a URL nats.go cannot
		// parse is quoted in its error without that space.
		{"nats://other:0ther-pw@127.0.0.1:1, nats://coordinator:s3cret%zz-pw@" + closed, "s3cret%zz", []string{"info"}},
		{"nats://coordinator:s3cret-url-pw@" + closed, "s3cret-url-pw", []string{"bench", "--metrics-url", "", "--watches", "1",
			"--connections", "1", "--writers", "1", "--owners", "1", "--entries", "1", "--idle", "0s"}},
	} {
		r := e.fails(3, "CONNECTION", append([]string{"--nats-url", c.url}, c.args...)...)
		if strings.Contains(r.stderr, c.secret) || strings.Contains(r.stdout, c.secret) {
			t.Errorf("statectl %v with --nats-url %s printed its login: %s", c.args, c.url, r)
		}
		if !strings.Contains(r.stderr, "xxxxx@") {
			t.Errorf("statectl %v with --nats-url %s: the error does not name the (redacted) URL: %s", c.args, c.url, r)
		}
	}
}

// `statectl watch NS --json | head -1` (wait for the snapshot, take it) must end when head has: the
// shell waits for every command of a pipeline. A watch with nothing to print never wrote to the
// closed pipe, so no SIGPIPE ended it, and the pipeline hung until the namespace changed. Like GNU
// tail -f, watch notices that its reader went away, unwatches, and exits 141 (as SIGPIPE would) without
// a word.
func TestWatchEndsWhenItsReaderGoes(t *testing.T) {
	e := start(t, "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := e.command(ctx, "watch", "service/w", "--json")
	var errb strings.Builder
	cmd.Stdout, cmd.Stderr = w, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(r).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if !strings.Contains(l, `"snapshot_revision":0`) {
			t.Fatalf("first line %q", l)
		}
	case <-ctx.Done():
		t.Fatal("no snapshot")
	}
	if n := e.liveWatches(); n != 1 {
		t.Fatalf("%d live watches while the watch runs", n)
	}
	r.Close() // head -1 exits
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		if code != 141 || errb.String() != "" {
			t.Fatalf("watch after its reader went: exit %d (%v), stderr %q; want 141 and nothing", code, err, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("watch went on for 20 s after its reader closed the pipe; stderr %q", errb.String())
	}
	if n := e.liveWatches(); n != 0 {
		t.Fatalf("%d live watches after the watch ended: it did not unwatch", n)
	}
}

// A script waits for a change with `statectl watch NS KEY --count 1` and acts when it exits 0. A
// SIGTERM (the CI job cancelled) or Ctrl-C before the change came ended the watch with exit 0 too,
// as if the change had come, while --timeout ending it early is exit 1: an interrupt before the
// count is INTERRUPTED, exit 130, as for any command interrupted before its answer. Without --count
// an interrupt is how a watch ends: exit 0. Either way the watch is unwatched.
func TestWatchInterruptedBeforeItsCount(t *testing.T) {
	e := start(t, "")
	p := e.start("watch", "service/w", "--json", "--count", "2")
	p.await(`"snapshot_revision":0`)
	e.putLease("service/w", "a")
	p.await(`"watch_sequence":1`)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, rest := p.wait()
	// With --json the error is the last line of stdout too.
	if code != 130 || len(rest) != 1 || !strings.HasPrefix(rest[0], `{"request_id":0,"ok":false,"error":{"code":"INTERRUPTED"`) ||
		!strings.Contains(p.stderr(), "statectl: INTERRUPTED: ") || !strings.Contains(p.stderr(), "1 of 2") {
		t.Fatalf("watch --count 2 terminated after 1: exit %d, stdout %q, stderr:\n%s", code, rest, p.stderr())
	}
	if n := e.liveWatches(); n != 0 {
		t.Fatalf("%d live watches after the terminated watch", n)
	}

	p = e.start("watch", "service/w", "--json")
	p.await(`"snapshot_revision":1`)
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code, rest := p.wait(); code != 0 || len(rest) != 0 || p.stderr() != "" {
		t.Fatalf("watch interrupted: exit %d, stdout %q, stderr:\n%s", code, rest, p.stderr())
	}
	if n := e.liveWatches(); n != 0 {
		t.Fatalf("%d live watches after the interrupted watch", n)
	}
}

// A stated restarted behind an external NATS server has forgotten every watch, and statectl's own
// connection never dropped: nothing reached the watch to tell it. It waited for updates that would
// never come (a script's `watch --count 1` hung until its --timeout). Like a Cache, it checks an idle
// watch every 5 s, finds the server no longer has it, and watches again.
func TestWatchNoticesAStatedRestartedBehindAnExternalNATS(t *testing.T) {
	t.Parallel()
	_, bin := binaries(t)
	nsrv := natstest.Start(t, natsserver.Options{})
	s := e2e.NewStated(t, e2e.Config{Principals: principals, NATSURL: nsrv.ClientURL()})
	s.Start()
	e := &env{t: t, s: s, bin: bin, dir: t.TempDir()}
	p := e.start("watch", "service/w", "--json", "--count", "2")
	p.await(`"snapshot_revision":0`)
	e.putLease("service/w", "a")
	p.await(`"watch_sequence":1`)
	// The update was printed, then acknowledged: a stated killed while the ack is on its way fails the
	// ack, and the watch starts again for that reason instead of finding the watch gone.
	e.awaitMetric(`state_requests_total{code="OK",op="ack"}`, 1)
	s.Kill()
	s.Start()
	p.await(`"snapshot_revision":1`) // watched again, on its own
	if !strings.Contains(p.stderr(), "no longer has the watch") {
		t.Errorf("the new snapshot came without saying why; stderr:\n%s", p.stderr())
	}
	e.putLease("service/w", "b")
	p.await(`"watch_sequence":1`)
	if code, rest := p.wait(); code != 0 || len(rest) != 0 {
		t.Fatalf("watch --count 2: exit %d, stdout %q, stderr:\n%s", code, rest, p.stderr())
	}
}
