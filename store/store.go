package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// Store is the engine. It is safe for concurrent use. A Store that could not load its data is
// unavailable: every call answers UNAVAILABLE, Info lacks the state-store feature, and Unavailable
// gives the reason.
type Store struct {
	opts    Options
	anchor  *clockAnchor // this run's clock anchor, recorded at Open (nil: an injected clock, or none readable)
	schemas *schema.Registry
	be      backend
	reason  error                 // non-nil: unavailable
	halted  atomic.Pointer[error] // set: stopped serving after a commit of unknown outcome (halt)
	// quota, once set (LowerQuotas), holds the bounds writes are admitted under: opts.Bounds with
	// quota bounds a reload lowered.
	quota  atomic.Pointer[wire.Bounds]
	haltCh chan struct{} // closed when halted is set
	epoch  string

	// mu guards the memory state below. The committer is its only writer; it reads without the lock
	// and takes it exclusively to apply a commit and fan it out. Readers take it shared.
	mu             sync.RWMutex
	spaces         map[string]*space
	totalBytes     int64 // every namespace, settings-backed included
	dbBytes        int64 // database-backed namespaces only (the persisted counter)
	liveNamespaces int64 // namespaces holding at least one entry
	// nodes are the index nodes kept for reuse, shared by every namespace's index (see space.tree):
	// a few dozen in all, not a few dozen per namespace ever served.
	nodes        *btree.FreeListG[*wire.Entry]
	deadlines    deadlineHeap
	leased       int             // live entries with a lease: the deadlines that are not stale (see compactDeadlines)
	expiring     map[string]bool // namespaces whose due leases were popped from deadlines and are not yet applied
	armedAtMs    int64           // the deadline the committer goroutine's timer is set for
	commitFailed bool            // the last commit failed: the committer retries due expiries after commitRetryDelay
	audit        auditHead

	watches registry

	// submit guards intake: Close takes it exclusively to stop new mutations.
	submitMu sync.RWMutex
	closing  bool
	// commitMu is held by whoever commits (a leading caller or the committer goroutine); the memory
	// state is written only under it, so a committer may read memory without mu.
	commitMu sync.Mutex
	qmu      sync.Mutex
	pending  []*mutation
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{} // closed once the store is closed (at Open when it did not load)
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
}

// Open opens (or creates) the store at path. It returns an error only for invalid options; a database
// that cannot be opened or fails validation gives an unavailable Store with the reason, never a panic
// and never partial service. The file of a creation cut short (a first start killed while it built
// the database beside path) is removed once the database is open, never one another store is still
// building. Settings-backed namespaces are read here (and again by ReloadSettings and before every
// write to them): see SettingsBackend for how an edit made to their files is served.
func Open(path string, opts Options) (*Store, error) {
	var anchor *clockAnchor
	if opts.Clock == nil {
		opts.Clock, anchor = defaultClock()
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	reg, err := schema.New()
	if err != nil {
		return nil, fmt.Errorf("store: schemas: %w", err)
	}
	s := &Store{
		opts:    opts,
		anchor:  anchor,
		schemas: reg,
		spaces:  map[string]*space{},
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		haltCh:  make(chan struct{}),
	}
	s.watches.init(opts.Bounds, opts.Observer)
	if err := s.load(path); err != nil {
		s.reason = err
		s.opts.Logger.Error("state store unavailable", "path", path, "reason", err)
		close(s.done)
		return s, nil
	}
	s.wg.Add(2)
	go s.committer()
	go s.janitor()
	return s, nil
}

func (s *Store) load(path string) error {
	var be backend
	if s.opts.InMemory {
		be = &memBackend{epoch: randomHex(8)}
	} else {
		b, err := openBolt(path, s.opts.OpenTimeout, s.opts.AuditRetention, true)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		for _, name := range b.leftovers {
			s.opts.Logger.Info("removed the file of a database creation cut short", "file", name)
		}
		be = b
	}
	rules := &loadRules{bounds: s.opts.Bounds, schemas: s.schemas, settings: s.opts.Settings}
	ld, err := be.load(rules)
	if err != nil {
		_ = be.close()
		return fmt.Errorf("load %s: %w", path, err)
	}
	s.be = be
	if s.opts.InMemory {
		s.anchor = nil // nothing outlives the run: no next start to anchor
	}
	moved, record := s.followWallClock(ld)
	fileRevs, err := s.replay(ld)
	if err != nil {
		_ = be.close()
		return err
	}
	if err := s.reconcileSettings(ld, fileRevs); err != nil {
		_ = be.close()
		return fmt.Errorf("record the revisions of settings namespaces: %w", err)
	}
	// Recorded only when needed: an injected clock has no anchor, and one recorded before on this boot
	// that still tells the time (within minClockShift) stands, so an ordinary restart commits nothing.
	if record {
		if err := s.recordClock(moved); err != nil {
			if len(moved) > 0 {
				// Served from memory, the moved deadlines would be written by later commits beside
				// entries the database still holds in the old time, under the old anchor: the next
				// start could not tell them apart.
				_ = be.close()
				return fmt.Errorf("record the lease deadlines moved with the wall clock's step: %w", err)
			}
			// Nothing moved (no anchor of this boot and epoch was recorded): the next start knows no
			// more than the wall clock, as before this one; a full disk, which still serves reads, is
			// no reason to serve nothing.
			s.opts.Logger.Warn("the store's clock anchor was not recorded: a wall clock step before the next start will not be followed", "err", err)
		}
	}
	// Restart purge (SPEC section 6): overdue leases are expired, in deadline order, before serving.
	if err := s.runBatch(nil); err != nil {
		_ = be.close()
		return fmt.Errorf("purge overdue leases: %w", err)
	}
	return nil
}

// replay puts the state a backend loaded, and the entries of the settings-backed namespaces, in
// memory, checking the two together against the bounds (namespaces holding entries, total bytes). A
// restore runs it too, on the copy it validates, so that it never installs a backup the next start
// would refuse. It returns each settings-backed namespace's revision as its file gives it.
func (s *Store) replay(ld *loaded) (map[string]uint64, error) {
	s.epoch = ld.epoch
	s.audit = ld.auditHead
	for ns, ls := range ld.spaces {
		sp := s.space(ns)
		sp.revision = ls.revision
		for _, e := range ls.entries {
			s.index(sp, e)
			s.dbBytes += int64(len(e.Document))
		}
	}
	fileRevs := make(map[string]uint64, len(s.opts.Settings))
	for ns, sb := range s.opts.Settings {
		rev, err := s.loadSettings(ns, sb)
		if err != nil {
			return nil, err
		}
		fileRevs[ns] = rev
	}
	return fileRevs, nil
}

// loadSettings puts the entries of a settings-backed namespace's file in memory, as the file gives
// them, and returns the file's revision; reconcileSettings then renumbers what changed outside the
// store.
func (s *Store) loadSettings(ns string, sb SettingsBackend) (uint64, error) {
	rd, err := s.readSettings(ns, sb)
	if err != nil {
		return 0, err
	}
	sp := s.space(ns)
	sp.settings = true
	sp.revision = max(sp.revision, rd.state.Revision) // the database's floor
	for _, e := range rd.entries {
		s.index(sp, e)
	}
	if s.totalBytes > s.Bounds().MaxTotalValueBytes {
		return 0, fmt.Errorf("settings namespace %s: total bytes over max_total_value_bytes", ns)
	}
	// A settings namespace holding entries is one of max_namespaces, as it is for every put (SPEC
	// section 8); the database's own namespaces were counted against the bound before.
	if s.liveNamespaces > s.Bounds().MaxNamespaces {
		return 0, fmt.Errorf("settings namespace %s: %d namespaces hold entries, over max_namespaces %d", ns, s.liveNamespaces, s.Bounds().MaxNamespaces)
	}
	return rd.state.Revision, nil
}

// settingsRead is a settings-backed namespace's file as its backend's Load gave it (state) and its
// entries as the store serves them (checked, documents compacted, no lease, in key order).
type settingsRead struct {
	state   SettingsState
	entries []*wire.Entry
}

// readSettings loads a settings-backed namespace's file and checks it as Open serves it: at most
// max_entries_per_namespace entries, each with a valid and unique key, a valid owner, a revision from
// 1 to the file's, a JSON object document within max_document_bytes that passes its schema. It
// touches no memory: a reload that finds the file invalid changes nothing.
func (s *Store) readSettings(ns string, sb SettingsBackend) (*settingsRead, error) {
	st, err := sb.Load()
	if err != nil {
		return nil, fmt.Errorf("settings namespace %s: %w", ns, err)
	}
	if int64(len(st.Entries)) > s.Bounds().MaxEntriesPerNamespace {
		return nil, fmt.Errorf("settings namespace %s holds %d entries, over max_entries_per_namespace", ns, len(st.Entries))
	}
	rd := &settingsRead{state: st, entries: make([]*wire.Entry, 0, len(st.Entries))}
	seen := make(map[string]bool, len(st.Entries))
	for i := range st.Entries {
		e := st.Entries[i]
		e.Namespace = ns
		if !wire.ValidKey(e.Key) || seen[e.Key] {
			return nil, fmt.Errorf("settings namespace %s: invalid or duplicate key %q", ns, e.Key)
		}
		seen[e.Key] = true
		if !wire.ValidPrincipalID(e.Owner) {
			return nil, fmt.Errorf("settings namespace %s: entry %s has an invalid owner %q", ns, e.Key, e.Owner)
		}
		if e.Revision < 1 || e.Revision > st.Revision {
			return nil, fmt.Errorf("settings namespace %s: entry %s has revision %d, namespace is at %d", ns, e.Key, e.Revision, st.Revision)
		}
		doc, err := wire.CompactDocument(e.Document)
		if err != nil || int64(len(doc)) > s.Bounds().MaxDocumentBytes {
			return nil, fmt.Errorf("settings namespace %s: entry %s has an invalid document", ns, e.Key)
		}
		if err := s.schemas.Validate(e.Schema, ns, doc); err != nil {
			return nil, fmt.Errorf("settings namespace %s: entry %s: %v", ns, e.Key, err)
		}
		e.Document, e.TTLMs, e.ExpiresAtMs = doc, 0, 0
		rd.entries = append(rd.entries, &e)
	}
	slices.SortFunc(rd.entries, func(a, b *wire.Entry) int { return strings.Compare(a.Key, b.Key) })
	return rd, nil
}

// space returns the namespace's memory state, creating it. Callers hold mu or run before serving.
func (s *Store) space(ns string) *space {
	sp := s.spaces[ns]
	if sp == nil {
		sp = newSpace(ns)
		s.spaces[ns] = sp
	}
	return sp
}

// index inserts or replaces e in sp and keeps the counters and deadlines. Callers hold mu exclusively
// or run before serving.
func (s *Store) index(sp *space, e *wire.Entry) {
	if s.nodes == nil {
		s.nodes = btree.NewFreeListG[*wire.Entry](btree.DefaultFreeListSize)
	}
	old, replaced := sp.insert(e, s.nodes)
	if replaced {
		sp.bytes -= int64(len(old.Document))
		s.totalBytes -= int64(len(old.Document))
		if old.ExpiresAtMs != 0 {
			s.leased--
		}
	} else {
		sp.countWorker(e.Key, 1)
		if sp.count() == 1 {
			s.liveNamespaces++
		}
	}
	sp.bytes += int64(len(e.Document))
	s.totalBytes += int64(len(e.Document))
	if e.ExpiresAtMs != 0 {
		s.leased++
		s.deadlines.push(deadline{atMs: e.ExpiresAtMs, ns: sp.name, key: e.Key, revision: e.Revision})
		if len(s.deadlines) > 2*s.leased+deadlineSlack {
			s.compactDeadlines()
		}
	}
}

// deadlineSlack is how many stale deadlines the heap may hold beyond as many as there are leases
// before compactDeadlines runs.
const deadlineSlack = 256

// compactDeadlines drops the stale deadlines from the heap. A deadline goes stale when its entry is
// replaced, kept alive, deleted or expired, and is otherwise dropped only when it comes due: a key
// renewed with a long TTL (a lease of 24 h renewed every second) would leave one behind per renewal,
// for up to a day each, and the heap would grow with the write rate instead of with the leases. So
// once more than half the heap is stale it is rebuilt from the deadlines that are current: each
// entry's own, once. It runs under mu, while memory is the state the heap describes (see index).
func (s *Store) compactDeadlines() {
	kept := s.deadlines[:0]
	seen := make(map[deadline]struct{}, s.leased)
	for _, d := range s.deadlines {
		sp := s.spaces[d.ns]
		if sp == nil {
			continue
		}
		e := sp.get(d.key)
		if e == nil || e.Revision != d.revision || e.ExpiresAtMs != d.atMs {
			continue
		}
		if _, dup := seen[d]; dup {
			continue // two keepalives in one millisecond: one deadline is enough
		}
		seen[d] = struct{}{}
		kept = append(kept, d)
	}
	clear(s.deadlines[len(kept):])
	s.deadlines = kept
	heap.Init(&s.deadlines)
}

// unindex removes key from sp.
func (s *Store) unindex(sp *space, key string) {
	old, ok := sp.remove(key)
	if !ok {
		return
	}
	sp.countWorker(key, -1)
	if old.ExpiresAtMs != 0 {
		s.leased--
	}
	sp.bytes -= int64(len(old.Document))
	s.totalBytes -= int64(len(old.Document))
	if sp.count() == 0 {
		s.liveNamespaces--
	}
}

// Unavailable returns the reason the store is not served, or nil when it is: it did not load, or it
// stopped after a commit whose outcome it cannot know (see halt).
func (s *Store) Unavailable() error {
	if s.reason != nil {
		return s.reason
	}
	if h := s.halted.Load(); h != nil {
		return *h
	}
	return nil
}

func (s *Store) unavailable() error {
	return wire.Errorf(wire.CodeUnavailable, "state store is not served: %v", s.Unavailable())
}

// halt stops serving for good, because a commit failed after it may have reached the database (or a
// settings file that could not be put back): what they hold can no longer be known from memory, and
// committing more on top of it could leave counters that disagree (etcd and PostgreSQL stop on a
// failed fsync for the same reason).
// Every call answers UNAVAILABLE with reason; every watch is closed (SHUTDOWN); a restart reloads
// the database and validates it.
func (s *Store) halt(reason error) {
	if s.halted.CompareAndSwap(nil, &reason) {
		s.opts.Logger.Error("state store stopped serving", "reason", reason)
		s.watches.shutdown(wire.CloseShutdown, "the state store stopped after a storage error")
		close(s.haltCh)
	}
}

// Halted is closed when the store stops serving for good after a commit of unknown outcome (see
// Unavailable for the reason): only a restart serves it again. A store that did not load, or is
// closed, never closes it.
func (s *Store) Halted() <-chan struct{} { return s.haltCh }

// Serving returns nil while the store is served, and UNAVAILABLE (with the reason) when it did not
// load or is closed: what every call but Info answers first.
func (s *Store) Serving() error { return s.serving() }

// serving returns UNAVAILABLE when the store did not load or is closing.
func (s *Store) serving() error {
	if s.Unavailable() != nil {
		return s.unavailable()
	}
	s.closeMu.Lock()
	closed := s.closed
	s.closeMu.Unlock()
	if closed {
		return wire.Errorf(wire.CodeUnavailable, "state store is closed")
	}
	return nil
}

// Info describes the server. Features include keeppeek.state-store.v1 only while the store is served.
func (s *Store) Info() wire.Info {
	features := []string{}
	if s.serving() == nil {
		features = append(features, wire.FeatureStateStore)
	}
	return wire.Info{ServerID: s.opts.ServerID, Version: s.opts.Version, Epoch: s.epoch, Features: features, Bounds: s.Bounds()}
}

// Bounds returns the bounds in force: those the store opened with, and the quota bounds LowerQuotas
// lowered since in their place.
func (s *Store) Bounds() wire.Bounds {
	if q := s.quota.Load(); q != nil {
		return *q
	}
	return s.opts.Bounds
}

// LowerQuotas applies to every write admitted from now on each quota bound of b that is lower than the
// one in force: max_document_bytes, max_entries_per_namespace, max_namespaces and
// max_total_value_bytes (b's other bounds, and a quota bound of b that is not lower, change nothing).
// A store over its bounds is not served when it opens (SPEC section 10), so a reload whose bounds
// take effect at the next start applies its lowered quotas at once: the store never grows past what
// that start serves. It refuses, changing nothing, when the store already holds more than the lowered
// bounds allow, naming what. Commits wait while it checks, so no write admitted under the old bounds
// commits after it returns. A store that is not served holds nothing to check.
func (s *Store) LowerQuotas(b wire.Bounds) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	cur := s.Bounds()
	q := cur
	q.MaxDocumentBytes = min(q.MaxDocumentBytes, b.MaxDocumentBytes)
	q.MaxEntriesPerNamespace = min(q.MaxEntriesPerNamespace, b.MaxEntriesPerNamespace)
	q.MaxNamespaces = min(q.MaxNamespaces, b.MaxNamespaces)
	q.MaxTotalValueBytes = min(q.MaxTotalValueBytes, b.MaxTotalValueBytes)
	if q == cur {
		return nil
	}
	if s.serving() == nil {
		if err := s.holdsWithin(q, q.MaxDocumentBytes < cur.MaxDocumentBytes); err != nil {
			return err
		}
	}
	s.quota.Store(&q)
	return nil
}

// holdsWithin reports what the store holds beyond the quota bounds of b: the counts and bytes Open
// validates, and with docs each document's size.
func (s *Store) holdsWithin(b wire.Bounds, docs bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.totalBytes > b.MaxTotalValueBytes {
		return fmt.Errorf("the store holds %d bytes of documents, over max_total_value_bytes %d", s.totalBytes, b.MaxTotalValueBytes)
	}
	if s.liveNamespaces > b.MaxNamespaces {
		return fmt.Errorf("%d namespaces hold entries, over max_namespaces %d", s.liveNamespaces, b.MaxNamespaces)
	}
	names := make([]string, 0, len(s.spaces))
	for name := range s.spaces {
		names = append(names, name)
	}
	sort.Strings(names) // the first namespace over, in a stable order
	for _, name := range names {
		if n := int64(s.spaces[name].count()); n > b.MaxEntriesPerNamespace {
			return fmt.Errorf("namespace %q holds %d entries, over max_entries_per_namespace %d", name, n, b.MaxEntriesPerNamespace)
		}
	}
	if !docs {
		return nil
	}
	var err error
	for _, name := range names {
		s.spaces[name].ascend(func(e *wire.Entry) bool {
			if n := int64(len(e.Document)); n > b.MaxDocumentBytes {
				err = fmt.Errorf("entry %s:%s holds a document of %d bytes, over max_document_bytes %d", e.Namespace, e.Key, n, b.MaxDocumentBytes)
			}
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Schemas returns the schema registry the store validates with.
func (s *Store) Schemas() *schema.Registry { return s.schemas }

// Close finishes the mutations already queued, closes every watch with SHUTDOWN and closes the
// database. Calls after Close answer UNAVAILABLE. Close is idempotent: a Close that races another
// returns once the database is closed.
func (s *Store) Close() error {
	return s.shutdown(wire.CloseShutdown, "the server is stopping")
}

func (s *Store) shutdown(reason wire.CloseReason, msg string) error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		<-s.done // another Close runs: return once it has closed the database
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	if s.reason != nil {
		return nil
	}
	defer close(s.done)
	s.submitMu.Lock()
	s.closing = true
	s.submitMu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.watches.shutdown(reason, msg)
	return s.be.close()
}

// Backup writes a consistent online snapshot of the whole database (one read transaction) to w. Only
// an admin may take one. Commits go on while it writes: a writer that is slow, or stuck, holds back
// none while the database is under 1 GiB (on 64-bit systems other than Windows; see initialMmapSize).
// Once ctx ends, Backup makes no further write to w and returns ctx's error; a write already blocked
// in w ends only when w lets it (and Close waits for it, as it waits for every read of the database).
func (s *Store) Backup(ctx context.Context, p policy.Principal, w io.Writer) (int64, error) {
	if err := s.serving(); err != nil {
		return 0, err
	}
	if !p.Admin {
		return 0, wire.Errorf(wire.CodePermissionDenied, "principal %q may not take a backup", p.ID)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.be.backup(ctxWriter{ctx: ctx, w: w})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return n, cerr // given up: the backup is incomplete, as any caller whose context ended knows
		}
		if cerr := s.serving(); cerr != nil {
			return n, cerr // closed before the read transaction began: UNAVAILABLE, as for any call
		}
		var we *wire.Error
		if errors.As(err, &we) {
			return n, we // the backend's own answer (an in-memory store has nothing to back up)
		}
		return n, wire.Errorf(wire.CodeStorage, "backup: %v", err)
	}
	return n, nil
}

// ctxWriter is w that refuses every write once ctx has ended, so a backup whose caller gave up ends
// its read transaction instead of writing the rest of the database.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// VerifyAudit walks the audit chain and reports the first broken link.
func (s *Store) VerifyAudit() (AuditReport, error) {
	if err := s.serving(); err != nil {
		return AuditReport{}, err
	}
	rep, err := verifyChain(s.be)
	if err != nil {
		if cerr := s.serving(); cerr != nil {
			return rep, cerr // closed while it read: UNAVAILABLE, as for any call
		}
		return rep, wire.Errorf(wire.CodeStorage, "audit verify: %v", err)
	}
	return rep, nil
}

// Stats are the engine's counters, for metrics.
type Stats struct {
	// Namespaces counts the namespaces in memory: every namespace ever written or settings-backed,
	// an emptied one included (it keeps its revision, SPEC section 4, and nothing else).
	Namespaces int
	// LiveNamespaces counts the namespaces holding at least one entry (max_namespaces).
	LiveNamespaces int64
	TotalBytes     int64
	Watches        int
	PerNamespace   []NamespaceStats
}

// NamespaceStats are one namespace's counters.
type NamespaceStats struct {
	Namespace string
	Revision  uint64
	Entries   int
	Bytes     int64
}

// Stats returns the current counters, namespaces in name order.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	st := Stats{Namespaces: len(s.spaces), LiveNamespaces: s.liveNamespaces, TotalBytes: s.totalBytes, Watches: s.watches.count(),
		PerNamespace: make([]NamespaceStats, 0, len(s.spaces))}
	for _, sp := range s.spaces {
		st.PerNamespace = append(st.PerNamespace, NamespaceStats{Namespace: sp.name, Revision: sp.revision, Entries: sp.count(), Bytes: sp.bytes})
	}
	s.mu.RUnlock() // sorted after: a scrape of a store with many namespaces holds no commit up for it
	sort.Slice(st.PerNamespace, func(i, j int) bool { return st.PerNamespace[i].Namespace < st.PerNamespace[j].Namespace })
	return st
}

func (s *Store) nowMs() int64 { return s.opts.Clock().UnixMilli() }

// untilMs returns how long until atMs by the store's clock, at most maxWait either way: a deadline
// centuries off would overflow a time.Duration, and its wrapped (negative) wait would wake the
// committer at once, again and again.
func (s *Store) untilMs(atMs int64) time.Duration {
	const limit = int64(maxWait / time.Millisecond)
	return time.Duration(min(max(atMs-s.nowMs(), -limit), limit)) * time.Millisecond
}

// maxWait bounds a wait for a deadline; the committer re-arms its timer when it ends.
const maxWait = time.Hour

// TrimMemory gives memory back to the operating system after a burst of work: it drops the database
// file's mapped pages from the resident set (reads fault them back in from the page cache), and the
// deadline heap's stale deadlines and spare capacity (a burst of leases deleted since would otherwise
// hold them until they came due). A server calls it when it has gone idle.
func (s *Store) TrimMemory() {
	if s.serving() != nil {
		return
	}
	s.mu.Lock()
	if len(s.deadlines) > s.leased {
		s.compactDeadlines()
	}
	if cap(s.deadlines) > 2*len(s.deadlines)+deadlineSlack {
		s.deadlines = slices.Clone(s.deadlines) // a heap still: the order is kept
	}
	s.mu.Unlock()
	if t, ok := s.be.(interface{ trimMemory() }); ok {
		t.trimMemory()
	}
}
