package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// This file is a model-based test of Cache, and of Watch used as its documentation says: random,
// seeded sequences of writes by several clients (blind puts, compare-and-set, create-only puts,
// deletes, leases that expire) in several namespaces and key prefixes, interleaved with disruptions
// (the caches' NATS connection cut and mended, or dropped and reconnected at once; watches dropped by
// the server: closed, overflowed by a slow handler, timed out on a withheld ack; the state server
// stopped, or crashed, and started again on the same database; a restore, which starts a new epoch,
// with the server crashed first or the caches cut off across it). TestCacheModel runs it against an
// in-process server (a crash closes the server's NATS connection first: NATS stays up, and no
// SHUTDOWN close or reply in flight gets out); TestE2ECacheModel against the stated binary (SIGTERM
// and SIGKILL take its embedded NATS server down with it). Every write is logged with what the
// client said of it (committed at revision R, refused, or unknown), and every handler call of every
// cache, and every snapshot and update a raw Watch follower applied, is recorded; afterwards the
// recording is checked against the log:
//
//   - every entry a cache showed is one a put wrote (never a refused one), at the revision its reply
//     gave, with the entry its reply gave;
//   - per key, the states a cache's handlers saw never go back (an older state after a newer one)
//     and no update's revision comes twice;
//   - each incarnation (a snapshot and the updates applied after it) is gap-free: every write the
//     log knows committed under the prefix between its snapshot and its last update came as an
//     update, of the right kind, and its snapshot holds every key at least at its last known write;
//   - once the writes stop, each cache equals the store's list, and so does the replay of its
//     handler calls;
//   - WaitForRevisionIn returns nil for every committed revision of the epoch the cache follows, and
//     ErrEpochChanged for a revision of an epoch the restore voided (also for waits begun while the
//     server is away: nil across a restart, ErrEpochChanged across a restore);
//   - every disruption that ended a cache's watch is followed by an OnResync, Resyncs counts the
//     snapshots after the first, a restore is seen as a new Epoch with the revision at 0 while
//     OnResync runs, and handlers see the change in the cache before its revision counts as reached.
//
// The seed is logged; CACHE_MODEL_SEED=N runs a given one again (the interleaving of goroutines
// still varies from run to run).

// modelBounds are small enough that a slow handler overflows a watch at once and a withheld ack
// times out soon.
func modelBounds() wire.Bounds {
	b := wire.DefaultBounds()
	b.MaxPendingUpdates = 8
	b.AckDeadlineMs = 1000
	return b
}

// closeWatcher is the store's Observer: it counts the watches the server closed, by reason, and
// wakes whoever waits for one.
type closeWatcher struct {
	mu      sync.Mutex
	reasons map[wire.CloseReason]int
	changed chan struct{}
}

func newCloseWatcher() *closeWatcher {
	return &closeWatcher{reasons: map[wire.CloseReason]int{}, changed: make(chan struct{})}
}

func (w *closeWatcher) Committed(int, time.Duration) {}
func (w *closeWatcher) CommitFailed()                {}
func (w *closeWatcher) WatchClosed(r wire.CloseReason) {
	w.mu.Lock()
	w.reasons[r]++
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *closeWatcher) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *closeWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprint(w.reasons)
}

// modelBackend is the state server the model runs against: in process, or the stated binary.
type modelBackend interface {
	// url is the NATS URL of the server.
	url() string
	// auth are the connection options that authenticate principal.
	auth(principal string) []nats.Option
	// restart stops the server (crash: at once, with no SHUTDOWN close, its replies lost), runs
	// down while it is away, and starts it again on the same database.
	restart(crash bool, down func())
	// takeBackup takes the backup that restore brings back; it reports whether it restarted the
	// server to do so.
	takeBackup(ctx context.Context) (restarted bool)
	// restore stops (or crashes) the server, runs down, restores the backup and starts again.
	restore(crash bool, down func())
	// closeWatch closes a watch of principal on the server's side (false: not live, or not
	// possible), live tells whether one is registered, and closes counts the server's closes
	// (nil when the backend cannot watch them).
	closeWatch(principal, id string, reason wire.CloseReason) bool
	live(principal, id string) bool
	closeCounts() *closeWatcher
	// disconnect drops a client connection at the server (false: not possible).
	disconnect(nc *nats.Conn) bool
}

// modelServer is an in-process state server over one database file that the test stops, crashes,
// restores and starts again; the NATS server stays up throughout.
type modelServer struct {
	t      *testing.T
	ns     *natsserver.Server
	path   string
	opts   store.Options
	closes *closeWatcher

	mu     sync.Mutex
	st     *store.Store
	srv    *server.Server
	nc     *nats.Conn
	backed []byte
}

func (m *modelServer) url() string                     { return m.ns.ClientURL() }
func (m *modelServer) auth(string) []nats.Option       { return nil }
func (m *modelServer) closeCounts() *closeWatcher      { return m.closes }
func (m *modelServer) restart(crash bool, down func()) { m.stop(crash); down(); m.start() }

func (m *modelServer) takeBackup(ctx context.Context) bool {
	m.backed = m.backup(ctx)
	return false
}

func (m *modelServer) restore(crash bool, down func()) {
	m.stop(crash)
	down()
	if _, err := store.Restore(m.path, bytes.NewReader(m.backed), m.opts); err != nil {
		m.t.Fatalf("restore: %v", err)
	}
	m.start()
}

func (m *modelServer) closeWatch(principal, id string, reason wire.CloseReason) bool {
	p := admin
	if principal == alice.ID {
		p = alice
	}
	st := m.store()
	return st != nil && st.CloseWatch(p, id, reason, "model")
}

func (m *modelServer) disconnect(nc *nats.Conn) bool { return natstest.Kick(m.ns, nc) }

func startModelServer(t *testing.T) *modelServer {
	m := &modelServer{t: t, ns: natstest.Start(t, natsserver.Options{}), closes: newCloseWatcher()}
	m.path = filepath.Join(t.TempDir(), "state-store.db")
	m.opts = store.DefaultOptions()
	m.opts.Bounds = modelBounds()
	m.opts.Observer = m.closes
	m.opts.Logger = slog.New(slog.DiscardHandler)
	m.start()
	t.Cleanup(func() { m.stop(false) })
	return m
}

func (m *modelServer) start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	st, err := store.Open(m.path, m.opts)
	if err != nil {
		m.t.Fatalf("open the store: %v", err)
	}
	nc, err := nats.Connect(m.ns.ClientURL(), nats.Name("stated"))
	if err != nil {
		st.Close()
		m.t.Fatalf("connect the server: %v", err)
	}
	srv, err := server.New(st, nc, server.Options{Principals: []policy.Principal{admin, alice}, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		nc.Close()
		st.Close()
		m.t.Fatalf("start the server: %v", err)
	}
	m.st, m.srv, m.nc = st, srv, nc
}

// stop stops the server. A crash first closes its NATS connection, so that no SHUTDOWN close reaches
// a watcher and no reply a request still waits for: the state server died, NATS did not.
func (m *modelServer) stop(crash bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil {
		return
	}
	if crash {
		m.nc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.srv.Stop(ctx) // a crashed one cannot flush: not an error here
	m.nc.Close()
	m.st, m.srv, m.nc = nil, nil, nil
}

func (m *modelServer) store() *store.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// backup takes an online backup.
func (m *modelServer) backup(ctx context.Context) []byte {
	var b bytes.Buffer
	if _, err := m.store().Backup(ctx, admin, &b); err != nil {
		m.t.Fatalf("backup: %v", err)
	}
	return b.Bytes()
}

// live reports whether the watch of principal with id is registered.
func (m *modelServer) live(principal, id string) bool {
	st := m.store()
	if st == nil {
		return false
	}
	for _, ref := range st.LiveWatches() {
		if ref.Principal == principal && ref.WatchID == id {
			return true
		}
	}
	return false
}

// outcome is what a client said of a write.
type outcome int

const (
	committed outcome = iota // ok: committed at rev
	refused                  // a *wire.Error: nothing changed
	unknown                  // no usable reply: it may have committed
)

// writeRec is one write and what its client said of it.
type writeRec struct {
	who     string
	round   int
	ns, key string
	del     bool
	token   string // a put's document token, unique in the test
	ttl     int64
	out     outcome
	rev     uint64     // committed
	entry   wire.Entry // a committed put's entry
	err     error
}

func (r *writeRec) String() string {
	op := "put " + r.token
	if r.del {
		op = "delete"
	}
	if r.ttl > 0 {
		op += fmt.Sprintf(" ttl %d", r.ttl)
	}
	res := []string{"committed", "refused", "unknown"}[r.out]
	if r.out == committed {
		res += fmt.Sprintf(" at %d", r.rev)
	} else {
		res += fmt.Sprintf(" (%v)", r.err)
	}
	return fmt.Sprintf("%s round %d: %s %s:%s %s", r.who, r.round, op, r.ns, r.key, res)
}

// modelLog holds every write.
type modelLog struct {
	mu   sync.Mutex
	recs []*writeRec
	n    atomic.Int64 // writes attempted, for disruptions that wait for progress
	tick chan struct{}
}

func newModelLog() *modelLog { return &modelLog{tick: make(chan struct{}, 1)} }

func (l *modelLog) add(r *writeRec) {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	l.n.Add(1)
	select {
	case l.tick <- struct{}{}:
	default:
	}
}

// waitProgress waits until n more writes were attempted since from, or done is closed.
func (l *modelLog) waitProgress(t *testing.T, from int64, n int64, done <-chan struct{}) {
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for l.n.Load() < from+n {
		select {
		case <-l.tick:
		case <-done:
			return
		case <-timer.C:
			t.Errorf("no progress of the writers within %v", testTimeout)
			return
		}
	}
}

// tokenOf is the token of a model document: a lease's holder or a preference's layout.
func tokenOf(e wire.Entry) string {
	var d struct {
		Holder string `json:"holder"`
		Layout string `json:"layout"`
	}
	_ = json.Unmarshal(e.Document, &d)
	return d.Holder + d.Layout
}

// modelPut is a put of a model document carrying token.
func modelPut(ns, key, token string, ttl int64) wire.PutRequest {
	req := wire.PutRequest{Namespace: ns, Key: key}
	if strings.HasPrefix(ns, "user/") {
		req.Schema = wire.SchemaPreference
		req.Document = json.RawMessage(fmt.Sprintf(`{"kind":"display","layout":%q}`, token))
	} else {
		req.Schema = wire.SchemaLease
		req.Document = json.RawMessage(fmt.Sprintf(`{"holder":%q,"claimed_at_ms":1}`, token))
	}
	if ttl > 0 {
		req.TTLMs = &ttl
	}
	return req
}

// writer is one client writing at random.
type writer struct {
	name   string
	c      *Client
	nss    []string
	log    *modelLog
	serial int
}

// classify fills in what the client said.
func (r *writeRec) classify(err error) {
	r.err = err
	switch {
	case err == nil:
		r.out = committed
	case wire.CodeOf(err) != "":
		r.out = refused
	default:
		r.out = unknown
	}
}

// put writes token-carrying documents; exp is nil (blind), 0 (create only) or a revision.
func (w *writer) put(ctx context.Context, round int, ns, key string, ttl int64, exp *int64) *writeRec {
	w.serial++
	token := fmt.Sprintf("%s-%d-%d", w.name, round, w.serial)
	req := modelPut(ns, key, token, ttl)
	req.ExpectedRevision = exp
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	e, err := w.c.Put(octx, req)
	cancel()
	r := &writeRec{who: w.name, round: round, ns: ns, key: key, token: token, ttl: ttl}
	r.classify(err)
	if err == nil {
		r.rev, r.entry = e.Revision, e
	}
	w.log.add(r)
	return r
}

func (w *writer) del(ctx context.Context, round int, ns, key string, exp *int64) *writeRec {
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rev, err := w.c.Delete(octx, wire.DeleteRequest{Namespace: ns, Key: key, ExpectedRevision: exp})
	cancel()
	r := &writeRec{who: w.name, round: round, ns: ns, key: key, del: true}
	r.classify(err)
	r.rev = rev
	w.log.add(r)
	return r
}

// current reads key's revision for a compare-and-set: 0 when it is missing; false when no answer.
func (w *writer) current(ctx context.Context, ns, key string) (int64, bool) {
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := w.c.Get(octx, ns, key)
	switch {
	case err == nil:
		return int64(e.Revision), true
	case errors.Is(err, wire.ErrNotFound):
		return 0, true
	}
	return 0, false
}

// modelKeys are the keys writers use: three prefixes of four keys each.
var modelPrefixes = []string{"p0/", "p1/", "x/"}

// step makes one random write.
func (w *writer) step(ctx context.Context, round int, rng *rand.Rand) *writeRec {
	ns := w.nss[rng.IntN(len(w.nss))]
	key := modelPrefixes[rng.IntN(len(modelPrefixes))] + "k" + strconv.Itoa(rng.IntN(4))
	switch op := rng.IntN(10); {
	case op < 3:
		return w.put(ctx, round, ns, key, 0, nil)
	case op < 5:
		if cur, ok := w.current(ctx, ns, key); ok {
			return w.put(ctx, round, ns, key, 0, &cur)
		}
		return nil
	case op == 5:
		return w.put(ctx, round, ns, key, 0, ptr[int64](0))
	case op < 8:
		return w.put(ctx, round, ns, key, 1000+int64(rng.IntN(500)), nil)
	case op == 8:
		return w.del(ctx, round, ns, key, nil)
	default:
		if cur, ok := w.current(ctx, ns, key); ok && cur > 0 {
			return w.del(ctx, round, ns, key, &cur)
		}
		return nil
	}
}

// modelEvent is one handler call.
type modelEvent struct {
	kind     string // put, delete, expire, resync
	key      string
	rev      uint64
	entry    wire.Entry
	snapshot []wire.Entry
	epoch    string // resync: the cache's epoch while OnResync ran
}

// gate holds a handler: armed, the next OnPut blocks until the release of that arming is closed.
type gate struct {
	armed   atomic.Bool
	blocked chan struct{}
	mu      sync.Mutex
	release chan struct{}
}

// arm makes the next OnPut block until the returned channel is closed.
func (g *gate) arm() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.release = make(chan struct{})
	g.armed.Store(true)
	return g.release
}

// hold blocks the calling handler if the gate is armed.
func (g *gate) hold(mc *modelCache) {
	if !g.armed.CompareAndSwap(true, false) {
		return
	}
	g.mu.Lock()
	rel := g.release
	g.mu.Unlock()
	g.blocked <- struct{}{}
	select {
	case <-rel:
	case <-time.After(testTimeout):
		mc.problem("the gate was never released")
	}
}

// modelCache is one cache under test and the recording of its handlers.
type modelCache struct {
	name      string
	principal string
	ns        string
	prefix    string
	c         *Client
	k         *Cache
	self      atomic.Pointer[Cache] // k, for the handlers, once NewCache returned
	first     string                // the epoch of the first snapshot
	gate      *gate

	mu        sync.Mutex
	events    []modelEvent
	lastEpoch string
	problems  []string
	resynced  chan struct{}
}

func (mc *modelCache) problem(format string, args ...any) {
	mc.mu.Lock()
	mc.problems = append(mc.problems, fmt.Sprintf(format, args...))
	mc.mu.Unlock()
}

func (mc *modelCache) add(e modelEvent) {
	mc.mu.Lock()
	mc.events = append(mc.events, e)
	mc.mu.Unlock()
}

func (mc *modelCache) eventCount() int {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return len(mc.events)
}

func (mc *modelCache) snapshotEvents() []modelEvent {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return slices.Clone(mc.events)
}

// covers reports whether the cache watches ns:key.
func (mc *modelCache) covers(ns, key string) bool {
	return mc.ns == ns && strings.HasPrefix(key, mc.prefix)
}

// handlers record every call and check what the documentation promises a handler sees: the change
// is in the cache, and its revision is not reached yet.
func (mc *modelCache) handlers() Handlers {
	update := func(kind, key string, rev uint64, e *wire.Entry) {
		if k := mc.self.Load(); k != nil {
			got, ok := k.Get(key)
			switch {
			case e != nil && (!ok || !entryEqual(got, *e)):
				mc.problem("OnPut(%s): the cache holds %s (%v)", e.String(), got.String(), ok)
			case e == nil && ok:
				mc.problem("On%s(%s, %d): the cache still holds %s", kind, key, rev, got.String())
			}
			if r := k.Revision(); r >= rev {
				mc.problem("%s %s at %d: Revision is %d while its handler runs", kind, key, rev, r)
			}
		}
		ev := modelEvent{kind: kind, key: key, rev: rev}
		if e != nil {
			ev.entry = *e
		}
		mc.add(ev)
	}
	return Handlers{
		OnPut: func(e wire.Entry) {
			if mc.gate != nil {
				mc.gate.hold(mc)
			}
			update("put", e.Key, e.Revision, &e)
		},
		OnDelete: func(key string, rev uint64) { update("delete", key, rev, nil) },
		OnExpire: func(key string, rev uint64) { update("expire", key, rev, nil) },
		OnResync: func(s []wire.Entry, rev uint64) {
			epoch := mc.first
			if k := mc.self.Load(); k != nil {
				epoch = k.Epoch()
				if got := k.List(); !slices.EqualFunc(got, s, entryEqual) {
					mc.problem("OnResync(rev %d): the cache holds %v, the snapshot is %v", rev, keys(got), keys(s))
				}
				mc.mu.Lock()
				newEpoch := epoch != mc.lastEpoch
				mc.mu.Unlock()
				if r := k.Revision(); newEpoch && r != 0 {
					mc.problem("OnResync(rev %d) of a new epoch: Revision is %d, want 0", rev, r)
				} else if r > rev {
					mc.problem("OnResync(rev %d): Revision is %d, above it", rev, r)
				}
			}
			mc.mu.Lock()
			mc.events = append(mc.events, modelEvent{kind: "resync", rev: rev, snapshot: slices.Clone(s), epoch: epoch})
			mc.lastEpoch = epoch
			mc.mu.Unlock()
			select {
			case mc.resynced <- struct{}{}:
			default:
			}
		},
	}
}

// cacheSpecs are the caches of the model: namespaces, prefixes, principals, and whether their
// connection goes through the link the test cuts.
type cacheSpec struct {
	name, principal, ns, prefix string
	viaLink, slow               bool
	ackDelay                    time.Duration
}

var modelCaches = []cacheSpec{
	{name: "a", principal: admin.ID, ns: "service/a", viaLink: true},
	{name: "a-p1", principal: admin.ID, ns: "service/a", prefix: "p1/", viaLink: true, ackDelay: -1},
	{name: "b", principal: admin.ID, ns: "service/b", viaLink: true, slow: true},
	{name: "alice", principal: alice.ID, ns: "user/alice"},
	{name: "alice-x", principal: admin.ID, ns: "user/alice", prefix: "x/", viaLink: true, ackDelay: time.Hour},
}

// follower follows a namespace with the raw Watch the way Watch's documentation asks of its user:
// it applies an update only when its watch_sequence is one above the last applied, acks each, and
// watches again on a gap, a CLOSED message, a closed Messages channel, a NATS status change or a
// failed ack (acked again every 250 ms, to learn of a watch that vanished without a word). Its
// snapshots and updates are recorded as a cache's handler calls are, and checked the same way.
type follower struct {
	mc *modelCache
	c  *Client
	nc *nats.Conn
	id string

	mu      sync.Mutex
	rev     uint64
	epoch   string
	changed chan struct{}
}

func (f *follower) set(rev uint64, epoch string) {
	f.mu.Lock()
	f.rev, f.epoch = rev, epoch
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// waitFor waits until the follower reached rev in epoch.
func (f *follower) waitFor(ctx context.Context, epoch string, rev uint64) error {
	for {
		f.mu.Lock()
		ok, ch := f.epoch == epoch && f.rev >= rev, f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("follower at %d in %s: %w", f.rev, f.epoch, ctx.Err())
		}
	}
}

func (f *follower) run(ctx context.Context) {
	status := f.nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING)
	defer f.nc.RemoveStatusListener(status)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		w, err := f.watch(ctx, status)
		if err != nil {
			if errors.Is(err, wire.ErrWatchExists) {
				uctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = f.c.Unwatch(uctx, f.id)
				cancel()
				continue
			}
			t := time.NewTimer(20 * time.Millisecond) // a retry's backoff
			select {
			case <-ctx.Done():
			case <-t.C:
			case <-status:
			}
			t.Stop()
			continue
		}
		f.follow(ctx, w, status, tick.C)
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.Stop(sctx) // a watch it leaves behind answers the next one WATCH_EXISTS
		cancel()
	}
}

// watch watches once and records the snapshot, under the epoch info gives before and after it.
func (f *follower) watch(ctx context.Context, status chan nats.Status) (*Watch, error) {
	for drained := false; !drained; {
		select {
		case <-status:
		default:
			drained = true
		}
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before, err := f.c.Info(ictx)
	if err != nil {
		return nil, err
	}
	w, err := f.c.Watch(ictx, wire.WatchRequest{WatchID: f.id, Namespace: f.mc.ns, KeyPrefix: f.mc.prefix})
	if err != nil {
		return nil, err
	}
	after, err := f.c.Info(ictx)
	if err == nil && after.Epoch != before.Epoch {
		err = errEpochMoved
	}
	if err != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.Stop(sctx)
		scancel()
		return nil, err
	}
	snap := w.Snapshot()
	f.mc.add(modelEvent{kind: "resync", rev: snap.SnapshotRevision, snapshot: snap.Entries, epoch: before.Epoch})
	f.set(snap.SnapshotRevision, before.Epoch)
	return w, nil
}

// follow applies w's updates until it can no longer trust them.
func (f *follower) follow(ctx context.Context, w *Watch, status chan nats.Status, tick <-chan time.Time) {
	var seq uint64
	ack := func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return w.Ack(actx, seq) == nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-status:
			return
		case <-tick:
			if !ack() {
				return
			}
		case m, ok := <-w.Messages():
			if !ok || m.Kind == wire.UpdateClosed || m.WatchSequence != seq+1 {
				return
			}
			ev := modelEvent{kind: strings.ToLower(string(m.Kind)), key: m.Key, rev: m.Revision}
			if m.Entry != nil {
				ev.entry = *m.Entry
			}
			f.mc.add(ev)
			seq++
			f.mu.Lock()
			epoch := f.epoch
			f.mu.Unlock()
			f.set(m.Revision, epoch)
			if !ack() {
				return
			}
		}
	}
}

// modelSeed is CACHE_MODEL_SEED, or a fresh one.
func modelSeed(t *testing.T) uint64 {
	if s := os.Getenv("CACHE_MODEL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CACHE_MODEL_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// Disruptions.
const (
	modelCut        = iota // the caches' NATS connection cut, mended after a while
	modelClose             // the server closes a watch
	modelOverflow          // a slow handler: OVERFLOW
	modelAckTimeout        // a slow handler: ACK_TIMEOUT
	modelRestart           // the server stops and starts again
	modelCrash             // the server crashes (behind NATS, or killed) and starts again
	modelReconnect         // the caches' connections drop and reconnect at once
)

// epochOfModel asks the store for its epoch until it answers with one.
func epochOfModel(ctx context.Context, t *testing.T, c *Client) string {
	for {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := c.Info(ictx)
		cancel()
		if err == nil && info.Epoch != "" {
			return info.Epoch
		}
		if ctx.Err() != nil {
			t.Fatalf("no epoch from the store: %v", err)
		}
	}
}

func runCacheModel(t *testing.T, m modelBackend, kinds []int, rounds int) {
	seed := modelSeed(t)
	t.Logf("seed %d (CACHE_MODEL_SEED=%d reruns it)", seed, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: CACHE_MODEL_SEED=%d go test -race -run '^%s$' ./store/client", seed, seed, t.Name())
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0x6361636865))
	ctx, cancel := context.WithTimeout(context.Background(), 3*testTimeout)
	defer cancel()

	link := natstest.NewCutLink(t, strings.TrimPrefix(m.url(), "nats://"))
	linkConn, err := Connect(link.URL(), admin.ID, append(m.auth(admin.ID), nats.ReconnectWait(20*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(linkConn.Close)
	linkStatus := linkConn.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING)
	connect := func(url, principal string) *Client {
		nc, err := Connect(url, principal, append(m.auth(principal), nats.ReconnectWait(20*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := New(nc, principal, WithRequestTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	linkClient, err := New(linkConn, admin.ID, WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	aliceClient := connect(m.url(), alice.ID)
	checker := connect(m.url(), admin.ID)
	epochs := []string{epochOfModel(ctx, t, checker)}

	var caches []*modelCache
	for _, s := range modelCaches {
		mc := &modelCache{name: s.name, principal: s.principal, ns: s.ns, prefix: s.prefix, first: epochs[0], resynced: make(chan struct{}, 1)}
		mc.c = aliceClient
		if s.viaLink {
			mc.c = linkClient
		}
		if s.slow {
			mc.gate = &gate{blocked: make(chan struct{}, 1)}
		}
		k, err := mc.c.NewCache(ctx, CacheOptions{Namespace: s.ns, KeyPrefix: s.prefix, Handlers: mc.handlers(),
			ResyncBackoff: 20 * time.Millisecond, CheckInterval: 250 * time.Millisecond, AckDelay: s.ackDelay})
		if err != nil {
			t.Fatalf("NewCache %s: %v", s.name, err)
		}
		mc.k = k
		mc.self.Store(k)
		t.Cleanup(func() {
			if err := k.Close(); err != nil {
				t.Errorf("Close %s: %v", mc.name, err)
			}
		})
		caches = append(caches, mc)
	}

	// A raw Watch follower beside the caches, on the link.
	fl := &follower{mc: &modelCache{name: "watch", principal: admin.ID, ns: "service/a", resynced: make(chan struct{}, 1)},
		c: linkClient, nc: linkConn, id: "model-follower", changed: make(chan struct{})}
	followCtx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); fl.run(followCtx) }()
	t.Cleanup(func() { stopFollowing(); <-followed })
	if err := fl.waitFor(ctx, epochs[0], 0); err != nil {
		t.Fatal(err)
	}
	recorded := append(slices.Clone(caches), fl.mc)

	log := newModelLog()
	writers := []*writer{
		{name: "w0", c: connect(m.url(), admin.ID), nss: []string{"service/a", "service/b", "user/alice"}, log: log},
		{name: "w1", c: connect(m.url(), admin.ID), nss: []string{"service/a", "service/b", "user/alice"}, log: log},
		{name: "w2", c: connect(m.url(), alice.ID), nss: []string{"user/alice"}, log: log},
	}
	disruptor := &writer{name: "d", c: checker, nss: []string{"service/b"}, log: log}

	// A disruption ends the watches of some caches: each must resync after it (mark: the number of
	// events the cache had recorded before it).
	type mark struct {
		mc    *modelCache
		at    int
		what  string
		round int
	}
	var marks []mark
	markAll := func(round int, what string, pick func(*modelCache) bool) {
		for _, mc := range recorded {
			if pick(mc) {
				marks = append(marks, mark{mc, mc.eventCount(), what, round})
			}
		}
	}
	all := func(*modelCache) bool { return true }

	const opsPerRound = 25
	backupAfter, restoreAfter := 1, 3
	epochOfRound := func(round int) []string {
		// Writes of rounds up to the backup live on in the restored epoch too.
		switch {
		case len(epochs) == 1 || round <= backupAfter:
			return epochs
		case round <= restoreAfter:
			return epochs[:1]
		default:
			return epochs[1:]
		}
	}
	outage := func() time.Duration { return time.Duration(100+rng.IntN(300)) * time.Millisecond }
	var disruptions []string
	var waiting sync.WaitGroup

	for round := range rounds {
		roundEpoch := epochs[len(epochs)-1]
		seeds := make([]uint64, len(writers))
		for i := range seeds {
			seeds[i] = rng.Uint64()
		}
		kind := kinds[rng.IntN(len(kinds))]
		done := make(chan struct{})
		var wg sync.WaitGroup
		for i, w := range writers {
			wg.Go(func() {
				wrng := rand.New(rand.NewPCG(seeds[i], uint64(round)))
				for range opsPerRound {
					r := w.step(ctx, round, wrng)
					if r == nil || r.out != committed || wrng.IntN(2) == 0 {
						continue
					}
					// Wait for one's own write on a cache that watches it.
					for _, mc := range caches {
						if !mc.covers(r.ns, r.key) || (w.name == "w2" && mc.principal != alice.ID) {
							continue
						}
						wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
						err := mc.k.WaitForRevisionIn(wctx, roundEpoch, r.rev)
						wcancel()
						if err != nil {
							mc.problem("round %d: WaitForRevisionIn(%d) of %s: %v", round, r.rev, r, err)
							break
						}
						got, ok := mc.k.Get(r.key)
						if ok && (got.Revision < r.rev || (r.del && got.Revision == r.rev)) {
							mc.problem("round %d: after WaitForRevision(%d) of %s the cache holds %s", round, r.rev, r, got.String())
						}
						break
					}
				}
			})
		}
		go func() { wg.Wait(); close(done) }()

		log.waitProgress(t, log.n.Load(), 10, done)
		switch kind {
		case modelCut:
			disruptions = append(disruptions, "cut")
			markAll(round, "cut", func(mc *modelCache) bool { return mc.c == linkClient || mc == fl.mc })
			link.Cut()
			awaitNotConnected(t, linkConn, linkStatus)
			awaitTimer(outage())
			link.Mend()
		case modelClose:
			mc := caches[rng.IntN(len(caches))]
			at := mc.eventCount()
			if m.closeWatch(mc.principal, mc.k.WatchID(), wire.CloseOverflow) {
				disruptions = append(disruptions, "close "+mc.name)
				marks = append(marks, mark{mc, at, "close", round})
			}
		case modelOverflow, modelAckTimeout:
			mc := caches[2]
			overflow := kind == modelOverflow
			disruptions = append(disruptions, fmt.Sprintf("slow handler (overflow %v)", overflow))
			at := mc.eventCount()
			holdHandler(ctx, t, m, mc, disruptor, round, overflow)
			marks = append(marks, mark{mc, at, "slow handler", round})
		case modelRestart, modelCrash:
			crash := kind == modelCrash
			disruptions = append(disruptions, fmt.Sprintf("restart (crash %v)", crash))
			markAll(round, "restart", all)
			m.restart(crash, func() {
				// Waits begun while the server is away, for revisions the caches reached: each
				// returns nil once the store, back in the same epoch, confirms it.
				waitsAcross(ctx, caches, epochs[len(epochs)-1], nil, &waiting)
				awaitTimer(outage())
			})
		case modelReconnect:
			disruptions = append(disruptions, "reconnect")
			markAll(round, "reconnect", all)
			for _, nc := range []*nats.Conn{linkConn, aliceClient.Conn()} {
				if !m.disconnect(nc) {
					t.Errorf("could not drop a connection")
				}
			}
		}
		<-done
		if t.Failed() {
			return
		}
		switch round {
		case backupAfter:
			if m.takeBackup(ctx) {
				disruptions = append(disruptions, "backup (restart)")
				markAll(round, "backup", all)
			}
		case restoreAfter:
			// The caches' connection may be cut across it, and the server may crash first: then
			// no SHUTDOWN reaches the caches, and they learn of the restore from a failed liveness
			// check or a reconnect.
			crash, cut := rng.IntN(2) == 0, rng.IntN(2) == 0
			disruptions = append(disruptions, fmt.Sprintf("restore (crash %v, cut %v)", crash, cut))
			// The waits begun across earlier restarts end first (each with nil, in their epoch): a
			// cache slow to confirm one would otherwise have it voided by this restore.
			waiting.Wait()
			markAll(round, "restore", all)
			if cut {
				link.Cut()
				awaitNotConnected(t, linkConn, linkStatus)
			}
			// Waits begun while the server is away, for revisions the caches reached in the
			// epoch the restore voids: each ends with ErrEpochChanged, never nil.
			m.restore(crash, func() { waitsAcross(ctx, caches, epochs[0], ErrEpochChanged, &waiting) })
			if cut {
				link.Mend()
			}
			epochs = append(epochs, epochOfModel(ctx, t, checker))
			if epochs[1] == epochs[0] {
				t.Fatalf("the restore kept epoch %s", epochs[0])
			}
			// And so do waits begun once it is back, whether the caches have seen it yet or not.
			waitsAcross(ctx, caches, epochs[0], ErrEpochChanged, &waiting)
			// Each cache moves to the new epoch (an OnResync tells it) before the next round's
			// writers wait in it.
			for _, mc := range caches {
				timer := time.NewTimer(testTimeout)
				for mc.k.Epoch() != epochs[1] {
					select {
					case <-mc.resynced:
					case <-timer.C:
						t.Fatalf("cache %s is still in epoch %s after the restore to %s", mc.name, mc.k.Epoch(), epochs[1])
					}
				}
				timer.Stop()
			}
		}
	}
	waiting.Wait()
	t.Logf("disruptions: %v; server closes: %v", disruptions, m.closeCounts())

	// The writes are over (leases may still expire): each cache must come to equal the store.
	final := epochs[len(epochs)-1]
	sentinels := 0
	for _, mc := range caches {
		var lastDiff string
		for try := 0; ; try++ {
			if try == 20 {
				t.Errorf("cache %s never matched the store: %s", mc.name, lastDiff)
				break
			}
			sentinels++
			r := disruptor.put(ctx, rounds, mc.ns, mc.prefix+"sentinel", 0, nil) // of the final epoch
			if r.out != committed {
				continue
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := mc.k.WaitForRevisionIn(wctx, final, r.rev)
			wcancel()
			if err != nil {
				t.Errorf("cache %s: WaitForRevisionIn(%d): %v", mc.name, r.rev, err)
				break
			}
			want, _ := listAll(t, checker, mc.ns, mc.prefix)
			got := mc.k.List()
			replayed := replayModel(mc.snapshotEvents())
			if slices.EqualFunc(got, want, entryEqual) && slices.EqualFunc(replayed, want, entryEqual) {
				break
			}
			lastDiff = fmt.Sprintf("store %v, cache %v, handlers %v", keys(want), keys(got), keys(replayed))
		}
	}
	// The follower, likewise.
	for try := 0; ; try++ {
		if try == 20 {
			t.Errorf("the Watch follower never matched the store")
			break
		}
		r := disruptor.put(ctx, rounds, fl.mc.ns, "sentinel", 0, nil)
		if r.out != committed {
			continue
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err := fl.waitFor(wctx, final, r.rev)
		wcancel()
		if err != nil {
			t.Errorf("the Watch follower never reached %d: %v", r.rev, err)
			break
		}
		want, _ := listAll(t, checker, fl.mc.ns, "")
		got := replayModel(fl.mc.snapshotEvents())
		if slices.EqualFunc(got, want, entryEqual) {
			break
		}
		t.Logf("the Watch follower: store %v, handlers %v", keys(want), keys(got))
	}
	epochsOf := func(r *writeRec) []string { return epochOfRound(r.round) }
	log.mu.Lock()
	recs := slices.Clone(log.recs)
	log.mu.Unlock()
	checkModel(t, recorded, recs, epochsOf, final)

	// Every committed revision is reached (in its epoch) or void (in the epoch the restore ended).
	for _, mc := range caches {
		for _, r := range recs {
			if r.out != committed || !mc.covers(r.ns, r.key) {
				continue
			}
			es := epochsOf(r)
			wctx, wcancel := context.WithTimeout(ctx, testTimeout)
			err := mc.k.WaitForRevisionIn(wctx, es[0], r.rev)
			wcancel()
			switch {
			case slices.Contains(es, final) && es[0] == final && err != nil:
				t.Errorf("cache %s: WaitForRevisionIn(%d) of %s: %v", mc.name, r.rev, r, err)
			case es[0] != final && !errors.Is(err, ErrEpochChanged):
				t.Errorf("cache %s: WaitForRevisionIn(old epoch, %d) of %s: %v, want ErrEpochChanged", mc.name, r.rev, r, err)
			}
			if slices.Contains(es, final) && es[0] != final {
				if err := mc.k.WaitForRevisionIn(ctx, final, r.rev); err != nil {
					t.Errorf("cache %s: WaitForRevisionIn(restored %d) of %s: %v", mc.name, r.rev, r, err)
				}
			}
		}
	}

	// Resyncs are reported: one after every disruption that ended a watch, counted by Resyncs, in
	// the store's epoch; the cache follows and has no error.
	for _, mk := range marks {
		evs := mk.mc.snapshotEvents()
		if !slices.ContainsFunc(evs[mk.at:], func(e modelEvent) bool { return e.kind == "resync" }) {
			t.Errorf("cache %s: no OnResync after the %s of round %d", mk.mc.name, mk.what, mk.round)
		}
	}
	for _, mc := range caches {
		n := 0
		for _, e := range mc.snapshotEvents() {
			if e.kind == "resync" {
				n++
			}
		}
		if got := mc.k.Resyncs(); got != uint64(n-1) {
			t.Errorf("cache %s: Resyncs() = %d after %d OnResync calls", mc.name, got, n)
		}
		if !mc.k.Following() || mc.k.Err() != nil || mc.k.Epoch() != final {
			t.Errorf("cache %s: Following %v, Err %v, Epoch %s (store %s)", mc.name, mc.k.Following(), mc.k.Err(), mc.k.Epoch(), final)
		}
		mc.mu.Lock()
		for _, p := range mc.problems {
			t.Errorf("cache %s: %s", mc.name, p)
		}
		mc.mu.Unlock()
		kinds := map[string]int{}
		for _, e := range mc.snapshotEvents() {
			kinds[e.kind]++
		}
		t.Logf("cache %s: %v, %d resyncs", mc.name, kinds, mc.k.Resyncs())
	}
	var outcomes [3]int
	for _, r := range recs {
		outcomes[r.out]++
	}
	t.Logf("%d writes (committed %d, refused %d, unknown %d), %d sentinels", len(recs), outcomes[committed], outcomes[refused], outcomes[unknown], sentinels)
}

// waitsAcross starts, for each cache, a wait for the revision it holds now (at least 1) in epoch,
// which must end with want.
func waitsAcross(ctx context.Context, caches []*modelCache, epoch string, want error, wg *sync.WaitGroup) {
	for _, mc := range caches {
		rev := max(mc.k.Revision(), 1)
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := mc.k.WaitForRevisionIn(wctx, epoch, rev); !errors.Is(err, want) {
				mc.problem("WaitForRevisionIn(%s, %d) across an outage: %v, want %v", epoch, rev, err, want)
			}
		})
	}
}

// awaitTimer waits d: the length of an outage the test makes, not a synchronisation.
func awaitTimer(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}

// awaitNotConnected waits until nc has noticed its connection is gone.
func awaitNotConnected(t *testing.T, nc *nats.Conn, ch chan nats.Status) {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for nc.Status() == nats.CONNECTED {
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("the connection is still up %v after the cut", testTimeout)
		}
	}
}

// holdHandler blocks the slow cache's handler on an update until the server has dropped its watch:
// by OVERFLOW (more updates written behind the held one) or ACK_TIMEOUT (the ack withheld).
func holdHandler(ctx context.Context, t *testing.T, m modelBackend, mc *modelCache, d *writer, round int, overflow bool) {
	t.Helper()
	release := mc.gate.arm()
	defer close(release)
	// Write until an update reaches the handler (one may land in a snapshot instead).
	for tries := 0; ; tries++ {
		if tries == 50 {
			mc.gate.armed.Store(false)
			t.Errorf("no update reached the slow handler in 50 writes")
			return
		}
		r := d.put(ctx, round, mc.ns, "p0/slow", 0, nil)
		if r.out != committed {
			continue
		}
		reached := make(chan error, 1)
		wctx, wcancel := context.WithCancel(ctx)
		go func() { reached <- mc.k.WaitForRevision(wctx, r.rev) }()
		select {
		case <-mc.gate.blocked:
			wcancel()
			<-reached
		case err := <-reached:
			wcancel()
			if err != nil {
				t.Errorf("WaitForRevision of the slow cache: %v", err)
				return
			}
			continue
		}
		break
	}
	if overflow {
		for range modelBounds().MaxPendingUpdates + 2 {
			d.put(ctx, round, mc.ns, "p0/slow", 0, nil)
		}
	}
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		changed := m.closeCounts().wait()
		if !m.live(mc.principal, mc.k.WatchID()) {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Errorf("the server never dropped the watch of the held handler (closes %s)", m.closeCounts())
			return
		}
	}
}

// replayModel rebuilds a cache's entries from its handler calls.
func replayModel(evs []modelEvent) []wire.Entry {
	state := map[string]wire.Entry{}
	for _, e := range evs {
		switch e.kind {
		case "resync":
			state = map[string]wire.Entry{}
			for _, s := range e.snapshot {
				state[s.Key] = s
			}
		case "put":
			state[e.key] = e.entry
		default:
			delete(state, e.key)
		}
	}
	out := make([]wire.Entry, 0, len(state))
	for _, e := range state {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b wire.Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// keyState is what one cache last saw of one key, in one epoch.
type keyState struct {
	rev     uint64 // the revision of the state: an entry's, a delete's, or the snapshot's that lacked it
	present bool
	token   string
}

// checkModel checks every cache's recorded handler calls against the write log.
func checkModel(t *testing.T, caches []*modelCache, recs []*writeRec, epochsOf func(*writeRec) []string, final string) {
	t.Helper()
	tokens := map[string]*writeRec{}
	byKey := map[string][]*writeRec{} // ns:key
	for _, r := range recs {
		if !r.del {
			tokens[r.token] = r
		}
		byKey[r.ns+":"+r.key] = append(byKey[r.ns+":"+r.key], r)
	}
	seen := map[string]wire.Entry{} // token -> the entry first shown with it
	// checkEntry: an entry shown is one a put wrote, as its reply said.
	checkEntry := func(where string, e wire.Entry) {
		tok := tokenOf(e)
		r := tokens[tok]
		switch {
		case r == nil:
			t.Errorf("%s: entry %s carries token %q that no put wrote", where, e.String(), tok)
		case r.ns != e.Namespace || r.key != e.Key:
			t.Errorf("%s: entry %s carries the token of %s", where, e.String(), r)
		case r.out == refused:
			t.Errorf("%s: entry %s was written by %s, which the client said was refused", where, e.String(), r)
		case r.out == committed && !entryEqual(e, r.entry):
			t.Errorf("%s: entry %s differs from %s's reply %s", where, e.String(), r, r.entry.String())
		case e.TTLMs != r.ttl:
			t.Errorf("%s: entry %s has ttl %d, its put %d", where, e.String(), e.TTLMs, r.ttl)
		}
		if first, ok := seen[tok]; ok && !entryEqual(first, e) {
			t.Errorf("%s: token %s shown as %s and as %s", where, tok, first.String(), e.String())
		} else if !ok {
			seen[tok] = e
		}
	}
	// removable: the key may have gone without a delete the log knows committed.
	removable := func(ns, key string) bool {
		for _, r := range byKey[ns+":"+key] {
			if r.out != refused && ((r.del && r.out == unknown) || (!r.del && r.ttl > 0)) {
				return true
			}
		}
		return false
	}
	// known: the writes the log knows committed in epoch under the cache's prefix.
	known := func(mc *modelCache, epoch string) []*writeRec {
		var out []*writeRec
		for _, r := range recs {
			if r.out == committed && mc.covers(r.ns, r.key) && slices.Contains(epochsOf(r), epoch) {
				out = append(out, r)
			}
		}
		return out
	}

	for _, mc := range caches {
		evs := mc.snapshotEvents()
		fail := func(i int, format string, args ...any) {
			t.Errorf("cache %s event %d: %s", mc.name, i, fmt.Sprintf(format, args...))
		}
		if len(evs) == 0 || evs[0].kind != "resync" {
			fail(0, "the first handler call is not OnResync")
			continue
		}
		var epoch string
		var states map[string]*keyState
		var last uint64 // the last revision observed in this epoch
		for i := 0; i < len(evs); {
			// One incarnation: a snapshot and the updates after it.
			snap := evs[i]
			if snap.epoch != epoch {
				epoch, states, last = snap.epoch, map[string]*keyState{}, 0
			}
			if snap.rev < last {
				fail(i, "snapshot at %d after revision %d of the same epoch", snap.rev, last)
			}
			last = snap.rev
			inSnap := map[string]bool{}
			for _, e := range snap.snapshot {
				inSnap[e.Key] = true
				checkEntry(fmt.Sprintf("cache %s snapshot %d", mc.name, i), e)
				if !mc.covers(e.Namespace, e.Key) || e.Revision > snap.rev {
					fail(i, "snapshot at %d holds %s", snap.rev, e.String())
				}
				st := states[e.Key]
				tok := tokenOf(e)
				switch {
				case st == nil:
				case e.Revision < st.rev || (e.Revision == st.rev && (!st.present || st.token != tok)):
					fail(i, "snapshot at %d shows %s after %+v: an older state after a newer one", snap.rev, e.String(), *st)
				}
				states[e.Key] = &keyState{rev: e.Revision, present: true, token: tok}
			}
			for key, st := range states {
				if inSnap[key] {
					continue
				}
				if st.present && snap.rev <= st.rev {
					fail(i, "snapshot at %d lacks %s, seen at %d", snap.rev, key, st.rev)
				}
				states[key] = &keyState{rev: max(st.rev, snap.rev)}
			}
			// Its snapshot holds every key at least at its last known committed write.
			kn := known(mc, epoch)
			lastKnown := map[string]*writeRec{}
			for _, r := range kn {
				if r.rev <= snap.rev && (lastKnown[r.key] == nil || r.rev > lastKnown[r.key].rev) {
					lastKnown[r.key] = r
				}
			}
			for key, r := range lastKnown {
				var e *wire.Entry
				for j := range snap.snapshot {
					if snap.snapshot[j].Key == key {
						e = &snap.snapshot[j]
					}
				}
				switch {
				case e == nil && !r.del && !removable(mc.ns, key):
					fail(i, "snapshot at %d lacks %s, last written by %s", snap.rev, key, r)
				case e != nil && (e.Revision < r.rev || (r.del && e.Revision == r.rev)):
					fail(i, "snapshot at %d shows %s, older than %s", snap.rev, e.String(), r)
				}
			}
			// The updates of the incarnation.
			j := i + 1
			applied := map[uint64]modelEvent{}
			for ; j < len(evs) && evs[j].kind != "resync"; j++ {
				u := evs[j]
				if u.rev <= last {
					fail(j, "%s %s at %d after revision %d: doubled or reordered", u.kind, u.key, u.rev, last)
				}
				last = u.rev
				applied[u.rev] = u
				if !mc.covers(mc.ns, u.key) {
					fail(j, "%s of %s outside the prefix", u.kind, u.key)
				}
				if st := states[u.key]; st != nil && u.rev <= st.rev {
					fail(j, "%s %s at %d after %+v", u.kind, u.key, u.rev, *st)
				}
				switch u.kind {
				case "put":
					checkEntry(fmt.Sprintf("cache %s update %d", mc.name, j), u.entry)
					states[u.key] = &keyState{rev: u.rev, present: true, token: tokenOf(u.entry)}
				case "delete":
					ok := false
					for _, r := range byKey[mc.ns+":"+u.key] {
						if r.del && ((r.out == committed && r.rev == u.rev) || r.out == unknown) {
							ok = true
						}
					}
					if !ok {
						fail(j, "DELETE of %s at %d that no delete made", u.key, u.rev)
					}
					states[u.key] = &keyState{rev: u.rev}
				case "expire":
					if !removable(mc.ns, u.key) {
						fail(j, "EXPIRE of %s at %d, which never had a lease", u.key, u.rev)
					}
					states[u.key] = &keyState{rev: u.rev}
				}
			}
			// Gap-free: every known committed write after the snapshot, up to the last update,
			// came as an update of its kind.
			for _, r := range kn {
				if r.rev <= snap.rev || r.rev > last {
					continue
				}
				u, ok := applied[r.rev]
				switch {
				case !ok:
					fail(i, "incarnation %d..%d (epoch %s) missed %s", snap.rev, last, epoch, r)
				case u.key != r.key || (u.kind == "delete") != r.del || (!r.del && tokenOf(u.entry) != r.token):
					fail(i, "incarnation %d..%d applied %s %s at %d for %s", snap.rev, last, u.kind, u.key, u.rev, r)
				}
			}
			i = j
		}
		if epoch != final {
			t.Errorf("cache %s: its last snapshot is of epoch %s, the store's is %s", mc.name, epoch, final)
		}
	}
	if t.Failed() {
		var b strings.Builder
		for _, r := range recs {
			fmt.Fprintln(&b, r)
		}
		t.Logf("write log:\n%s", b.String())
	}
}

// statedModel is the stated binary, with its embedded NATS server: a stop or a kill drops every
// connection, and a kill loses what was in flight.
type statedModel struct {
	t      *testing.T
	s      *e2e.Stated
	backed string
}

func startStatedModel(t *testing.T) *statedModel {
	b := modelBounds()
	s := e2e.NewStated(t, e2e.Config{
		Principals: []e2e.Principal{{ID: admin.ID, Admin: true, Password: "pw-" + admin.ID}, {ID: alice.ID, Password: "pw-" + alice.ID}},
		Extra:      fmt.Sprintf("[bounds]\nmax_pending_updates = %d\nack_deadline_ms = %d\n", b.MaxPendingUpdates, b.AckDeadlineMs),
	})
	s.Start()
	return &statedModel{t: t, s: s}
}

func (m *statedModel) url() string { return m.s.URL() }
func (m *statedModel) auth(principal string) []nats.Option {
	return []nats.Option{nats.UserInfo(principal, "pw-"+principal)}
}
func (m *statedModel) closeWatch(string, string, wire.CloseReason) bool { return false }
func (m *statedModel) live(string, string) bool                         { return false }
func (m *statedModel) closeCounts() *closeWatcher                       { return nil }
func (m *statedModel) disconnect(*nats.Conn) bool                       { return false }

func (m *statedModel) stop(crash bool) {
	if crash {
		m.s.Kill()
	} else if code := m.s.Term(); code != 0 {
		m.t.Errorf("stated exited %d on SIGTERM\n%s", code, m.s.Logs())
	}
}

func (m *statedModel) restart(crash bool, down func()) {
	m.stop(crash)
	down()
	m.s.Start()
}

func (m *statedModel) takeBackup(context.Context) bool {
	m.backed = m.s.OfflineBackup()
	return true
}

func (m *statedModel) restore(crash bool, down func()) {
	m.stop(crash)
	down()
	m.s.Restore(m.backed)
}

// The model against the stated binary: stops, kills (its embedded NATS server goes with it, so
// every connection drops, and replies in flight are lost), cuts and a restore.
func TestE2ECacheModel(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	runCacheModel(t, startStatedModel(t), []int{modelCut, modelRestart, modelCrash}, 5)
}

// The model against an in-process server, with every disruption.
func TestCacheModel(t *testing.T) {
	runCacheModel(t, startModelServer(t), []int{modelCut, modelClose, modelOverflow, modelAckTimeout, modelRestart, modelCrash, modelReconnect}, 6)
}
