package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/bench"
	"github.com/keeppeek/coordination/store/wire"
)

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]int64{"30s": 30000, "1500": 1500, "0": 0, "1.5s": 1500, "2m": 120000, "250ms": 250} {
		if got, err := parseTTL(in); err != nil || got != want {
			t.Errorf("parseTTL(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "-1s", "1us", "soon", ""} {
		if got, err := parseTTL(in); err == nil {
			t.Errorf("parseTTL(%q) = %d, want an error", in, got)
		}
	}
	// A TTL above 24 h is clamped by the server, up to the 2^53-1 ms it takes: past that, and past what
	// a duration holds, it is out of range (not "neither a duration nor milliseconds" of a duration).
	if got, err := parseTTL("9007199254740991"); err != nil || got != 1<<53-1 {
		t.Errorf("parseTTL(2^53-1) = %d, %v", got, err)
	}
	for _, in := range []string{"9007199254740992", "9223372036854775807", "99999999999999999999", "3000000h"} {
		if got, err := parseTTL(in); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("parseTTL(%q) = %d, %v; want an out of range error", in, got, err)
		}
	}
}

func TestParseGuard(t *testing.T) {
	g, err := parseGuard("leases/front-door=42")
	if err != nil || g.Key != "leases/front-door" || g.Revision != 42 {
		t.Fatalf("parseGuard = %+v, %v", g, err)
	}
	for _, in := range []string{"=3", "k=", "k", "k=x"} {
		if g, err := parseGuard(in); err == nil {
			t.Errorf("parseGuard(%q) = %+v, want an error", in, g)
		}
	}
}

func TestClassify(t *testing.T) {
	conflict := wire.RevisionError(wire.CodeConflict, 3, "k is at revision 3, not 2")
	for _, c := range []struct {
		err   error
		code  int
		label string
		msg   string
	}{
		{conflict, exitFailure, string(wire.CodeConflict), "k is at revision 3, not 2 (current_revision 3)"},
		{fmt.Errorf("bench: serial CAS: %w", conflict), exitFailure, string(wire.CodeConflict), "bench: serial CAS: " + conflict.Error()},
		{usageErrorf("get takes 2 arguments"), exitUsage, "USAGE", "get takes 2 arguments"},
		{fmt.Errorf("get request: %w", context.DeadlineExceeded), exitConnection, "TIMEOUT", "get request: context deadline exceeded"},
		{fmt.Errorf("get request: %w", nats.ErrTimeout), exitConnection, "TIMEOUT", "get request: nats: timeout"},
		{fmt.Errorf("bench: %w: %w", bench.ErrConnect, errors.New("nats: Authorization Violation")), exitConnection, "CONNECTION", "bench: connect: nats: Authorization Violation"},
		{fmt.Errorf("watch: %w", context.Canceled), exitInterrupted, "INTERRUPTED", "watch: context canceled"},
		{fmt.Errorf("backup: %w", nats.ErrReconnectBufExceeded), exitConnection, "CONNECTION", "backup: " + nats.ErrReconnectBufExceeded.Error()},
		{errors.New("open x: no such file or directory"), exitFailure, "ERROR", "open x: no such file or directory"},
	} {
		code, label, msg := classify(c.err)
		if code != c.code || label != c.label || msg != c.msg {
			t.Errorf("classify(%v) = %d %s %q; want %d %s %q", c.err, code, label, msg, c.code, c.label, c.msg)
		}
	}
}

// Usage problems are found before any connection: these run without a server.
func TestRunUsageInProcess(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"help", "ls"}, 0, "--limit N", ""},
		{[]string{"help", "help"}, 0, "Commands:", ""},
		{[]string{"ls", "--help"}, 0, "--limit N", ""},
		{nil, 2, "", "statectl: USAGE: name a command"},
		{[]string{"get", "service/x"}, 2, "", "statectl: USAGE: get takes 2 arguments"},
		{[]string{"put", "a", "b"}, 2, "", "statectl: USAGE: put takes 3 or 4 arguments"},
		{[]string{"ls", "a", "b", "c"}, 2, "", "statectl: USAGE: ls takes 1 or 2 arguments"},
		{[]string{"put", "a", "b", "c", "--guard", "nope"}, 2, "", `statectl: USAGE: --guard "nope" is not KEY=REV`},
		{[]string{"--prefix", "a.*", "info"}, 2, "", `statectl: USAGE: --prefix "a.*" is not a subject prefix`},
		{[]string{"info", "--nats-url", ""}, 2, "", "statectl: USAGE: --nats-url is empty"},
		// A flag value the server would refuse whatever the entry is a usage error naming the flag (exit
		// 2), not the server's INVALID_ARGUMENT (exit 1) about expected_revision or the guard.
		{[]string{"put", "a", "b", "c", "--expect-revision", "-1"}, 2, "", `statectl: USAGE: put: invalid value "-1" for flag -expect-revision: -1 is negative`},
		{[]string{"delete", "a", "b", "--expect-revision", "99999999999999999999"}, 2, "", `for flag -expect-revision: 99999999999999999999 is above 2^53-1, the largest revision`},
		{[]string{"put", "a", "b", "c", "--expect-revision", "9007199254740992"}, 2, "", `for flag -expect-revision: 9007199254740992 is above 2^53-1, the largest revision`},
		{[]string{"delete", "a", "b", "--expect-revision", "0"}, 2, "", `statectl: USAGE: delete: --expect-revision 0 (create only) has no meaning for a delete: give the entry's revision`},
		{[]string{"delete", "a", "b", "--guard", "k=0"}, 2, "", `statectl: USAGE: --guard "k=0": the revision must be at least 1`},
		{[]string{"put", "a", "b", "c", "--guard", "k=99999999999999999999"}, 2, "", `statectl: USAGE: --guard "k=99999999999999999999": revision 99999999999999999999 is above 2^53-1`},
		{[]string{"delete", "a", "b", "--guard", "k=9007199254740992"}, 2, "", `statectl: USAGE: --guard "k=9007199254740992": revision 9007199254740992 is above 2^53-1`},
		// A flag given empty (a script's unset variable) is refused, never taken for no flag: an
		// empty --guard wrote unfenced, an empty --ttl removed the entry's lease.
		{[]string{"put", "a", "b", "c", "--guard", ""}, 2, "", `statectl: USAGE: --guard "" is not KEY=REV`},
		{[]string{"delete", "a", "b", "--guard", ""}, 2, "", `statectl: USAGE: --guard "" is not KEY=REV`},
		{[]string{"put", "a", "b", "c", "--ttl", ""}, 2, "", `statectl: USAGE: --ttl "" is neither a duration (30s) nor milliseconds (30000)`},
		{[]string{"ls", "a", "--limit", "-1"}, 2, "", `statectl: USAGE: --limit -1: a page holds 1 to 256 entries (0: the server's default, 100)`},
		{[]string{"ls", "a", "--limit", "257"}, 2, "", `statectl: USAGE: --limit 257: a page holds 1 to 256 entries`},
	} {
		var out, errb strings.Builder
		code := run(context.Background(), c.args, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.stderr) {
			t.Errorf("statectl %q: exit %d\nstdout: %s\nstderr: %s", c.args, code, out.String(), errb.String())
		}
	}
}

// An unreadable STATECTL_TIMEOUT or STATECTL_JSON is a usage error for a command that would use it,
// but not for help (which the user reads to learn what the variable takes), nor for a command whose
// flag replaces it. Help failed with exit 2 too.
func TestBadEnvironmentLeavesHelpAlone(t *testing.T) {
	t.Setenv("STATECTL_TIMEOUT", "soon")
	t.Setenv("STATECTL_JSON", "maybe")
	t.Setenv("STATECTL_NATS_URL", "nats://127.0.0.1:1") // nothing listens: a command that runs cannot connect
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"help", "get"}, 0, "Usage: statectl get", ""},
		{[]string{"get", "--help"}, 0, "Usage: statectl get", ""},
		{[]string{"--help"}, 0, "Commands:", ""},
		{[]string{"info"}, 2, "", `statectl: USAGE: STATECTL_TIMEOUT="soon"`},
		{[]string{"info", "--timeout", "1s"}, 2, "", `statectl: USAGE: STATECTL_JSON="maybe"`},
		{[]string{"info", "--timeout", "1s", "--json"}, 3, "", "statectl: CONNECTION"},
	} {
		var out, errb strings.Builder
		code := run(context.Background(), c.args, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.stderr) {
			t.Errorf("statectl %q: exit %d\nstdout: %s\nstderr: %s", c.args, code, out.String(), errb.String())
		}
	}
}

// Errors never show a login that --nats-url carries (statectl help), even one whose password holds a
// character net/url's parse error escapes when it quotes the URL (a quote, a backslash, a control
// character): on stderr, nor in the --json document on stdout.
func TestNATSURLPasswordNeverShown(t *testing.T) {
	for _, pw := range []string{`s3"cr3t`, `s3\cr3t`, "s3\x01cr3t"} {
		code, stdout, stderr := runStatectl(t, "--json", "--nats-url", "nats://u:"+pw+"@127.0.0.1:1", "info")
		if code != exitConnection || !strings.Contains(stderr, "xxxxx") {
			t.Errorf("--nats-url with password %q: exit %d, stderr %s", pw, code, stderr)
		}
		for name, out := range map[string]string{"stdout": stdout, "stderr": stderr} {
			if strings.Contains(out, "cr3t") {
				t.Errorf("--nats-url with password %q: %s shows the password:\n%s", pw, name, out)
			}
		}
	}
}
