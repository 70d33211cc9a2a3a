package main_test

import (
	"strings"
	"testing"
)

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
