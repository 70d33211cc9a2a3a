package main_test

import (
	"os"
	"strings"
	"testing"
	"time"
)

// awaitStderr waits until p's stderr holds want.
func (p *proc) awaitStderr(want string) {
	p.t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(p.stderr(), want) {
		select {
		case <-deadline:
			p.t.Fatalf("no %q on stderr within %v:\n%s", want, timeout, p.stderr())
		case <-p.done:
			p.t.Fatalf("exited (%d) before %q on stderr:\n%s", p.code, want, p.stderr())
		case <-tick.C:
		}
	}
}

// A first Ctrl-C stops the bench and lets it remove its keys (which may take up to 2 minutes against
// a stalled server); a second Ctrl-C ends statectl at once, exit 130, saying what it left behind.
func TestSecondInterruptAbortsTheBenchCleanup(t *testing.T) {
	e := start(t, "")
	p := e.start("bench", "--user", "coordinator", "--password", "coord-pw", "--timeout", "50s", "--owners", "1",
		"--rounds", "10000", "--writers", "1", "--connections", "1", "--watches", "1", "--entries", "1", "--idle", "0s", "--metrics-url", "")
	p.awaitStderr("serial CAS:")
	// A stalled server: every request of the cleanup waits for its --timeout.
	e.s.Pause()
	_ = p.cmd.Process.Signal(os.Interrupt)
	p.awaitStderr("removing the bench's keys")
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second): // far below the cleanup's 50 s request bound
		t.Fatalf("a second Ctrl-C did not end the bench's cleanup; stderr:\n%s", p.stderr())
	}
	if p.code != 130 || !strings.Contains(p.stderr(), "statectl: INTERRUPTED: ") || !strings.Contains(p.stderr(), "service/bench") {
		t.Fatalf("exit %d; want 130 and what was left behind in service/bench; stderr:\n%s", p.code, p.stderr())
	}
}
