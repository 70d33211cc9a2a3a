package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
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
	}
}

// TestDemoKeepRunsUntilInterrupted runs the README's `--keep` variant: after the tour everything keeps
// working (the new lease holder goes on renewing, though nobody reads the workers' events any more)
// until Ctrl-C, which ends the demo with exit 0.
func TestDemoKeepRunsUntilInterrupted(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd, pr, exited := startDemo(t, ctx, bin, "--keep")
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
}

func between(s, after, before string) string {
	_, rest, ok := strings.Cut(s, after)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, before)
	return v
}

// TestDemoInterruptedMidTour stops the tour with Ctrl-C (and SIGTERM) while the standby waits for
// the lease: the demo says it was interrupted and exits 130, with everything stopped. It said "the
// tour did not complete in time" and exited 1, as if it had failed on its own.
func TestDemoInterruptedMidTour(t *testing.T) {
	bin := e2e.Build(t, "./examples/demo", "demo")
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd, pr, exited := startDemo(t, ctx, bin)
			var mu sync.Mutex
			var out strings.Builder
			killed, read := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(read)
				sc := bufio.NewScanner(pr)
				seen := false
				for sc.Scan() {
					mu.Lock()
					out.WriteString(sc.Text() + "\n")
					mu.Unlock()
					if !seen && strings.Contains(sc.Text(), "] KILLED ") {
						seen = true
						close(killed)
					}
				}
			}()
			text := func() string {
				mu.Lock()
				defer mu.Unlock()
				return out.String()
			}
			select {
			case <-killed:
			case err := <-exited:
				<-read
				t.Fatalf("the demo exited (%v) before its kill:\n%s", err, text())
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
		})
	}
}

// startDemo starts the demo binary with args; it returns the command, its output (stdout and stderr
// together, ending when it exits) and a channel that receives Wait's error once it has exited.
func startDemo(t *testing.T, ctx context.Context, bin string, args ...string) (*exec.Cmd, io.Reader, <-chan error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
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
