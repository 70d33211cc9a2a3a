package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
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
	// The story is told in order: timestamps never go backwards; the killed worker does nothing
	// after the KILLED line, and its end (its connection closed under it) is the kill, not a failure
	// told before it.
	last, afterKill := -1.0, false
	killedAt, claimedAt, readyAfterKill := -1.0, -1.0, false
	// After the standby started its publication (which ended the old one's subscriptions) the viewer
	// and the CV worker subscribe again, and the tour says so only once both have.
	startedAgain, viewerAgain, cvAgain, complete := false, false, false, false
	for line := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
		v, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "s] ")
		at, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil {
			t.Fatalf("line without a timestamp %q:\n%s", line, text)
		}
		if at < last {
			t.Fatalf("timestamp goes backwards at %q:\n%s", line, text)
		}
		last = at
		if strings.HasPrefix(rest, killed+" stopped") || (afterKill && strings.HasPrefix(rest, killed+":")) {
			t.Fatalf("the killed %s told of at %q:\n%s", killed, line, text)
		}
		afterKill = afterKill || strings.HasPrefix(rest, "KILLED ")
		switch {
		case strings.HasPrefix(rest, "KILLED "):
			killedAt = at
		case afterKill && strings.HasPrefix(rest, took+": lease claimed"):
			claimedAt = at
		case afterKill && strings.HasPrefix(rest, took+": capability ready"):
			readyAfterKill = true
		case afterKill && strings.HasPrefix(rest, took+": publication started"):
			startedAgain, viewerAgain, cvAgain = true, false, false
		case startedAgain && strings.HasPrefix(rest, "viewer-1: viewer subscribed"):
			viewerAgain = true
		case startedAgain && strings.HasPrefix(rest, "cv-1: cv subscribed"):
			cvAgain = true
		case strings.HasPrefix(rest, "failover complete: "):
			complete = true
			if !viewerAgain || !cvAgain {
				t.Fatalf("failover complete before the viewer (%v) and the CV worker (%v) subscribed to %s's publication:\n%s", viewerAgain, cvAgain, took, text)
			}
		}
	}
	// The worker said to have taken over claimed the lease and reported READY after the kill, and
	// the failover time printed is measured: at least from the KILLED line to its claim (the lines'
	// stamps are rounded to 10 ms).
	if !complete {
		t.Fatalf("no failover complete line:\n%s", text)
	}
	if claimedAt < 0 || !readyAfterKill {
		t.Fatalf("%s is said to have taken over, but told no claim or READY after the kill:\n%s", took, text)
	}
	printed, err := time.ParseDuration(between(text, "failover complete: "+took+" took over ", " "))
	if err != nil || printed.Seconds() < claimedAt-killedAt-0.01 {
		t.Fatalf("failover time %v (%v), but the claim came %.2fs after the kill:\n%s", printed, err, claimedAt-killedAt, text)
	}
}

// TestDemoKeepRunsUntilInterrupted runs the README's `--keep` variant: after the tour everything keeps
// working (the new lease holder goes on renewing, though nobody reads the workers' events any more)
// until Ctrl-C, which ends the demo with exit 0. Meanwhile a second demo runs its whole tour beside
// it, as a newcomer who runs the command again would: on addresses of its own, in another working
// directory (read-only, holding the ./data of an earlier `go run ./cmd/stated`, which it leaves
// alone), with HOME unset; neither leaves anything in its temporary directory.
func TestDemoKeepRunsUntilInterrupted(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	tmp := t.TempDir()
	cmd, pr, exited := startDemo(t, ctx, bin, "", []string{"TMPDIR=" + tmp}, "--keep")
	ended := false // set once exited was read
	defer func() {
		if !ended {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var mu sync.Mutex
	var out strings.Builder
	waiting := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "Ctrl-C to stop") {
				close(waiting)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	text := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	select {
	case <-waiting:
	case err := <-exited:
		ended = true
		t.Fatalf("demo --keep exited (%v) instead of waiting:\n%s", err, text())
	case <-ctx.Done():
		t.Fatalf("demo --keep never reached its end of tour:\n%s", text())
	}
	url := between(text(), "stated: NATS ", ",")
	if !strings.HasPrefix(url, "nats://") {
		t.Fatalf("no NATS address in the story:\n%s", text())
	}
	runBeside(t, ctx, bin, url)
	nc, err := client.Connect(url, "dev")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, "dev")
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, wire.WatchRequest{WatchID: "keep-test", Namespace: "service/transcoder-a", KeyPrefix: "leases/"})
	if err != nil {
		t.Fatal(err)
	}
	// Three renewals of the lease after the tour: its holder is not stalled by events nobody reads.
	for renewals := 0; renewals < 3; {
		select {
		case m, ok := <-w.Messages():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			if m.Kind != wire.UpdatePut {
				t.Fatalf("lease update %s %s, want renewals:\n%s", m.Kind, m.Key, text())
			}
			renewals++
			if err := w.Ack(ctx, m.WatchSequence); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("the lease was renewed %d times after the tour:\n%s", renewals, text())
		}
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		ended = true
		if err != nil {
			t.Fatalf("demo --keep after Ctrl-C: %v\n%s", err, text())
		}
	case <-ctx.Done():
		t.Fatalf("demo --keep did not stop after Ctrl-C:\n%s", text())
	}
	if !strings.Contains(text(), "] done\n") {
		t.Fatalf("demo --keep did not finish its story:\n%s", text())
	}
	wantEmpty(t, tmp, "the --keep demo's temporary directory")
}

// runBeside runs a second demo to its end while the one on firstURL runs: in a read-only working
// directory holding another stated's ./data, with HOME unset. It must exit 0 on an address of its
// own and leave that ./data as it was.
func runBeside(t *testing.T, ctx context.Context, bin, firstURL string) {
	t.Helper()
	wd, tmp := t.TempDir(), t.TempDir()
	db := filepath.Join(wd, "data", "state-store.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, []byte("another stated's store"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wd, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(wd, 0o755) })
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir, cmd.Env = wd, append(env, "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a second demo beside the first: %v\n%s", err, out)
	}
	url := between(string(out), "stated: NATS ", ",")
	if !strings.HasPrefix(url, "nats://") || url == firstURL || !strings.Contains(string(out), "] done\n") {
		t.Fatalf("the second demo ran on %q (the first on %s):\n%s", url, firstURL, out)
	}
	if b, err := os.ReadFile(db); err != nil || string(b) != "another stated's store" {
		t.Fatalf("the ./data of the working directory after the demo: %q %v", b, err)
	}
	if entries, err := os.ReadDir(wd); err != nil || len(entries) != 1 {
		t.Fatalf("the working directory after the demo: %v %v, want only data", entries, err)
	}
	wantEmpty(t, tmp, "the second demo's temporary directory")
}

func between(s, after, before string) string {
	_, rest, ok := strings.Cut(s, after)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, before)
	return v
}

// TestDemoInterruptedMidTour stops the tour with Ctrl-C (and SIGTERM, and the SIGHUP of a terminal
// closed under it) as soon as stated is up and while the standby waits for the lease: the demo says it
// was interrupted and exits 130, with everything stopped and its temporary data directory removed. It
// said "the tour did not complete in time" and exited 1, as if it had failed on its own; a SIGHUP
// killed it outright and left its data directory behind.
func TestDemoInterruptedMidTour(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	stages := []struct{ name, at string }{{"stated up", "] stated: NATS "}, {"failover", "] KILLED "}}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		for _, stage := range stages {
			t.Run(sig.String()+" at "+stage.name, func(t *testing.T) {
				if sig == syscall.SIGHUP && signal.Ignored(syscall.SIGHUP) {
					t.Skip("SIGHUP is ignored here (nohup), and so in the demo: it keeps running, as nohup asks")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				tmp := t.TempDir()
				cmd, pr, exited := startDemo(t, ctx, bin, "", []string{"TMPDIR=" + tmp})
				var mu sync.Mutex
				var out strings.Builder
				reached, read := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(read)
					sc := bufio.NewScanner(pr)
					seen := false
					for sc.Scan() {
						mu.Lock()
						out.WriteString(sc.Text() + "\n")
						mu.Unlock()
						if !seen && strings.Contains(sc.Text(), stage.at) {
							seen = true
							close(reached)
						}
					}
				}()
				text := func() string {
					mu.Lock()
					defer mu.Unlock()
					return out.String()
				}
				select {
				case <-reached:
				case err := <-exited:
					<-read
					t.Fatalf("the demo exited (%v) before %q:\n%s", err, stage.at, text())
				}
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				err := <-exited
				<-read
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 130 {
					t.Fatalf("exit %v after %v, want 130:\n%s", err, sig, text())
				}
				if s := text(); !strings.Contains(s, "demo: interrupted") || strings.Contains(s, "in time") || strings.Contains(s, "failover complete") {
					t.Fatalf("the demo's end after %v:\n%s", sig, s)
				}
				wantEmpty(t, tmp, "the demo's temporary directory after "+sig.String())
			})
		}
	}
}

// startDemo starts the demo binary with args, in the working directory dir (this one when empty),
// with env added to the environment (a variable given there replaces the inherited one); it returns
// the command, its output (stdout and stderr together, ending when it exits) and a channel that
// receives Wait's error once it has exited.
func startDemo(t *testing.T, ctx context.Context, bin, dir string, env []string, args ...string) (*exec.Cmd, io.Reader, <-chan error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		exited <- err
	}()
	return cmd, pr, exited
}

// A --timeout of 0 or below is a usage error (exit 2, naming the flag), as a positional argument is:
// the tour cannot complete in no time. The demo took it, and said only "stated did not start:
// context deadline exceeded", exit 1, as if stated had failed.
func TestDemoRefusesATimeoutThatIsNotPositive(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	for _, timeout := range []string{"0", "0s", "-5s"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, "--timeout="+timeout).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--timeout") || strings.Contains(string(out), "stated") {
			t.Fatalf("--timeout %s: %v, want exit 2 naming the flag:\n%s", timeout, err, out)
		}
	}
}

// wantEmpty fails the test unless dir holds nothing: what the demo made there is gone.
func wantEmpty(t *testing.T, dir, what string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, filepath.Join(dir, e.Name()))
		}
		t.Fatalf("%s holds %v, want nothing left", what, names)
	}
}

// A temporary directory the demo cannot make its data directory in ($TMPDIR naming a directory that
// does not exist, here) ends the demo at once, exit 1, with a message that says what it was making
// and where: it said only "demo: stat /nonexistent: no such file or directory".
func TestDemoSaysWhyItCannotMakeItsDataDirectory(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	missing := filepath.Join(t.TempDir(), "missing")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "TMPDIR="+missing)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "temporary data directory in "+missing) ||
		!strings.Contains(string(out), "TMPDIR") {
		t.Fatalf("TMPDIR=%s: %v, want exit 1 naming the temporary data directory, where, and TMPDIR:\n%s", missing, err, out)
	}
}

// A --timeout that ends the tour is named as the reason: with one too short for stated to start, the
// demo said "stated did not start: context deadline exceeded", as if stated had failed.
func TestDemoNamesTheTimeoutWhenItGivesUp(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "--timeout", "1ns")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "--timeout 1ns") {
		t.Fatalf("--timeout 1ns: %v, want exit 1 naming --timeout 1ns:\n%s", err, out)
	}
	wantEmpty(t, tmp, "the demo's temporary directory")
}

// A reader of the demo's output that goes away before the end (`demo | head -3`, a pager quit early)
// stops the demo: everything stopped, its temporary data directory removed, exit 1 with the reason
// on stderr. The next line written killed it with SIGPIPE (exit 141) and left the directory behind.
func TestDemoStopsWhenItsOutputIsGone(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tmp := t.TempDir()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	first, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close() // the reader is gone: the demo's next line finds no one
	if err != nil || !strings.Contains(first, "stated: NATS") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("first line %q, %v", first, err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "output") {
		t.Fatalf("the demo after its reader went: %v, want exit 1 saying why:\n%s", err, stderr.String())
	}
	wantEmpty(t, tmp, "the demo's temporary directory")
}
