package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/internal/bench"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// timeout bounds every wait of the tests; a statectl run is killed after it.
const timeout = 60 * time.Second

var principals = []e2e.Principal{
	{ID: "coordinator", Admin: true, Password: "coord-pw"},
	{ID: "alice", Password: "alice-pw"},
}

const (
	leaseSchema = "keeppeek.lease.v1"
	leaseDoc    = `{"holder":"w1","claimed_at_ms":1}`
	prefSchema  = "keeppeek.preference.v1"
)

var buildMu sync.Mutex

// binaries builds stated and statectl once; parallel tests wait for the one build.
func binaries(t *testing.T) (stated, statectl string) {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	return e2e.Binary(t, "stated"), e2e.Binary(t, "statectl")
}

// env is a running stated and the statectl that talks to it.
type env struct {
	t   *testing.T
	s   *e2e.Stated
	bin string
	dir string
}

func start(t *testing.T, extra string) *env {
	t.Helper()
	t.Parallel()
	_, bin := binaries(t)
	s := e2e.NewStated(t, e2e.Config{Principals: principals, Extra: extra})
	s.Start()
	return &env{t: t, s: s, bin: bin, dir: t.TempDir()}
}

// conn connects to e's stated as principal (password pw), with its inbox prefix; it closes at the
// test's end.
func (e *env) conn(principal, pw string) *nats.Conn {
	e.t.Helper()
	nc, err := client.Connect(e.s.URL(), principal, nats.UserInfo(principal, pw))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// client is a store client of principal (password pw) on a connection of its own.
func (e *env) client(principal, pw string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.conn(principal, pw), principal)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// result is one finished statectl run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// command prepares statectl with args, as the coordinator by default (through the environment).
func (e *env) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(os.Environ(), "STATECTL_NATS_URL="+e.s.URL(), "STATECTL_USER=coordinator",
		"STATECTL_PASSWORD=coord-pw", "STATECTL_TIMEOUT=", "STATECTL_JSON=", "STATECTL_PREFIX=")
	return cmd
}

// run runs statectl to the end with stdin.
func (e *env) runIn(stdin string, args ...string) result {
	e.t.Helper()
	return e.runWith(stdin, nil, args...)
}

// runWith runs statectl with stdin, and env added after the environment command sets.
func (e *env) runWith(stdin string, env []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := e.command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(cmd.Env, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("statectl %v: %v", args, err)
	}
	if ctx.Err() != nil {
		e.t.Fatalf("statectl %v did not finish within %v: %s", args, timeout, r)
	}
	return r
}

func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runIn("", args...)
}

// ok runs statectl and fails the test unless it exits 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("statectl %v: %s", args, r)
	}
	return r
}

// fails runs statectl and checks the exit code and that stderr has `statectl: <label>`.
func (e *env) fails(code int, label string, args ...string) result {
	e.t.Helper()
	return e.failsIn("", code, label, args...)
}

func (e *env) failsIn(stdin string, code int, label string, args ...string) result {
	e.t.Helper()
	r := e.runIn(stdin, args...)
	if r.code != code || !strings.Contains(r.stderr, "statectl: "+label) {
		e.t.Fatalf("statectl %v: want exit %d and %q on stderr, got %s", args, code, label, r)
	}
	return r
}

// file writes content into the test's directory and returns its path.
func (e *env) file(name, content string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) getJSON(ns, key string) wire.Entry {
	e.t.Helper()
	r := e.ok("get", ns, key, "--json")
	var entry wire.Entry
	if err := json.Unmarshal([]byte(r.stdout), &entry); err != nil {
		e.t.Fatalf("get --json: %v\n%s", err, r.stdout)
	}
	return entry
}

func (e *env) putLease(ns, key string, args ...string) wire.Entry {
	e.t.Helper()
	r := e.runIn(leaseDoc, append([]string{"put", ns, key, leaseSchema, "-", "--json"}, args...)...)
	if r.code != 0 {
		e.t.Fatalf("put %s %s: %s", ns, key, r)
	}
	var entry wire.Entry
	if err := json.Unmarshal([]byte(r.stdout), &entry); err != nil {
		e.t.Fatalf("put --json: %v\n%s", err, r.stdout)
	}
	return entry
}

func TestPutThenGet(t *testing.T) {
	e := start(t, "")
	doc := e.file("lease.json", "{\n  \"holder\": \"worker-1\",\n  \"claimed_at_ms\": 1700000000000\n}\n")
	r := e.ok("put", "service/tx", "leases/front-door", leaseSchema, doc)
	for _, want := range []string{"KEY", "leases/front-door", "OWNER", "coordinator", "REVISION", "1"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("put output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Table: the entry's fields, then the document pretty-printed.
	r = e.ok("get", "service/tx", "leases/front-door")
	for _, want := range []string{"NAMESPACE  service/tx", "SCHEMA     " + leaseSchema, "OWNER      coordinator",
		"REVISION   1", "TTL        -", fmt.Sprintf("SIZE       %d", len(`{"holder":"worker-1","claimed_at_ms":1700000000000}`)), "DOCUMENT\n{\n  \"holder\": \"worker-1\",\n  \"claimed_at_ms\": 1700000000000\n}"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("get output lacks %q:\n%s", want, r.stdout)
		}
	}
	// JSON: the entry as the server sent it, the document compact.
	got := e.getJSON("service/tx", "leases/front-door")
	if got.Namespace != "service/tx" || got.Key != "leases/front-door" || got.Owner != "coordinator" || got.Revision != 1 ||
		got.Schema != leaseSchema || string(got.Document) != `{"holder":"worker-1","claimed_at_ms":1700000000000}` || got.CreatedAtMs == 0 {
		t.Fatalf("get --json = %+v (document %s)", got, got.Document)
	}
	// The document from stdin ("-" and no FILE at all), flags after the arguments.
	e.runIn(leaseDoc, "put", "service/tx", "from-stdin", leaseSchema, "-")
	if r := e.runIn(leaseDoc, "put", "service/tx", "no-file", leaseSchema, "--json"); r.code != 0 || !strings.Contains(r.stdout, `"key":"no-file"`) {
		t.Fatalf("put without FILE: %s", r)
	}
	if got := e.getJSON("service/tx", "from-stdin"); string(got.Document) != leaseDoc {
		t.Fatalf("document from stdin: %s", got.Document)
	}
	// --json keeps the document's bytes: no HTML escaping of <, > or &.
	odd := `{"holder":"w1","claimed_at_ms":1,"purpose":"a<b&c>d"}`
	e.runIn(odd, "put", "service/tx", "odd", leaseSchema)
	if r := e.ok("get", "service/tx", "odd", "--json"); !strings.Contains(r.stdout, `"document":`+odd) {
		t.Fatalf("get --json changed the document's bytes:\n%s", r.stdout)
	}
	// What the server rejects keeps its SPEC code: a document that is not JSON, a schema mismatch.
	e.failsIn("not json", 1, "STATE_STORE_ERROR_CODE_INVALID_ARGUMENT", "put", "service/tx", "bad", leaseSchema)
	e.failsIn(`{"holder":"w1"}`, 1, "STATE_STORE_ERROR_CODE_SCHEMA_INVALID", "put", "service/tx", "bad", leaseSchema)
	e.fails(1, "STATE_STORE_ERROR_CODE_NOT_FOUND", "get", "service/tx", "missing")
	e.fails(1, "ERROR", "put", "service/tx", "bad", leaseSchema, filepath.Join(e.dir, "no-such-file"))
}

// A request NATS refuses (a subject the principal may not publish to: here a wrong --prefix) is
// PERMISSION_DENIED at once, not a TIMEOUT after --timeout.
func TestRefusedRequestIsPermissionDenied(t *testing.T) {
	e := start(t, "")
	for _, args := range [][]string{{"get", "service/tx", "k"}, {"info"}, {"ls", "service/tx"}} {
		r := e.fails(1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", append(args, "--prefix", "foo", "--timeout", "60s")...)
		if !strings.Contains(r.stderr, "--prefix") {
			t.Fatalf("%v: %s", args, r)
		}
	}
}

func TestCompareAndSet(t *testing.T) {
	e := start(t, "")
	first := e.putLease("service/tx", "k", "--expect-revision", "0") // create only: the key is new
	if first.Revision != 1 {
		t.Fatalf("create-only put stored revision %d", first.Revision)
	}
	// Create-only on an existing key, and a stale expected revision: CONFLICT, exit 1, nothing written.
	r := e.failsIn(leaseDoc, 1, "STATE_STORE_ERROR_CODE_CONFLICT", "put", "service/tx", "k", leaseSchema, "--expect-revision", "0")
	if !strings.Contains(r.stderr, "current_revision 1") {
		t.Fatalf("conflict lacks the current revision: %s", r)
	}
	e.failsIn(leaseDoc, 1, "STATE_STORE_ERROR_CODE_CONFLICT", "put", "--expect-revision", "7", "service/tx", "k", leaseSchema)
	if got := e.getJSON("service/tx", "k"); got.Revision != 1 {
		t.Fatalf("a failed CAS changed the entry: revision %d", got.Revision)
	}
	// The right revision writes.
	if second := e.putLease("service/tx", "k", "--expect-revision", "1"); second.Revision != 2 {
		t.Fatalf("CAS put stored revision %d", second.Revision)
	}
}

func TestTTL(t *testing.T) {
	e := start(t, "")
	for _, c := range []struct {
		flag string
		ms   int64
	}{{"5s", 5000}, {"1500", 1500}, {"1m30s", 90000}} {
		entry := e.putLease("service/tx", "lease-"+c.flag, "--ttl", c.flag)
		if entry.TTLMs != c.ms || entry.ExpiresAtMs != entry.UpdatedAtMs+c.ms {
			t.Fatalf("--ttl %s stored ttl_ms %d expires_at_ms %d (updated %d)", c.flag, entry.TTLMs, entry.ExpiresAtMs, entry.UpdatedAtMs)
		}
		if got := e.getJSON("service/tx", "lease-"+c.flag); got.TTLMs != c.ms {
			t.Fatalf("get after --ttl %s: ttl_ms %d", c.flag, got.TTLMs)
		}
	}
	if r := e.ok("get", "service/tx", "lease-5s"); !strings.Contains(r.stdout, "TTL        5s") {
		t.Fatalf("get table lacks the TTL:\n%s", r.stdout)
	}
	e.failsIn(leaseDoc, 1, "STATE_STORE_ERROR_CODE_TTL_INVALID", "put", "service/tx", "short", leaseSchema, "--ttl", "500ms")
	e.failsIn(leaseDoc, 2, "USAGE", "put", "service/tx", "short", leaseSchema, "--ttl", "soon")
}

func TestGuardAndDelete(t *testing.T) {
	e := start(t, "")
	lease := e.putLease("service/tx", "leases/a", "--ttl", "60s")
	guard := fmt.Sprintf("leases/a=%d", lease.Revision)
	stale := fmt.Sprintf("leases/a=%d", lease.Revision+5)
	// A put fenced by a revision the lease does not have: GUARD_FAILED with the lease's revision.
	r := e.failsIn(leaseDoc, 1, "STATE_STORE_ERROR_CODE_GUARD_FAILED", "put", "service/tx", "status/a", leaseSchema, "--guard", stale)
	if !strings.Contains(r.stderr, fmt.Sprintf("current_revision %d", lease.Revision)) {
		t.Fatalf("guard failure lacks the lease revision: %s", r)
	}
	e.fails(1, "STATE_STORE_ERROR_CODE_NOT_FOUND", "get", "service/tx", "status/a")
	entry := e.putLease("service/tx", "status/a", "--guard", guard)

	// delete: a stale guard and a stale revision are refused, the right ones delete.
	e.fails(1, "STATE_STORE_ERROR_CODE_GUARD_FAILED", "delete", "service/tx", "status/a", "--guard", stale)
	e.fails(1, "STATE_STORE_ERROR_CODE_CONFLICT", "delete", "service/tx", "status/a", "--expect-revision", fmt.Sprint(entry.Revision+1))
	r = e.ok("delete", "service/tx", "status/a", "--guard", guard, "--expect-revision", fmt.Sprint(entry.Revision))
	if want := fmt.Sprintf("deleted service/tx status/a at revision %d", entry.Revision+1); !strings.Contains(r.stdout, want) {
		t.Fatalf("delete output %q, want %q", r.stdout, want)
	}
	e.fails(1, "STATE_STORE_ERROR_CODE_NOT_FOUND", "get", "service/tx", "status/a")
	e.fails(1, "STATE_STORE_ERROR_CODE_NOT_FOUND", "delete", "service/tx", "status/a")
	// --json prints the delete's result.
	r = e.ok("delete", "service/tx", "leases/a", "--json")
	var res wire.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.OK || res.Revision == nil || *res.Revision != entry.Revision+2 {
		t.Fatalf("delete --json: %s (%v)", r.stdout, err)
	}
	e.fails(2, "USAGE", "delete", "service/tx", "x", "--guard", "no-revision")
}

func TestLsPages(t *testing.T) {
	e := start(t, "")
	for _, k := range []string{"items/e", "items/a", "items/d", "items/b", "items/c", "other"} {
		e.putLease("service/tx", k)
	}
	// Five entries under items/ in pages of two: three pages, all printed in key order.
	r := e.ok("ls", "service/tx", "items/", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "KEY") || !strings.Contains(lines[0], "REVISION") ||
		!strings.Contains(lines[0], "SCHEMA") || !strings.Contains(lines[0], "OWNER") || !strings.Contains(lines[0], "EXPIRES") || !strings.Contains(lines[0], "SIZE") {
		t.Fatalf("ls table:\n%s", r.stdout)
	}
	for i, k := range []string{"items/a", "items/b", "items/c", "items/d", "items/e"} {
		if f := strings.Fields(lines[i+1]); f[0] != k || f[2] != leaseSchema || f[3] != "coordinator" || f[5] != fmt.Sprint(len(leaseDoc)) {
			t.Fatalf("ls row %d = %q, want %s", i+1, lines[i+1], k)
		}
	}
	r = e.ok("--json", "ls", "service/tx", "--limit", "2")
	var res wire.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Entries) != 6 || res.Revision == nil || *res.Revision != 6 {
		t.Fatalf("ls --json: %v\n%s", err, r.stdout)
	}
	if res.Entries[5].Key != "other" {
		t.Fatalf("ls --json order: %+v", res.Entries)
	}
	if r := e.ok("ls", "service/empty"); strings.TrimSpace(r.stdout) != "KEY  REVISION  SCHEMA  OWNER  EXPIRES  SIZE" {
		t.Fatalf("ls of an empty namespace:\n%s", r.stdout)
	}
}

func TestInfo(t *testing.T) {
	e := start(t, "[bounds]\nmax_watches_per_principal = 300\n")
	r := e.ok("info")
	for _, want := range []string{"SERVER ID", "EPOCH", wire.FeatureStateStore, "max_watches_per_principal  300", "max_document_bytes         16384"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("info lacks %q:\n%s", want, r.stdout)
		}
	}
	// Any principal may ask; --json is the info object.
	r = e.ok("info", "--json", "--user", "alice", "--password", "alice-pw")
	var info wire.Info
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Epoch == "" || info.Bounds.MaxWatchesPerPrincipal != 300 || info.Bounds.MaxWatches != 1024 {
		t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
}

// proc is a statectl that runs while the test goes on (watch).
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string // stdout, line by line; closed at EOF
	seen  []string
	errMu sync.Mutex
	errb  strings.Builder
	done  chan struct{}
	code  int
}

func (e *env) start(args ...string) *proc {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	p := &proc{t: e.t, cmd: e.command(ctx, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.errMu.Lock()
		defer p.errMu.Unlock()
		return p.errb.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		err := p.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (p *proc) stderr() string {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.errb.String()
}

// next returns the next stdout line (false at EOF).
func (p *proc) next(what string) (string, bool) {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if ok {
			p.seen = append(p.seen, l)
		}
		return l, ok
	case <-time.After(timeout):
		p.t.Fatalf("watch: no %s within %v; stdout so far:\n%s\nstderr:\n%s", what, timeout, strings.Join(p.seen, "\n"), p.stderr())
		return "", false
	}
}

// await skips stdout lines until one contains want, and returns it.
func (p *proc) await(want string) string {
	p.t.Helper()
	for {
		l, ok := p.next(fmt.Sprintf("line with %q", want))
		if !ok {
			p.t.Fatalf("watch ended before a line with %q; stdout:\n%s\nstderr:\n%s", want, strings.Join(p.seen, "\n"), p.stderr())
		}
		if strings.Contains(l, want) {
			return l
		}
	}
}

// wait waits for the exit and returns the code and the rest of stdout.
func (p *proc) wait() (int, []string) {
	p.t.Helper()
	var rest []string
	for {
		l, ok := p.next("end of output")
		if !ok {
			break
		}
		rest = append(rest, l)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("watch did not exit within %v", timeout)
	}
	return p.code, rest
}

// The watch prints the snapshot and then each update as JSON lines, acknowledging each: with
// max_pending_updates 2 the server would close a watch that did not (OVERFLOW on the third update).
func TestWatchCountJSON(t *testing.T) {
	e := start(t, "[bounds]\nmax_pending_updates = 2\n")
	pre := e.putLease("service/w", "jobs/pre")
	e.putLease("service/w", "elsewhere") // outside the prefix
	p := e.start("watch", "service/w", "jobs/", "--json", "--count", "5", "--timeout", "50s")
	l, _ := p.next("snapshot")
	var snap wire.WatchState
	if err := json.Unmarshal([]byte(l), &snap); err != nil || snap.Namespace != "service/w" || snap.KeyPrefix != "jobs/" ||
		snap.SnapshotRevision != 2 || len(snap.Entries) != 1 || snap.Entries[0].Key != "jobs/pre" || snap.Entries[0].Revision != pre.Revision {
		t.Fatalf("snapshot line %q: %v", l, err)
	}
	var msgs []wire.WatchMessage
	for i, step := range []string{"put a", "put a", "put other", "delete a", "put b"} {
		switch step {
		case "put a":
			e.putLease("service/w", "jobs/a")
		case "put b":
			e.putLease("service/w", "jobs/b")
		case "put other":
			e.putLease("service/w", "elsewhere")
			continue // not under the prefix: no update
		case "delete a":
			e.ok("delete", "service/w", "jobs/a")
		}
		l, ok := p.next(fmt.Sprintf("update after step %d (%s)", i, step))
		if !ok {
			t.Fatalf("watch ended early: %s", p.stderr())
		}
		var m wire.WatchMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("update line %q: %v", l, err)
		}
		msgs = append(msgs, m)
	}
	// One more update reaches the count.
	e.putLease("service/w", "jobs/c")
	code, rest := p.wait()
	if code != 0 || len(rest) != 1 {
		t.Fatalf("watch exit %d, trailing lines %q, stderr:\n%s", code, rest, p.stderr())
	}
	var last wire.WatchMessage
	if err := json.Unmarshal([]byte(rest[0]), &last); err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, last)
	want := []struct {
		kind wire.UpdateKind
		key  string
	}{{wire.UpdatePut, "jobs/a"}, {wire.UpdatePut, "jobs/a"}, {wire.UpdateDelete, "jobs/a"}, {wire.UpdatePut, "jobs/b"}, {wire.UpdatePut, "jobs/c"}}
	for i, m := range msgs {
		if m.Kind != want[i].kind || m.Key != want[i].key || m.WatchSequence != uint64(i+1) || m.WatchID != snap.WatchID {
			t.Fatalf("update %d = %+v, want %s %s seq %d", i+1, m, want[i].kind, want[i].key, i+1)
		}
		if i > 0 && m.Revision <= msgs[i-1].Revision {
			t.Fatalf("revisions do not increase: %+v", msgs)
		}
		if (m.Kind == wire.UpdatePut) != (m.Entry != nil) {
			t.Fatalf("update %d entry: %+v", i+1, m)
		}
	}
	if strings.Contains(p.stderr(), "watching again") {
		t.Fatalf("the watch resynced: %s", p.stderr())
	}
}

// A watch that fell behind (the process stopped while updates came) is closed by the server with
// OVERFLOW; its first ack then answers NOT_FOUND. The updates sent before the close and the CLOSED
// message itself are still printed, in order, before the watch starts again.
func TestWatchPrintsTheCloseAfterAFailedAck(t *testing.T) {
	e := start(t, "[bounds]\nmax_pending_updates = 4\n")
	p := e.start("watch", "service/w", "--json", "--timeout", "100s")
	p.await(`"snapshot_revision":0`)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		e.putLease("service/w", fmt.Sprintf("k%d", i))
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for seq := 1; seq <= 4; seq++ {
		l := p.await(`"watch_sequence"`)
		if !strings.Contains(l, fmt.Sprintf(`"watch_sequence":%d,`, seq)) {
			t.Fatalf("update %d: %s\nstderr:\n%s", seq, l, p.stderr())
		}
	}
	if l, _ := p.next("the CLOSED message"); !strings.Contains(l, `"kind":"CLOSED"`) || !strings.Contains(l, `"reason":"OVERFLOW"`) {
		t.Fatalf("after the four updates: %s\nstderr:\n%s", l, p.stderr())
	}
	p.await(`"snapshot_revision":6`) // watching again
}

// A close (stated stopping) is printed, the watch says it watches again, and once stated is back it
// prints a fresh snapshot and the updates after it.
func TestWatchResnapshotsAfterClose(t *testing.T) {
	e := start(t, "")
	p := e.start("watch", "service/w", "--count", "3", "--timeout", "120s")
	p.await("snapshot of service/w prefix \"\" at revision 0: 0 entries")
	e.putLease("service/w", "a")
	p.await("PUT     a  seq 1  revision 1")
	if code := e.s.Term(); code != 0 {
		t.Fatalf("stated exit %d", code)
	}
	p.await("CLOSED  SHUTDOWN")
	p.await("statectl: watch: the server closed the watch (SHUTDOWN); watching again")
	e.s.Start()
	p.await("snapshot of service/w prefix \"\" at revision 1: 1 entries")
	if l, _ := p.next("snapshot table header"); !strings.HasPrefix(l, "KEY") {
		t.Fatalf("snapshot table header %q", l)
	}
	if l, _ := p.next("snapshot row"); !strings.HasPrefix(l, "a ") {
		t.Fatalf("snapshot row %q", l)
	}
	e.putLease("service/w", "b")
	code, rest := p.wait()
	if code != 0 || len(rest) != 1 || !strings.HasPrefix(rest[0], "PUT     b  seq 1  revision 2") {
		t.Fatalf("watch exit %d, rest %q, stderr:\n%s", code, rest, p.stderr())
	}
}

func TestWatchTimeoutBeforeCount(t *testing.T) {
	e := start(t, "")
	r := e.fails(1, "TIMEOUT", "watch", "service/w", "--count", "1", "--timeout", "1s")
	if !strings.Contains(r.stdout, "snapshot of service/w") || !strings.Contains(r.stderr, "0 of 1 messages") {
		t.Fatalf("watch timeout: %s", r)
	}
	// Without --count the deadline just ends the watch.
	if r := e.run("watch", "service/w", "--timeout", "1s"); r.code != 0 {
		t.Fatalf("watch with only --timeout: %s", r)
	}
	e.fails(1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", "watch", "service/w", "--user", "alice", "--password", "alice-pw")
}

func TestBackupRestore(t *testing.T) {
	e := start(t, "")
	e.putLease("service/tx", "before")
	// A FILE the backup could not be renamed to is refused before anything is downloaded.
	e.fails(2, "USAGE", "backup", "")
	if r := e.fails(1, "ERROR", "backup", e.dir); !strings.Contains(r.stderr, "is a directory") {
		t.Fatalf("backup to a directory: %s", r)
	}
	if r := e.fails(1, "ERROR", "backup", filepath.Join(e.dir, "no-such-dir", "b.db")); !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("backup into a missing directory: %s", r)
	}
	epoch := infoOf(e).Epoch
	file := filepath.Join(e.dir, "backups", "store.db")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	r := e.ok("backup", file, "--json")
	var sum struct {
		File   string `json:"file"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		t.Fatalf("backup --json: %v\n%s", err, r.stdout)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	if int64(len(data)) != sum.Size || hex.EncodeToString(h[:]) != sum.SHA256 || sum.File != file {
		t.Fatalf("backup file: %d bytes sha256 %x, reported %+v", len(data), h, sum)
	}
	if left, _ := filepath.Glob(filepath.Join(e.dir, "backups", ".*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if r := e.ok("backup", file); !strings.Contains(r.stdout, "backup "+file+": ") { // overwrites atomically
		t.Fatalf("backup table output %q", r.stdout)
	}
	// A write after the backup is not in it.
	e.putLease("service/tx", "after")
	if code := e.s.Term(); code != 0 {
		t.Fatalf("stated exit %d", code)
	}
	stated, _ := binaries(t)
	out, err := exec.Command(stated, "restore", "--config", e.s.ConfigPath, file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "new epoch") {
		t.Fatalf("stated restore: %v\n%s", err, out)
	}
	e.s.Start()
	if got := e.getJSON("service/tx", "before"); string(got.Document) != leaseDoc {
		t.Fatalf("restored entry %+v", got)
	}
	e.fails(1, "STATE_STORE_ERROR_CODE_NOT_FOUND", "get", "service/tx", "after")
	if after := infoOf(e).Epoch; after == epoch {
		t.Fatalf("restore kept epoch %s", epoch)
	}
	// Only admins may take backups.
	e.fails(1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", "backup", filepath.Join(e.dir, "alice.db"), "--user", "alice", "--password", "alice-pw")
	if _, err := os.Stat(filepath.Join(e.dir, "alice.db")); !os.IsNotExist(err) {
		t.Fatalf("a refused backup left a file: %v", err)
	}
}

func infoOf(e *env) wire.Info {
	e.t.Helper()
	var info wire.Info
	r := e.ok("info", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		e.t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	return info
}

func TestAuditVerify(t *testing.T) {
	e := start(t, "")
	e.putLease("service/tx", "a")
	e.putLease("service/tx", "a")
	e.ok("delete", "service/tx", "a")
	r := e.ok("audit", "verify")
	if !strings.HasPrefix(r.stdout, "OK: 3 records, hash chain intact (head seq 3, hash ") {
		t.Fatalf("audit verify: %q", r.stdout)
	}
	r = e.ok("audit", "verify", "--json")
	var rep wire.AuditReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Records != 3 || rep.HeadSeq != 3 || rep.Problem != "" || len(rep.HeadHash) != 64 {
		t.Fatalf("audit verify --json: %v\n%s", err, r.stdout)
	}
	e.fails(2, "USAGE", "audit", "check")
	e.fails(1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", "audit", "verify", "--user", "alice", "--password", "alice-pw")

	// Someone edits the second record while stated is stopped: verify reports it and exits 1.
	if code := e.s.Term(); code != 0 {
		t.Fatalf("stated exit %d", code)
	}
	tamperAuditRecord(t, e.s.DatabasePath(), 2)
	e.s.Start()
	r = e.fails(1, "AUDIT_BROKEN", "audit", "verify")
	if !strings.HasPrefix(r.stdout, "BROKEN: record seq 2") || !strings.Contains(r.stderr, "broken at seq 2") {
		t.Fatalf("audit verify of a tampered chain: %s", r)
	}
	// With --json the report is the one document on stdout: no error document follows it.
	r = e.fails(1, "AUDIT_BROKEN", "audit", "verify", "--json")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&rep); err != nil || dec.More() || rep.BrokenSeq != 2 || rep.Problem == "" {
		t.Fatalf("audit verify --json of a tampered chain: %v: %s", err, r)
	}
}

// tamperAuditRecord rewrites the principal of audit record seq in the store file (the store's audit
// bucket: big-endian sequence keys, JSON records), keeping the record's stored hash.
func tamperAuditRecord(t *testing.T, path string, seq uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("audit"))
		if b == nil {
			return fmt.Errorf("no audit bucket")
		}
		key := binary.BigEndian.AppendUint64(nil, seq)
		rec := b.Get(key)
		edited := bytes.Replace(rec, []byte(`"principal":"coordinator"`), []byte(`"principal":"mallory"`), 1)
		if bytes.Equal(rec, edited) {
			return fmt.Errorf("audit record %d has no coordinator principal: %s", seq, rec)
		}
		return b.Put(key, edited)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPermissionsAndConnection(t *testing.T) {
	e := start(t, "")
	alice := []string{"--user", "alice", "--password", "alice-pw"}
	e.failsIn(leaseDoc, 1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", append([]string{"put", "service/x", "k", leaseSchema}, alice...)...)
	// Her own namespace is hers.
	if r := e.runIn(`{"kind":"display"}`, append([]string{"put", "user/alice", "prefs", prefSchema}, alice...)...); r.code != 0 {
		t.Fatalf("alice's own put: %s", r)
	}
	e.fails(1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", append([]string{"get", "service/x", "k"}, alice...)...)
	// Wrong credentials and an unreachable server are connection errors.
	e.fails(3, "CONNECTION", "info", "--user", "alice", "--password", "wrong")
	e.fails(3, "CONNECTION", "--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", e2e.FreePort(t)), "info")
}

func TestGlobalFlagsAndEnvironment(t *testing.T) {
	e := start(t, "")
	// The environment says alice; flags before and after the command say coordinator, and win.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := e.command(ctx, "--user", "coordinator", "put", "service/x", "k", leaseSchema, "--password", "coord-pw", "--json")
	cmd.Env = append(cmd.Env, "STATECTL_USER=alice", "STATECTL_PASSWORD=alice-pw")
	cmd.Stdin = strings.NewReader(leaseDoc)
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), `"owner":"coordinator"`) {
		t.Fatalf("flags over the environment: %v\n%s", err, out)
	}
	// STATECTL_JSON and the environment alone.
	cmd = e.command(ctx, "get", "service/x", "k")
	cmd.Env = append(cmd.Env, "STATECTL_JSON=true")
	if out, err := cmd.Output(); err != nil || !strings.HasPrefix(string(out), `{"namespace":"service/x"`) {
		t.Fatalf("STATECTL_JSON: %v\n%s", err, out)
	}
	// "--" ends the flags: "--json" is then a key (a valid one).
	if r := e.fails(1, "STATE_STORE_ERROR_CODE_NOT_FOUND", "get", "service/x", "--", "--json"); !strings.Contains(r.stderr, "--json not found") {
		t.Fatalf("get -- --json: %s", r)
	}
}

func TestUsage(t *testing.T) {
	e := start(t, "")
	for _, args := range [][]string{
		{},
		{"frob"},
		{"get", "service/x"},
		{"get", "service/x", "k", "extra"},
		{"put", "service/x", "k"},
		{"put", "service/x", "k", leaseSchema, "--expect-revision", "abc"},
		{"put", "service/x", "k", leaseSchema, "--ttl", "-5s"},
		{"ls"},
		{"info", "--bogus"},
		{"--timeout", "-1s", "info"},
		{"--user", "Not.A.Principal", "info"},
		{"watch", "service/x", "--count", "-1"},
		{"backup"},
		{"bench", "--watches", "0"},
		{"bench", "--admins", "Bad Id:pw"},
		{"help", "frob"},
	} {
		r := e.run(args...)
		if r.code != 2 || !strings.Contains(r.stderr, "statectl: USAGE: ") {
			t.Errorf("statectl %q: want exit 2 and a USAGE error, got %s", args, r)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "Commands:"},
		{[]string{"--help"}, "Global flags"},
		{[]string{"help", "put"}, "--expect-revision N"},
		{[]string{"put", "--help"}, "--guard KEY=REV"},
		{[]string{"watch", "-h"}, "--count N"},
		{[]string{"bench", "--help"}, "--metrics-url URL"},
	} {
		r := e.run(c.args...)
		if r.code != 0 || !strings.Contains(r.stdout, c.want) {
			t.Errorf("statectl %q: want exit 0 and %q, got %s", c.args, c.want, r)
		}
	}
}

func TestBench(t *testing.T) {
	e := start(t, "")
	r := e.ok("bench", "--owners", "3", "--rounds", "2", "--writers", "3", "--connections", "2", "--watches", "4",
		"--entries", "5", "--idle", "0s", "--metrics-url", e.s.HTTP()+"/metrics")
	for _, name := range []string{"serial-cas-p50-us", "serial-cas-p95-us", "serial-cas-max-us", "serial-commit-mean-us", "request-rtt-p50-us", "writers-3-ops/s",
		"writers-3-p50-us", "writers-3-p95-us", "writers-3-ops/commit", "writers-3-commit-busy-pct", "fanout-4-p50-us", "fanout-4-p95-us", "rss-idle-MiB", "rss-idle-3-conns-MiB"} {
		if !strings.Contains(r.stdout, name+" ") {
			t.Errorf("bench output lacks %s:\n%s", name, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "not measured") {
		t.Errorf("the idle memory or the commit latency was not measured:\n%s", r.stdout)
	}
	// It says how its figures were taken: the percentiles, and the idle wait before the memory.
	for _, want := range []string{"percentiles: nearest-rank", "no warm-up left out", "then 0s idle with one connection"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench output does not say %q:\n%s", want, r.stdout)
		}
	}
	// It cleaned up after itself.
	if r := e.ok("ls", "service/bench", "--json"); !strings.Contains(r.stdout, `"entries":[]`) {
		t.Fatalf("bench left entries: %s", r.stdout)
	}
	// --json is the report; --keep keeps the entries.
	r = e.ok("bench", "--json", "--keep", "--owners", "2", "--rounds", "1", "--writers", "2", "--connections", "2", "--watches", "2",
		"--entries", "3", "--idle", "0s", "--metrics-url", "")
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.SerialCAS.Ops != 2 || rep.Writers.Ops != 2 ||
		rep.Fanout.Watches != 2 || rep.Idle.Measured || rep.SerialCAS.CommitMeasured || rep.Writers.CommitMeasured || rep.DocumentBytes != bench.DocumentBytes {
		t.Fatalf("bench --json: %v\n%s", err, r.stdout)
	}
	var list wire.Result
	if err := json.Unmarshal([]byte(e.ok("ls", "service/bench", "--json").stdout), &list); err != nil || len(list.Entries) != 2+2+1+3 {
		t.Fatalf("bench --keep left %d entries: %v", len(list.Entries), err)
	}
	// 300 watches cannot fit one principal's 256: it says so before writing anything.
	r = e.fails(1, "ERROR", "bench", "--watches", "300", "--connections", "2", "--writers", "2", "--metrics-url", "")
	if !strings.Contains(r.stderr, "max_watches_per_principal is 256") {
		t.Fatalf("bench with too many watches: %s", r)
	}
}
