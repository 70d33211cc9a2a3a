package acceptance_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/syncbuf"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// process is one example worker process.
type process struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

// startTranscoderProcess runs the examples/transcoder command as principal transcoder-a. The cleanup
// stops it with SIGTERM (SIGKILL after 20 s) and waits for it.
func startTranscoderProcess(tb testing.TB, e *env, workerID, service string, ttl time.Duration) *process {
	tb.Helper()
	return startExampleProcess(tb, e, "transcoder", workerID, "--service", service, "--lease-ttl", ttl.String())
}

// startExampleProcess runs the examples/<name> command as principal transcoder-a, worker id workerID,
// with args. The cleanup stops it with SIGTERM (SIGKILL after 20 s) and waits for it.
func startExampleProcess(tb testing.TB, e *env, name, workerID string, args ...string) *process {
	tb.Helper()
	bin := e2e.Build(tb, "./examples/"+name, name)
	p := &process{out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"--nats-url", e.stated.URL(), "--user", "transcoder-a", "--password", password("transcoder-a"),
		"--worker-id", workerID}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s %s: %v", name, workerID, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			tb.Errorf("%s %s did not stop within 20 s after SIGTERM\n%s", name, workerID, p.out.String())
		}
	})
	return p
}

// failoverSIGKILL is the failover with real processes: two examples/transcoder commands, the holder
// killed with SIGKILL (no graceful stop, no release: the kernel closes its connection). Everything is
// observed from outside, as an operator would: an admin watch of the service namespace and of the
// workers' heartbeat entries, and the media server's own record.
func failoverSIGKILL(t *testing.T, e *env) {
	const source, variant, ttl = "fk-door", "fk-720p", 2 * time.Second
	f := startFailover(t, e, "fk", source, variant, ttl)
	ns, key, leaseKey, statusKey, state, workers, procs, logs, activeBy := f.ns, f.key, f.leaseKey, f.statusKey, f.state, f.workers, f.procs, f.logs, f.activeBy
	intent, holder, standby, oldPublication := f.intent, f.holder, f.standby, f.oldPublication
	var st reconciler.ObservedStatus
	var err error

	// Before the kill exactly one worker acted: one holder of the lease, every status its own, one
	// start_publication on the media server, one live publication.
	killMark := state.mark()
	for _, it := range state.all()[:killMark] {
		m := it.V
		if m.Key == leaseKey && (m.Kind != wire.UpdatePut || leaseHolder(m.Entry) != holder) {
			t.Fatalf("lease before the kill: %+v, want only %s's claim and renewals%s", m, holder, logs())
		}
		if m.Key == statusKey && m.Kind == wire.UpdatePut && !bytes.Contains(m.Entry.Document, []byte(`"holder":"`+holder+`"`)) {
			t.Fatalf("status before the kill written by another worker: %s%s", m.Entry.Document, logs())
		}
	}
	commandsAtKill := len(e.sim.Commands())
	if starts := commands(t, e.sim, capabilities.CommandStartPublication, "", variant); len(starts) != 1 || starts[0].Reply.PublicationID != oldPublication {
		t.Fatalf("start_publication of %s before the kill: %+v, want one, of %s", variant, starts, oldPublication)
	}
	if pubs := publications(e.sim, source, variant); len(pubs) != 1 || pubs[0].ID != oldPublication {
		t.Fatalf("publications before the kill: %+v", pubs)
	}

	// SIGKILL the holder.
	killedAt := time.Now()
	if err := procs[holder].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-procs[holder].done

	// The lease goes by one EXPIRE (never a DELETE: nobody released it), at or after the deadline of
	// the holder's last renewal, and only then does the standby claim it.
	claim, claimAt := state.waitFor(t, killMark, "the standby's claim", func(m wire.WatchMessage) bool {
		return m.Kind == wire.UpdatePut && m.Key == leaseKey && leaseHolder(m.Entry) == standby
	})
	var last *wire.Entry
	expires := 0
	for _, it := range state.all()[:claimAt] {
		switch m := it.V; {
		case m.Key != leaseKey:
		case m.Kind == wire.UpdatePut && expires == 0:
			last = m.Entry
		case m.Kind == wire.UpdateExpire && expires == 0:
			expires++
			if deadline := time.UnixMilli(last.ExpiresAtMs); it.At.Before(deadline) {
				t.Fatalf("lease EXPIRE at %v, before the deadline %v", it.At, deadline)
			}
		default:
			t.Fatalf("lease before the standby's claim: %+v, want renewals then one EXPIRE%s", m, logs())
		}
	}
	if expires != 1 {
		t.Fatalf("the killed holder's lease did not EXPIRE before the standby's claim%s", logs())
	}
	if after := claim.At.Sub(killedAt); after > ttl+2*time.Second { // as in scenario 3
		t.Errorf("the standby's claim reached a watcher %v after the kill, want within TTL + 2 s", after)
	}

	// The publication continues under the standby: its active status, a new publication, the only
	// one, published by transcoder-a; the media server heard one start since the kill.
	now, _ := state.waitFor(t, claimAt, "the standby's active status", activeBy(standby))
	_ = json.Unmarshal(now.V.Entry.Document, &st)
	if st.PublicationID == "" || st.PublicationID == oldPublication {
		t.Fatalf("the standby's status %+v, want a new publication (old %s)", st, oldPublication)
	}
	if pubs := publications(e.sim, source, variant); len(pubs) != 1 || pubs[0].ID != st.PublicationID || pubs[0].Principal != "transcoder-a" {
		t.Fatalf("publications after the failover: %+v, want only %s", pubs, st.PublicationID)
	}
	var late []string
	for _, c := range e.sim.Commands()[commandsAtKill:] {
		if c.Principal == "transcoder-a" {
			late = append(late, string(c.Command)+" "+string(c.Body))
		}
	}
	if len(late) != 1 {
		t.Fatalf("media commands since the kill: %q, want the standby's one start_publication", late)
	}

	// The killed worker's heartbeat entry ends in one EXPIRE; the standby's lists the lease now.
	killedKey := wire.WorkerKey("transcoder-a", holder)
	workers.waitFor(t, 0, "the killed worker's heartbeat entry expiring", func(m wire.WatchMessage) bool {
		return m.Key == killedKey && m.Kind != wire.UpdatePut
	})
	workers.waitFor(t, 0, "the standby's heartbeat listing the lease", func(m wire.WatchMessage) bool {
		return m.Kind == wire.UpdatePut && m.Key == wire.WorkerKey("transcoder-a", standby) && slices.Contains(workerStatus(t, m.Entry).Leases, leaseKey)
	})
	ends := 0
	for _, it := range workers.all() {
		if m := it.V; m.Key == killedKey && m.Kind != wire.UpdatePut {
			if m.Kind != wire.UpdateExpire {
				t.Fatalf("the killed worker's heartbeat entry: %+v, want EXPIRE", m)
			}
			ends++
		}
	}
	if ends != 1 {
		t.Fatalf("the killed worker's heartbeat entry ended %d times, want one EXPIRE", ends)
	}

	// The killed holder's fencing token no longer writes; the intent is as the coordinator wrote it.
	ctx := bounded(t) // for this step: the waits before it have bounds of their own
	_, err = e.admin.Put(ctx, wire.PutRequest{Namespace: ns, Key: statusKey, Schema: statusSchema,
		Document: reconciler.ObservedStatus{SubjectKey: key, State: reconciler.StateActive, ObservedAtMs: time.Now().UnixMilli(),
			Holder: holder, PublicationID: oldPublication}.Document(),
		Guard: &wire.Guard{Key: leaseKey, Revision: int64(last.Revision)}})
	if !errors.Is(err, wire.ErrGuardFailed) {
		t.Fatalf("the killed holder's late guarded write: %v, want GUARD_FAILED", err)
	}
	if got, err := e.admin.Get(ctx, ns, key); err != nil || got.Revision != intent.Revision || !bytes.Equal(got.Document, intent.Document) {
		t.Fatalf("intent after the failover: %v %v, want it as written at %d", got, err, intent.Revision)
	}
}

// failoverSIGSTOP: the holder does not die, it stalls (SIGSTOP: a long GC pause, a frozen VM) for
// longer than its lease, and the standby takes over. When the old holder wakes (SIGCONT) it must not
// act on what it believed before the stall: no media command that changes anything, no write that
// commits, and it must come to stand by, while the standby's publication stays the only one.
func failoverSIGSTOP(t *testing.T, e *env) {
	const source, variant, ttl = "fs-door", "fs-720p", 2 * time.Second
	f := startFailover(t, e, "fs", source, variant, ttl)
	ns, leaseKey, statusKey, state, workers, procs, logs, activeBy := f.ns, f.leaseKey, f.statusKey, f.state, f.workers, f.procs, f.logs, f.activeBy
	holder, standby, oldPublication := f.holder, f.standby, f.oldPublication
	var st reconciler.ObservedStatus
	stalled := procs[holder].cmd.Process
	if err := stalled.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = stalled.Signal(syscall.SIGCONT) // so that the cleanup's SIGTERM can stop it
		}
	})
	stopMark := state.mark()
	_, claimAt := state.waitFor(t, stopMark, "the standby's claim", func(m wire.WatchMessage) bool {
		return m.Kind == wire.UpdatePut && m.Key == leaseKey && leaseHolder(m.Entry) == standby
	})
	now, _ := state.waitFor(t, claimAt, "the standby's active status", activeBy(standby))
	_ = json.Unmarshal(now.V.Entry.Document, &st)
	newPublication := st.PublicationID
	if pubs := publications(e.sim, source, variant); len(pubs) != 1 || pubs[0].ID != newPublication {
		t.Fatalf("publications after the takeover: %+v, want %s", pubs, newPublication)
	}

	// Wake the old holder, and wait until it has seen its loss: its heartbeat no longer lists the
	// lease (it listed it before the stall).
	wakeMark, wakeCommands, wakeWorkers := state.mark(), len(e.sim.Commands()), workers.mark()
	if err := stalled.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	oldKey := wire.WorkerKey("transcoder-a", holder)
	workers.waitFor(t, wakeWorkers, "the woken holder's heartbeat without the lease", func(m wire.WatchMessage) bool {
		return m.Kind == wire.UpdatePut && m.Key == oldKey && !slices.Contains(workerStatus(t, m.Entry).Leases, leaseKey)
	})
	// And a barrier after whatever it sent on waking: a write of ours to the namespace, then the
	// standby's next renewal (a renewal every TTL/3 proves the standby still holds).
	ctx := bounded(t) // for the steps from here: the waits before have bounds of their own
	bar, err := e.admin.Put(ctx, wire.PutRequest{Namespace: ns, Key: "barrier", Schema: leaseSchema,
		Document: json.RawMessage(`{"holder":"barrier","claimed_at_ms":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, barAt := state.waitFor(t, wakeMark, "the barrier", func(m wire.WatchMessage) bool { return m.Key == "barrier" && m.Revision == bar.Revision })
	state.waitFor(t, barAt, "a renewal by the standby after the barrier", func(m wire.WatchMessage) bool {
		return m.Kind == wire.UpdatePut && m.Key == leaseKey && leaseHolder(m.Entry) == standby
	})

	// Since it woke: nothing of the old holder committed (its guarded status writes are refused, its
	// release of a lease that is no longer its own deletes nothing), and the lease stayed the standby's.
	for _, it := range state.all()[wakeMark:] {
		m := it.V
		switch {
		case m.Key == leaseKey && (m.Kind != wire.UpdatePut || leaseHolder(m.Entry) != standby):
			t.Fatalf("lease after the old holder woke: %+v%s", m, logs())
		case m.Key == statusKey && (m.Kind != wire.UpdatePut || !bytes.Contains(m.Entry.Document, []byte(`"holder":"`+standby+`"`))):
			t.Fatalf("status after the old holder woke: %+v%s", m, logs())
		}
	}
	// It sent no media command that did anything: at most a stop of its own old publication, which
	// the media server no longer has.
	for _, c := range e.sim.Commands()[wakeCommands:] {
		if c.Principal != "transcoder-a" {
			continue
		}
		if c.Command != capabilities.CommandStopPublication || c.Reply.OK || !bytes.Contains(c.Body, []byte(oldPublication)) {
			t.Fatalf("media command since the old holder woke: %s %s -> %+v%s", c.Command, c.Body, c.Reply, logs())
		}
	}
	if pubs := publications(e.sim, source, variant); len(pubs) != 1 || pubs[0].ID != newPublication {
		t.Fatalf("publications after the old holder woke: %+v, want only the standby's %s%s", pubs, newPublication, logs())
	}
	if s, _ := status(t, e.admin, ns, statusKey); s.Holder != standby || s.State != reconciler.StateActive || s.PublicationID != newPublication {
		t.Fatalf("status after the old holder woke: %+v, want the standby's", s)
	}
}

// processFailover is what both process failovers set up: two examples/transcoder commands, <p>-1 and <p>-2
// of service <p>-tx, competing for one publish intent, followed from outside through admin watches of
// the service namespace (state) and of their heartbeat entries (workers), until one of them (holder)
// publishes while the other (standby) waits.
type processFailover struct {
	ns, key, leaseKey, statusKey    string
	state, workers                  *recorder[wire.WatchMessage]
	procs                           map[string]*process
	intent                          wire.Entry
	holder, standby, oldPublication string
}

// startFailover starts both transcoders, waits for their first heartbeats (both can then compete),
// writes the intent and waits for the first active status.
func startFailover(t *testing.T, e *env, p, source, variant string, ttl time.Duration) *processFailover {
	t.Helper()
	service := p + "-tx"
	f := &processFailover{ns: "service/" + service, key: intentKey(source, variant), procs: map[string]*process{}}
	f.leaseKey = transcode.LeaseKey(reconciler.MediaIntent{SourceID: source, MediaKind: coordinator.MediaKindVideo, VariantID: variant})
	f.statusKey = statusKeyOf(f.key)
	f.state = followAcked(t, e.admin, p+"-state", f.ns, "")
	f.workers = followAcked(t, e.admin, p+"-workers", "system", "workers/transcoder-a/"+p+"-")
	ids := []string{p + "-1", p + "-2"}
	for _, id := range ids {
		f.procs[id] = startTranscoderProcess(t, e, id, service, ttl)
	}
	for _, id := range ids {
		f.workers.waitFor(t, 0, id+"'s first heartbeat", func(m wire.WatchMessage) bool {
			return m.Kind == wire.UpdatePut && m.Key == wire.WorkerKey("transcoder-a", id)
		})
	}
	var err error
	if f.intent, err = e.coord.PutIntent(bounded(t), f.ns, f.key, publishIntent(source, variant, coordinator.RecordingDisabled)); err != nil {
		t.Fatal(err)
	}
	active, _ := f.state.waitFor(t, 0, "a transcoder's active status", f.activeBy(""))
	var st reconciler.ObservedStatus
	_ = json.Unmarshal(active.V.Entry.Document, &st)
	f.holder, f.oldPublication = st.Holder, st.PublicationID
	if _, ok := f.procs[f.holder]; !ok {
		t.Fatalf("active status held by %q", f.holder)
	}
	f.standby = ids[0]
	if f.holder == f.standby {
		f.standby = ids[1]
	}
	return f
}

// activeBy matches an active status of the intent written by holder (any holder when empty).
func (f *processFailover) activeBy(holder string) func(wire.WatchMessage) bool {
	return func(m wire.WatchMessage) bool {
		if m.Kind != wire.UpdatePut || m.Key != f.statusKey {
			return false
		}
		var st reconciler.ObservedStatus
		return json.Unmarshal(m.Entry.Document, &st) == nil && st.State == reconciler.StateActive && (holder == "" || st.Holder == holder)
	}
}

// logs is both transcoders' output, for a failure message.
func (f *processFailover) logs() string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(f.procs)) {
		b.WriteString("\n--- " + id + ":\n" + f.procs[id].out.String())
	}
	return b.String()
}
