package main_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// A script runs `out=$(statectl ... --json)` and reads the answer with jq. A success was one JSON
// document on stdout, but a failure printed nothing there: the SPEC code, and the current_revision a
// compare-and-set loop needs, were only in the prose line on stderr. With --json, a failure is one
// JSON document on stdout too, a StateStoreResult {"request_id":0,"ok":false,"error":{...}} whose
// code is the SPEC code (or statectl's label: USAGE, CONNECTION, ...), and the exit status and the
// stderr line stay as they were.
func TestJSONErrorsAreOneDocumentOnStdout(t *testing.T) {
	e := start(t, "")
	e.putLease("service/tx", "k")
	closed := fmt.Sprintf("nats://127.0.0.1:%d", e2e.FreePort(t))
	for _, c := range []struct {
		stdin string
		code  int
		label string
		args  []string
		rev   *uint64 // the current_revision the error must carry
	}{
		{"", 1, "STATE_STORE_ERROR_CODE_NOT_FOUND", []string{"get", "service/tx", "missing", "--json"}, nil},
		{leaseDoc, 1, "STATE_STORE_ERROR_CODE_CONFLICT", []string{"put", "service/tx", "k", leaseSchema, "--expect-revision", "0", "--json"}, new(uint64(1))},
		{"", 1, "STATE_STORE_ERROR_CODE_GUARD_FAILED", []string{"--json", "delete", "service/tx", "k", "--guard", "other=3"}, new(uint64(0))},
		{"[1]", 1, "STATE_STORE_ERROR_CODE_INVALID_ARGUMENT", []string{"put", "service/tx", "k", leaseSchema, "--json"}, nil},
		{"", 1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", []string{"ls", "service/tx", "--json", "--user", "alice", "--password", "alice-pw"}, nil},
		{"", 1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", []string{"audit", "verify", "--json", "--user", "alice", "--password", "alice-pw"}, nil},
		{"", 1, "ERROR", []string{"put", "service/tx", "k", leaseSchema, filepath.Join(e.dir, "no-such-file"), "--json"}, nil},
		{"", 2, "USAGE", []string{"get", "service/tx", "--json"}, nil},
		{"", 2, "USAGE", []string{"--json", "put", "service/tx", "k", leaseSchema, "--ttl", "soon"}, nil},
		{"", 3, "CONNECTION", []string{"info", "--json", "--nats-url", closed}, nil},
		{"", 3, "CONNECTION", []string{"info", "--json", "--password", "wrong"}, nil},
		{"", 1, "TIMEOUT", []string{"watch", "service/tx", "--json", "--count", "1", "--timeout", "1s"}, nil},
	} {
		r := e.runIn(c.stdin, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, "statectl: "+c.label+": ") {
			t.Errorf("statectl %q: want exit %d and %s on stderr, got %s", c.args, c.code, c.label, r)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		last := lines[len(lines)-1]
		if c.args[0] != "watch" && len(lines) != 1 {
			t.Errorf("statectl %q: stdout is not one line: %s", c.args, r)
			continue
		}
		var res wire.Result
		dec := json.NewDecoder(strings.NewReader(last))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&res); err != nil || dec.More() {
			t.Errorf("statectl %q: the last stdout line is not one StateStoreResult (%v): %s", c.args, err, r)
			continue
		}
		if res.OK || res.Error == nil || string(res.Error.Code) != c.label || res.Error.Message == "" {
			t.Errorf("statectl %q: result %+v, want ok false and code %s: %s", c.args, res, c.label, r)
			continue
		}
		switch {
		case c.rev == nil && res.Error.CurrentRevision != nil:
			t.Errorf("statectl %q: current_revision %d where none is due: %s", c.args, *res.Error.CurrentRevision, r)
		case c.rev != nil && (res.Error.CurrentRevision == nil || *res.Error.CurrentRevision != *c.rev):
			t.Errorf("statectl %q: current_revision %v, want %d: %s", c.args, res.Error.CurrentRevision, *c.rev, r)
		}
		if strings.Contains(res.Error.Message, "current_revision") || strings.Contains(res.Error.Message, "statectl: ") {
			t.Errorf("statectl %q: the message repeats what the fields say: %q", c.args, res.Error.Message)
		}
	}
	// The URL's login stays out of the JSON error as it stays out of stderr.
	r := e.run("info", "--json", "--nats-url", strings.Replace(closed, "nats://", "nats://coordinator:s3cret-pw@", 1))
	if r.code != 3 || strings.Contains(r.stdout, "s3cret-pw") || !strings.Contains(r.stdout, `"code":"CONNECTION"`) {
		t.Errorf("connection error with a login in the URL: %s", r)
	}
	// Without --json, stdout stays empty on a failure.
	if r := e.run("get", "service/tx", "missing"); r.code != 1 || r.stdout != "" {
		t.Errorf("get of a missing key without --json: %s", r)
	}
}
