package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// crashChildEnv carries the database path to the child process of TestCrashKillMidStream.
const crashChildEnv = "STORE_CRASH_CHILD"

// crashLeasesEnv, when set, is the audit retention the crash child opens the store with; it then also
// writes short leases in crashLeaseNamespace, unreported (TestCrashKillWithLeasesAndAuditPruning).
const crashLeasesEnv = "STORE_CRASH_LEASES"

// crashSettingsEnv, when set, is the path of a TOML configuration file whose settings-backed
// namespaces the crash child opens the store with (TestCrashKillMidSettingsWrite).
const crashSettingsEnv = "STORE_CRASH_SETTINGS"

// crashLeaseNamespace holds the crash child's short leases: they expire while it runs and at restarts.
const crashLeaseNamespace = "service/crash-leases"

// The crash child writes these namespaces and keys; it is their only writer.
var (
	crashNamespaces = []string{"service/crash-a", "service/crash-b"}
	crashKeys       = []string{"k0", "k1", "k2", "k3", "k4", "k5"}
)

// crashDoc is the lease document the child writes at revision rev: the holder names the revision, so
// the parent can tell that a document and its revision belong together, and the purpose varies in
// length, so the byte counters move.
func crashDoc(rev uint64) json.RawMessage {
	purpose := strings.Repeat("renew ", int(rev%23))
	return json.RawMessage(fmt.Sprintf(`{"holder":"r%d","claimed_at_ms":%d,"purpose":%q}`, rev, rev, purpose))
}

// TestCrashChild is the child process of TestCrashKillMidStream, not a test of its own: without
// STORE_CRASH_CHILD it returns at once. With it, it opens the store at that path and writes until it
// is killed, printing "try <ns> <key> <op>" before each operation and "ack <ns> <key> <revision> <op>"
// only after the operation returned nil.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		return
	}
	os.Exit(crashChild(path))
}

func crashChild(path string) int {
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...) + "\n"
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = os.Stdout.WriteString(line) // one write per line: the parent never sees half a line
	}
	var err error
	opts := DefaultOptions()
	leases := os.Getenv(crashLeasesEnv)
	if leases != "" {
		n, err := strconv.Atoi(leases)
		if err != nil {
			say("fatal %s: %v", crashLeasesEnv, err)
			return 2
		}
		opts.AuditRetention = n
	}
	if cfg := os.Getenv(crashSettingsEnv); cfg != "" {
		if opts.Settings, err = TOMLSettingsNamespaces(cfg); err != nil {
			say("fatal settings: %v", err)
			return 2
		}
	}
	s, err := Open(path, opts)
	if err != nil {
		say("fatal open: %v", err)
		return 2
	}
	if r := s.Unavailable(); r != nil {
		say("fatal unavailable: %v", r)
		return 2
	}
	// The parent kills the child; this bound only stops an orphan whose parent died.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	failed := make(chan struct{}, len(crashNamespaces)+1)
	for i, ns := range crashNamespaces {
		wg.Go(func() {
			if err := crashWriter(ctx, s, ns, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i))), say); err != nil {
				say("fatal %s: %v", ns, err)
				failed <- struct{}{}
				cancel()
			}
		})
	}
	if leases != "" {
		wg.Go(func() {
			if err := crashLeaseWriter(ctx, s); err != nil {
				say("fatal %s: %v", crashLeaseNamespace, err)
				failed <- struct{}{}
				cancel()
			}
		})
	}
	wg.Wait()
	s.Close()
	if len(failed) > 0 {
		return 3
	}
	return 4 // only an orphan gets here
}

// crashWriter is the only writer of ns: it learns the namespace from the store, then puts (create-only
// or with the current revision as expected_revision) and deletes (with expected_revision) until ctx ends.
func crashWriter(ctx context.Context, s *Store, ns string, rng *rand.Rand, say func(string, ...any)) error {
	l, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
	if err != nil {
		return err
	}
	rev := l.Revision
	keys := map[string]uint64{}
	for _, e := range l.Entries {
		keys[e.Key] = e.Revision
	}
	for ctx.Err() == nil {
		key := crashKeys[rng.IntN(len(crashKeys))]
		cur, exists := keys[key]
		if exists && rng.IntN(4) == 0 {
			say("try %s %s delete", ns, key)
			got, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: ns, Key: key, ExpectedRevision: i64(int64(cur))})
			if err != nil {
				return fmt.Errorf("delete %s at %d: %w", key, cur, err)
			}
			rev = got
			delete(keys, key)
			say("ack %s %s %d delete", ns, key, got)
			continue
		}
		say("try %s %s put", ns, key)
		e, err := s.Put(ctx, admin, wire.PutRequest{Namespace: ns, Key: key, Schema: "keeppeek.lease.v1",
			Document: crashDoc(rev + 1), ExpectedRevision: i64(int64(cur))}) // cur is 0 when missing: create only
		if err != nil {
			return fmt.Errorf("put %s expecting %d: %w", key, cur, err)
		}
		rev = e.Revision
		keys[key] = e.Revision
		say("ack %s %s %d put", ns, key, e.Revision)
	}
	return nil
}

// crashLeaseWriter puts short leases (1 to 3 s) in crashLeaseNamespace and deletes some, until ctx
// ends; a delete racing the lease's expiry finds nothing, which is no failure.
func crashLeaseWriter(ctx context.Context, s *Store) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for ctx.Err() == nil {
		key := fmt.Sprintf("l%02d", rng.IntN(16))
		if rng.IntN(5) == 0 {
			_, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: crashLeaseNamespace, Key: key})
			if err != nil && !errors.Is(err, wire.ErrNotFound) && ctx.Err() == nil {
				return fmt.Errorf("delete %s: %w", key, err)
			}
			continue
		}
		req := ttlPut(crashLeaseNamespace, key, 1000+int64(rng.IntN(2000)))
		req.Document = crashDoc(uint64(rng.IntN(1000)))
		if _, err := s.Put(ctx, admin, req); err != nil && ctx.Err() == nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
	}
	return nil
}

// crashModel is what the parent knows was committed in one namespace.
type crashModel struct {
	revision uint64 // the namespace revision
	unacked  int    // in-flight operations found committed after a kill
	// unaudited counts the committed operations with no audit record: in a settings-backed namespace,
	// an unacknowledged write whose file was renamed into place just before the kill, the database
	// commit (and its audit record) not made (a gap the store reports as a warning at open).
	unaudited uint64
	keys      map[string]uint64 // live key -> revision
	inflight  *crashOp          // the operation tried after the last ack, if any
}

type crashOp struct{ key, op string }

func TestCrashKillMidStream(t *testing.T) {
	const cycles = 24
	path := filepath.Join(t.TempDir(), "state-store.db")
	models := map[string]*crashModel{}
	for _, ns := range crashNamespaces {
		models[ns] = &crashModel{keys: map[string]uint64{}}
	}
	var totalAcks int
	for cycle := range cycles {
		target := 20 + rand.IntN(181)
		acks := crashCycle(t, cycle, path, target, models)
		totalAcks += acks
		if t.Failed() {
			return
		}
		crashCheck(t, cycle, path, models, DefaultOptions())
		if t.Failed() {
			return
		}
	}
	a, b := models[crashNamespaces[0]], models[crashNamespaces[1]]
	t.Logf("%d cycles, %d acknowledged operations, revisions %d and %d, %d operations committed without their ack",
		cycles, totalAcks, a.revision, b.revision, a.unacked+b.unacked)
}

// crashCycle runs one child, kills it after target acks and applies every ack it printed to models.
// It returns the number of acks.
func crashCycle(t *testing.T, cycle int, path string, target int, models map[string]*crashModel, env ...string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), crashChildEnv+"="+path), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	acks, killed := 0, false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for lines != nil { // until EOF: after the kill, every line the child printed is read
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			if err := crashApply(line, models); err != nil {
				t.Errorf("cycle %d: %v", cycle, err)
				kill()
			}
			if strings.HasPrefix(line, "ack ") {
				acks++
				if acks == target {
					kill()
				}
			}
		case <-deadline.C:
			t.Errorf("cycle %d: only %d of %d acks within the deadline", cycle, acks, target)
			kill()
		}
	}
	// EOF without the kill means the child stopped on its own (it failed to open, or an op failed).
	kill()
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("cycle %d: the child ended by itself (%v) after %d acks; stderr:\n%s", cycle, err, acks, lastLines(stderr.String(), 20))
	}
	if acks < target && !t.Failed() {
		t.Errorf("cycle %d: %d acks, want at least %d", cycle, acks, target)
	}
	return acks
}

// crashApply applies one child line to models, checking that acks continue the namespace revision by
// exactly one (the child is the only writer and does one operation at a time per namespace).
func crashApply(line string, models map[string]*crashModel) error {
	f := strings.Fields(line)
	switch {
	case len(f) == 4 && f[0] == "try":
		m := models[f[1]]
		if m == nil {
			return fmt.Errorf("line %q: unknown namespace", line)
		}
		if m.inflight != nil {
			return fmt.Errorf("line %q: %s was already in flight", line, m.inflight.key)
		}
		m.inflight = &crashOp{key: f[2], op: f[3]}
	case len(f) == 5 && f[0] == "ack":
		m := models[f[1]]
		if m == nil {
			return fmt.Errorf("line %q: unknown namespace", line)
		}
		rev, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			return fmt.Errorf("line %q: %v", line, err)
		}
		if m.inflight == nil || m.inflight.key != f[2] || m.inflight.op != f[4] {
			return fmt.Errorf("line %q acknowledges an operation that was not tried (in flight: %+v)", line, m.inflight)
		}
		if rev != m.revision+1 {
			return fmt.Errorf("line %q: revision %d does not continue the namespace revision %d", line, rev, m.revision)
		}
		m.revision = rev
		switch f[4] {
		case "put":
			m.keys[f[2]] = rev
		case "delete":
			delete(m.keys, f[2])
		default:
			return fmt.Errorf("line %q: unknown op", line)
		}
		m.inflight = nil
	default:
		return fmt.Errorf("child said %q", line)
	}
	return nil
}

// crashCheck reopens the store after a kill and checks it against models: every acknowledged
// operation is there, and the one operation per namespace that was in flight at the kill either
// committed whole or not at all. models then follow the store.
func crashCheck(t *testing.T, cycle int, path string, models map[string]*crashModel, opts Options) {
	t.Helper()
	s := openAt(t, path, opts)
	defer s.Close()
	ctx := ctxT(t)
	var audited uint64
	var settingsCommits []*crashModel // settings-backed namespaces whose in-flight write committed
	stats := map[string]NamespaceStats{}
	for _, st := range s.Stats().PerNamespace {
		stats[st.Namespace] = st
	}
	for _, ns := range crashNamespaces {
		m := models[ns]
		l, err := s.List(ctx, admin, wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
		if err != nil {
			t.Fatalf("cycle %d: List %s: %v", cycle, ns, err)
		}
		switch {
		case l.Revision == m.revision:
			// The in-flight operation, if any, did not commit.
		case l.Revision == m.revision+1 && m.inflight != nil:
			// It committed before the kill, without its ack.
			m.revision++
			m.unacked++
			if _, ok := opts.Settings[ns]; ok {
				settingsCommits = append(settingsCommits, m)
			}
			if m.inflight.op == "put" {
				m.keys[m.inflight.key] = m.revision
			} else {
				delete(m.keys, m.inflight.key)
			}
		default:
			t.Fatalf("cycle %d: %s is at revision %d after the crash; acknowledged %d, in flight %+v",
				cycle, ns, l.Revision, m.revision, m.inflight)
		}
		m.inflight = nil
		got := map[string]uint64{}
		var nbytes int64
		for _, e := range l.Entries {
			got[e.Key] = e.Revision
			nbytes += int64(len(e.Document))
			if want := crashDoc(e.Revision); string(e.Document) != string(want) {
				t.Errorf("cycle %d: %s:%s at revision %d holds %s, want %s", cycle, ns, e.Key, e.Revision, e.Document, want)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(m.keys) {
			t.Errorf("cycle %d: %s holds %v, the acknowledged operations give %v", cycle, ns, got, m.keys)
		}
		if st := stats[ns]; st.Revision != m.revision || st.Entries != len(m.keys) || st.Bytes != nbytes {
			t.Errorf("cycle %d: %s stats %+v, want revision %d, %d entries, %d bytes", cycle, ns, st, m.revision, len(m.keys), nbytes)
		}
		audited += m.revision - m.unaudited
	}
	audited += stats[crashLeaseNamespace].Revision // every put, delete and expiry of a lease (none in TestCrashKillMidStream)
	rep, err := s.VerifyAudit()
	if err != nil || !rep.OK() {
		t.Fatalf("cycle %d: audit %v: %v", cycle, rep, err)
	}
	if len(settingsCommits) == 1 && rep.HeadSeq+1 == audited {
		settingsCommits[0].unaudited++ // see crashModel.unaudited
		audited--
	}
	if rep.HeadSeq != audited {
		t.Errorf("cycle %d: audit head seq %d, want one record per committed operation (%d)", cycle, rep.HeadSeq, audited)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("cycle %d: Close: %v", cycle, err)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
