package main_test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// A terminal closed under statectl sends it SIGHUP, which killed it outright: a watch stayed on the
// server until its ack deadline, a bench left its keys, a backup its temporary file. A hangup ends a
// command as Ctrl-C does: the watch is unwatched (exit 0: an interrupt is how a watch ends), the
// bench removes its keys (exit 130).
func TestHangupEndsACommandAsAnInterruptDoes(t *testing.T) {
	e := start(t, "")
	p := e.start("watch", "service/w", "--json")
	p.await(`"snapshot_revision":0`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code, rest := p.wait(); code != 0 || len(rest) != 0 {
		t.Fatalf("watch hung up: exit %d, stdout %q, stderr:\n%s", code, rest, p.stderr())
	}
	if n := e.liveWatches(); n != 0 {
		t.Fatalf("%d live watches after the hung-up watch", n)
	}

	p = e.start("bench", "--owners", "1", "--rounds", "10000", "--writers", "1", "--connections", "1", "--watches", "1",
		"--entries", "1", "--idle", "0s", "--metrics-url", "")
	p.awaitStderr("serial CAS:")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("the bench did not stop within %v of a hangup; stderr:\n%s", timeout, p.stderr())
	}
	if p.code != 130 || !strings.Contains(p.stderr(), "statectl: INTERRUPTED: ") {
		t.Fatalf("exit %d, want 130 and INTERRUPTED; stderr:\n%s", p.code, p.stderr())
	}
	if r := e.ok("ls", "service/bench", "--json"); !strings.Contains(r.stdout, `"entries":[]`) {
		t.Fatalf("the hung-up bench left entries: %s", r.stdout)
	}
}
