package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tinyBench is a statectl command line of global flags followed by a bench of one op a phase,
// without the idle memory figure.
func tinyBench(global ...string) []string {
	return append(global, "bench", "--owners", "1", "--rounds", "1", "--writers", "1", "--connections", "1", "--watches", "1",
		"--entries", "1", "--idle", "0s", "--metrics-url", "")
}

// statectl bench refuses, as a usage error and before it connects, a round count it could not hold
// (one that overflowed made it panic after writing its seeds), and it never deletes a key it did
// not write under its prefixes: it says which one and exits 1 with the key untouched.
func TestBenchRefusesWhatItCannotDoSafely(t *testing.T) {
	e := start(t, "")
	for _, rounds := range []string{"9223372036854775807", "1000000"} {
		r := e.run("bench", "--rounds", rounds, "--metrics-url", "")
		if r.code != 2 || !strings.Contains(r.stderr, "statectl: USAGE: ") || !strings.Contains(r.stderr, "rounds at most") {
			t.Errorf("bench --rounds %s: want exit 2 and a USAGE error, got %s", rounds, r)
		}
	}

	mine := e.putLease("service/bench", "fanout/mine")
	r := e.fails(1, "ERROR", "bench", "--owners", "2", "--rounds", "1", "--writers", "2", "--connections", "2", "--watches", "2",
		"--entries", "3", "--idle", "0s", "--metrics-url", "")
	if !strings.Contains(r.stderr, "fanout/mine") || !strings.Contains(r.stderr, "did not write") {
		t.Errorf("bench beside a key of someone else's: %s", r)
	}
	if got := e.getJSON("service/bench", "fanout/mine"); got.Revision != mine.Revision {
		t.Errorf("fanout/mine went from revision %d to %d", mine.Revision, got.Revision)
	}
}

// Flags that cannot work are bad usage, exit 2, before the bench connects or writes: a metrics URL
// without a host (it failed with exit 1 once the bench had written its first keys) and a principal
// given twice in --admins (it ran, and reported two principals).
func TestBenchRefusesBadFlagsAsUsage(t *testing.T) {
	e := start(t, "")
	for _, args := range [][]string{
		{"--metrics-url", "http:///metrics"},
		{"--admins", "coordinator:coord-pw,coordinator:coord-pw", "--metrics-url", ""},
	} {
		r := e.run(append([]string{"bench", "--owners", "2", "--rounds", "1", "--writers", "2", "--connections", "2",
			"--watches", "2", "--entries", "2", "--idle", "0s"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "statectl: USAGE: ") {
			t.Errorf("bench %q: want exit 2 and a USAGE error, got %s", args, r)
		}
	}
	if r := e.ok("ls", "service/bench", "--json"); !strings.Contains(r.stdout, `"entries":[]`) {
		t.Fatalf("a refused bench wrote: %s", r.stdout)
	}
}

// A Ctrl-C stops the bench, which removes its keys before it exits 130.
func TestBenchInterruptedCleansUp(t *testing.T) {
	e := start(t, "")
	p := e.start("bench", "--owners", "1", "--rounds", "10000", "--writers", "1", "--connections", "1", "--watches", "1",
		"--entries", "1", "--idle", "0s", "--metrics-url", "")
	p.awaitStderr("serial CAS:")
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("the bench did not stop within %v of a Ctrl-C; stderr:\n%s", timeout, p.stderr())
	}
	if p.code != 130 || !strings.Contains(p.stderr(), "statectl: INTERRUPTED: ") {
		t.Fatalf("exit %d, want 130 and INTERRUPTED; stderr:\n%s", p.code, p.stderr())
	}
	if r := e.ok("ls", "service/bench", "--json"); !strings.Contains(r.stdout, `"entries":[]`) {
		t.Fatalf("the interrupted bench left entries: %s", r.stdout)
	}
}

// --admins-file reads the admin principals from a file, one or more per line, so that their passwords
// are not in the command line (which every user of the machine can read in ps): the bench connects as
// the file's principals, not as --user.
func TestBenchAdminsFromAFile(t *testing.T) {
	e := start(t, "")
	file := filepath.Join(e.dir, "admins")
	if err := os.WriteFile(file, []byte("# the bench's admins\ncoordinator:coord-pw\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	small := []string{"bench", "--owners", "2", "--rounds", "1", "--writers", "2", "--connections", "2",
		"--watches", "2", "--entries", "2", "--idle", "0s", "--metrics-url", "", "--user", "alice", "--password", "alice-pw", "--json"}
	r := e.run(append(small, "--admins-file", file)...)
	if r.code != 0 || !strings.Contains(r.stdout, `"principals":1`) {
		t.Fatalf("bench --admins-file as alice, a principal that is no admin: want the file's admin used, got %s", r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--admins-file", file, "--admins", "coordinator:coord-pw"}, "give one"},
		{[]string{"--admins-file", filepath.Join(e.dir, "missing")}, "--admins-file " + filepath.Join(e.dir, "missing")},
		{[]string{"--admins-file", os.DevNull}, "no principal"},
	} {
		r := e.run(append(small, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "statectl: USAGE: ") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("bench %q: want exit 2 and a USAGE error saying %q, got %s", tc.args, tc.want, r)
		}
	}
}
