package store

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

type mutKind uint8

const (
	mutPut mutKind = iota + 1
	mutDelete
	mutTouch   // push a lease deadline forward without a revision (heartbeat keepalive)
	mutBarrier // no change: run a batch, so every lease already due is expired
	mutReload  // serve what changed in every settings file (ReloadSettings)
)

// mutation is one queued write. Its fields are checked for shape, policy, TTL, size and schema before
// it is queued; the committer checks guard, revision and quotas against the staged state.
type mutation struct {
	kind      mutKind
	principal string
	ns, key   string
	schema    string
	doc       []byte
	expected  *int64
	ttlMs     int64
	guard     *wire.Guard
	digest    string // the document's SHA-256 for the audit record, computed by the caller
	// capPrefix, when set, caps a put that creates its key: it fails QUOTA_EXCEEDED (naming capBound)
	// when capMax live entries of the namespace already have keys starting with capPrefix.
	capPrefix string
	capMax    int64
	capBound  string
	done      chan mutResult
}

type mutResult struct {
	entry    *wire.Entry
	revision uint64
	changes  []SettingsChange // a reload's
	err      error
}

var errClosed = wire.Errorf(wire.CodeUnavailable, "state store is closed")

// submit queues m and waits for its answer. If no commit is running, the caller commits the queued
// mutations itself (leader-based group commit: a lone writer pays no goroutine hand-off); otherwise the
// running leader or the committer goroutine takes them into its next batch. A context that ends first
// returns its error; the mutation may still commit (as with any request whose reply was lost).
func (s *Store) submit(ctx interface {
	Done() <-chan struct{}
	Err() error
}, m *mutation) mutResult {
	if err := ctx.Err(); err != nil {
		return mutResult{err: err} // never queued: nothing changes
	}
	m.done = make(chan mutResult, 1)
	s.submitMu.RLock()
	if s.closing {
		s.submitMu.RUnlock()
		return mutResult{err: errClosed}
	}
	s.qmu.Lock()
	s.pending = append(s.pending, m)
	s.qmu.Unlock()
	if s.commitMu.TryLock() {
		if batch := s.take(); len(batch) > 0 {
			_ = s.runBatch(batch)
		}
		s.commitMu.Unlock()
		if s.needsCommitter() {
			s.poke()
		}
	} else {
		s.poke() // the leader may be finishing: the committer goroutine makes sure m is not left behind
	}
	s.submitMu.RUnlock()
	return m.wait(ctx)
}

// wait returns m's answer, or the context's error if it ends first. An answer that is there when the
// context ends wins: an error never hides a result that was known.
func (m *mutation) wait(ctx interface {
	Done() <-chan struct{}
	Err() error
}) mutResult {
	select {
	case r := <-m.done:
		return r
	case <-ctx.Done():
		select {
		case r := <-m.done:
			return r
		default:
			return mutResult{err: ctx.Err()}
		}
	}
}

// take removes up to MaxBatch queued mutations, oldest first.
func (s *Store) take() []*mutation {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	n := min(len(s.pending), s.opts.MaxBatch)
	if n == 0 {
		return nil
	}
	batch := make([]*mutation, n)
	copy(batch, s.pending)
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
	return batch
}

// needsCommitter reports whether mutations are still queued, or a lease deadline now comes before the
// one the committer goroutine's timer is set for.
func (s *Store) needsCommitter() bool {
	s.qmu.Lock()
	queued := len(s.pending) > 0
	s.qmu.Unlock()
	if queued {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.deadlines.peek()
	return ok && d.atMs < s.armedAtMs
}

func (s *Store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// committer is the goroutine that commits what no caller is committing: mutations queued while a
// leader was busy, and lease expiries when their deadline comes. Every commit, whoever runs it, holds
// commitMu, so commits are serial and revision order is commit order.
func (s *Store) committer() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(s.arm())
		stopping := false
		select {
		case <-s.wake:
		case <-timer.C:
		case <-s.stop:
			stopping = true // finish what was queued before Close; intake is already shut
		}
		s.commitMu.Lock()
		for {
			batch := s.take()
			_ = s.runBatch(batch) // an empty batch still expires what is due
			if len(batch) < s.opts.MaxBatch {
				break
			}
		}
		s.commitMu.Unlock()
		if stopping {
			return
		}
	}
}

// arm records and returns how long until the earliest lease deadline (an hour when there is none).
func (s *Store) arm() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.deadlines.peek()
	if !ok {
		s.armedAtMs = math.MaxInt64
		return time.Hour
	}
	if s.halted.Load() != nil {
		s.armedAtMs = math.MaxInt64
		return time.Hour // a stopped store commits nothing: no expiry to wake for
	}
	s.armedAtMs = d.atMs
	wait := s.untilMs(d.atMs) + time.Millisecond // expiry is inclusive: at atMs the entry is already gone
	// Deadlines are times of the store's clock, which counts a suspend of the machine (CLOCK_BOOTTIME),
	// while the timer counts Go's monotonic time, which does not: looking at the clock again every
	// expiryPoll bounds what a suspend (or an injected clock that jumps) adds to an expiry, as etcd's
	// lessor does with its 500 ms check.
	wait = min(wait, expiryPoll)
	if s.commitFailed {
		// The disk refused the last commit: expiries are retried, but not in a loop that spins
		// against a full or failing disk.
		wait = max(wait, commitRetryDelay)
	}
	return max(wait, 0)
}

// expiryPoll is the longest the committer waits, while a lease deadline is pending, before it reads
// the store's clock again.
const expiryPoll = 500 * time.Millisecond

// commitRetryDelay spaces the committer's retries of due expiries while commits fail.
const commitRetryDelay = 100 * time.Millisecond

// encodeEntry is an entry's JSON encoding, made once per committed version.
func encodeEntry(e *wire.Entry) []byte {
	return wire.AppendEntry(make([]byte, 0, len(e.Document)+256), e)
}

// stagedOp is one change of a batch, in commit order.
type stagedOp struct {
	kind      changeKind
	ns, key   string
	entry     *wire.Entry // put and touch
	json      []byte      // put and touch: the entry's JSON encoding, made once
	digest    string      // put: the document's SHA-256
	revision  uint64      // the namespace revision it commits at (put, delete, expire)
	principal string
	m         *mutation // nil for an expiry
}

// nsStage is a namespace's counters as they will be after the staged ops.
type nsStage struct {
	revision uint64
	count    int64
	bytes    int64
	settings bool
	touched  bool
}

// stage is the state as it will be after the ops staged so far in this batch.
type stage struct {
	s      *Store
	now    int64
	vals   map[string]*wire.Entry // namespace 0x00 key -> staged value, nil when removed
	spaces map[string]*nsStage
	total  int64
	dbTot  int64
	liveNS int64
	ops    []stagedOp
	// workers is, per worker-status prefix (workerGroup), the entries the staged ops add under it
	// (negative: remove), beside those memory counts (space.workers).
	workers map[string]int64
	// reloads are the settings files the batch read, staged first (see stageReloads).
	reloads map[string]*settingsReload
}

func newStage(s *Store, now int64) *stage {
	return &stage{s: s, now: now, vals: map[string]*wire.Entry{}, spaces: map[string]*nsStage{},
		total: s.totalBytes, dbTot: s.dbBytes, liveNS: s.liveNamespaces}
}

func (st *stage) ns(ns string) *nsStage {
	n := st.spaces[ns]
	if n == nil {
		n = &nsStage{}
		if sp := st.s.spaces[ns]; sp != nil {
			n.revision, n.count, n.bytes, n.settings = sp.revision, int64(sp.count()), sp.bytes, sp.settings
		} else {
			_, n.settings = st.s.opts.Settings[ns]
		}
		st.spaces[ns] = n
	}
	return n
}

func (st *stage) lookup(ns, key string) *wire.Entry {
	if e, ok := st.vals[ns+"\x00"+key]; ok {
		return e
	}
	if sp := st.s.spaces[ns]; sp != nil {
		return sp.get(key)
	}
	return nil
}

// countPrefix counts the live entries of ns whose keys start with prefix, as staged, up to limit (it
// may stop there: exact is false when the count may be short of the total). A principal's worker-status prefix (wire.WorkersPrefix, the one PutSystem caps) is
// counted from the counters memory and the stage keep, whatever the number of its workers: every
// entry of memory whose deadline has passed by st.now is staged expired before any mutation (its
// deadline is in the heap, and runBatch stages every due one), so what the counters hold is live.
func (st *stage) countPrefix(ns, prefix string, limit int64) (n int64, exact bool) {
	if g := workerGroup(ns, prefix); g != "" && g == prefix {
		n = st.workers[g]
		if sp := st.s.spaces[ns]; sp != nil {
			n += sp.workers[g]
		}
		return n, true
	}
	vp := ns + "\x00" + prefix
	for k, e := range st.vals {
		if e != nil && strings.HasPrefix(k, vp) {
			n++ // staged in this batch: live (a lease is at least a second long)
		}
	}
	if sp := st.s.spaces[ns]; sp != nil {
		sp.ascendPrefix(prefix, "", func(e *wire.Entry) bool {
			if _, staged := st.vals[ns+"\x00"+e.Key]; staged || !live(e, st.now) {
				return true // counted above if still there; expired
			}
			n++
			return n < limit
		})
	}
	return n, n < limit
}

// set records key's new value (nil: removed) and keeps the counters.
func (st *stage) set(ns, key string, prev, next *wire.Entry) {
	n := st.ns(ns)
	n.touched = true
	var delta int64
	if prev != nil {
		delta -= int64(len(prev.Document))
	}
	if next != nil {
		delta += int64(len(next.Document))
	}
	switch {
	case prev == nil && next != nil:
		if n.count == 0 {
			st.liveNS++
		}
		n.count++
		st.countWorker(ns, key, 1)
	case prev != nil && next == nil:
		n.count--
		if n.count == 0 {
			st.liveNS--
		}
		st.countWorker(ns, key, -1)
	}
	n.bytes += delta
	st.total += delta
	if !n.settings {
		st.dbTot += delta
	}
	st.vals[ns+"\x00"+key] = next
}

// countWorker adds d to the staged count of key's worker-status prefix, if it has one.
func (st *stage) countWorker(ns, key string, d int64) {
	if g := workerGroup(ns, key); g != "" {
		if st.workers == nil {
			st.workers = map[string]int64{}
		}
		st.workers[g] += d
	}
}

func (st *stage) checkGuard(m *mutation) error {
	if m.guard == nil {
		return nil
	}
	g := st.lookup(m.ns, m.guard.Key)
	var cur uint64
	if g != nil {
		cur = g.Revision
	}
	if g == nil || cur != uint64(m.guard.Revision) {
		return wire.RevisionError(wire.CodeGuardFailed, cur, "guard %s is at revision %d, not %d", m.guard.Key, cur, m.guard.Revision)
	}
	return nil
}

func (st *stage) stagePut(m *mutation) (*wire.Entry, error) {
	if err := st.checkGuard(m); err != nil {
		return nil, err
	}
	cur := st.lookup(m.ns, m.key)
	if m.expected != nil {
		exp := uint64(*m.expected)
		switch {
		case exp == 0 && cur != nil:
			return nil, wire.RevisionError(wire.CodeConflict, cur.Revision, "%s already exists", m.key)
		case exp > 0 && cur == nil:
			return nil, wire.RevisionError(wire.CodeConflict, 0, "%s does not exist", m.key)
		case exp > 0 && cur.Revision != exp:
			return nil, wire.RevisionError(wire.CodeConflict, cur.Revision, "%s is at revision %d, not %d", m.key, cur.Revision, exp)
		}
	}
	b := st.s.Bounds()
	n := st.ns(m.ns)
	size := int64(len(m.doc))
	if size > b.MaxDocumentBytes { // Put checked it, unless LowerQuotas lowered the bound since
		return nil, wire.Errorf(wire.CodeTooLarge, "document is %d bytes (max_document_bytes %d)", size, b.MaxDocumentBytes)
	}
	var prevSize int64
	if cur == nil {
		if n.count+1 > b.MaxEntriesPerNamespace {
			return nil, wire.Errorf(wire.CodeQuotaExceeded, "namespace %s holds %d entries (max_entries_per_namespace)", m.ns, n.count)
		}
		if n.count == 0 && st.liveNS+1 > b.MaxNamespaces {
			return nil, wire.Errorf(wire.CodeQuotaExceeded, "%d namespaces hold entries (max_namespaces)", st.liveNS)
		}
		if m.capPrefix != "" {
			if have, exact := st.countPrefix(m.ns, m.capPrefix, m.capMax); have >= m.capMax {
				least := "at least "
				if exact {
					least = ""
				}
				return nil, wire.Errorf(wire.CodeQuotaExceeded, "%s holds %s%d live entries under %s (%s is %d)", m.ns, least, have, m.capPrefix, m.capBound, m.capMax)
			}
		}
	} else {
		prevSize = int64(len(cur.Document))
	}
	count := n.count
	if cur == nil {
		count++
	}
	if !revisionRoom(n.revision+1, count) {
		return nil, wire.Errorf(wire.CodeQuotaExceeded, "namespace %s is at revision %d: the revisions left up to 2^53-1 are kept for the removal of its %d entries",
			m.ns, n.revision, n.count)
	}
	if st.total-prevSize+size > b.MaxTotalValueBytes {
		return nil, wire.Errorf(wire.CodeQuotaExceeded, "the store holds %d document bytes; %d more would pass max_total_value_bytes %d",
			st.total, size-prevSize, b.MaxTotalValueBytes)
	}
	n.revision++
	e := &wire.Entry{Namespace: m.ns, Key: m.key, Schema: m.schema, Owner: m.principal, Revision: n.revision,
		CreatedAtMs: st.now, UpdatedAtMs: st.now, Document: m.doc}
	if cur != nil {
		e.CreatedAtMs = cur.CreatedAtMs
	}
	if m.ttlMs > 0 {
		e.TTLMs, e.ExpiresAtMs = m.ttlMs, st.now+m.ttlMs
	}
	st.set(m.ns, m.key, cur, e)
	st.ops = append(st.ops, stagedOp{kind: changePut, ns: m.ns, key: m.key, entry: e, json: encodeEntry(e), digest: m.digest, revision: e.Revision, principal: m.principal, m: m})
	return e, nil
}

// revisionRoom reports whether a namespace at revision rev holding count entries can still remove
// every one of them. Revisions are JSON integers up to 2^53-1 (SPEC sections 4 and 5), and a database
// holding a larger one does not open; a delete and an expiry each take a revision, and an expiry
// cannot be refused. So a put is admitted only if, after it, rev + count <= 2^53-1: deletes and
// expiries keep that sum, so none of them ever needs a revision past 2^53-1, and Open checks it.
func revisionRoom(rev uint64, count int64) bool {
	return count >= 0 && uint64(count) <= wire.MaxSafeInteger && rev <= wire.MaxSafeInteger-uint64(count)
}

func (st *stage) stageDelete(m *mutation) (uint64, error) {
	if err := st.checkGuard(m); err != nil {
		return 0, err
	}
	cur := st.lookup(m.ns, m.key)
	if cur == nil {
		return 0, wire.Errorf(wire.CodeNotFound, "%s not found in %s", m.key, m.ns)
	}
	if m.expected != nil && cur.Revision != uint64(*m.expected) {
		return 0, wire.RevisionError(wire.CodeConflict, cur.Revision, "%s is at revision %d, not %d", m.key, cur.Revision, *m.expected)
	}
	n := st.ns(m.ns)
	if n.revision >= wire.MaxSafeInteger {
		// Never so after the engine's own writes (see revisionRoom); a settings file may say so.
		return 0, wire.Errorf(wire.CodeQuotaExceeded, "namespace %s is at revision 2^53-1, the last the contract carries", m.ns)
	}
	n.revision++
	st.set(m.ns, m.key, cur, nil)
	st.ops = append(st.ops, stagedOp{kind: changeDelete, ns: m.ns, key: m.key, revision: n.revision, principal: m.principal, m: m})
	return n.revision, nil
}

func (st *stage) stageTouch(m *mutation) (*wire.Entry, error) {
	cur := st.lookup(m.ns, m.key)
	if cur == nil {
		return nil, wire.Errorf(wire.CodeNotFound, "%s not found in %s", m.key, m.ns)
	}
	if cur.TTLMs == 0 {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "%s has no lease to keep alive", m.key)
	}
	e := *cur
	e.ExpiresAtMs = st.now + e.TTLMs
	st.set(m.ns, m.key, cur, &e)
	st.ops = append(st.ops, stagedOp{kind: changeTouch, ns: m.ns, key: m.key, entry: &e, json: encodeEntry(&e), principal: m.principal, m: m})
	return &e, nil
}

func (st *stage) stageExpire(d deadline) {
	cur := st.lookup(d.ns, d.key)
	if cur == nil || cur.Revision != d.revision || cur.ExpiresAtMs != d.atMs || d.atMs > st.now {
		return // stale: replaced, deleted or kept alive since
	}
	n := st.ns(d.ns)
	n.revision++
	st.set(d.ns, d.key, cur, nil)
	st.ops = append(st.ops, stagedOp{kind: changeExpire, ns: d.ns, key: d.key, revision: n.revision, principal: cur.Owner})
}

// runBatch expires every lease already due, stages muts in order against the state before them,
// commits the result in one transaction, applies it to memory, fans it out and answers. A failed commit
// answers STORAGE to every mutation of the batch and leaves memory as it was; one that failed only
// because a settings-backed namespace's file refused the write answers STORAGE to that namespace's
// mutations and commits the rest without them.
func (s *Store) runBatch(muts []*mutation) error {
	if s.halted.Load() != nil {
		// Nothing more is committed on top of a database whose content memory may not reflect.
		err := s.unavailable()
		for _, m := range muts {
			m.done <- mutResult{err: err}
		}
		return err
	}
	// The settings files the batch writes (or reloads), read before anything is staged: a file edited
	// by hand since the store last read or wrote it is served first, so that the batch's writes are
	// checked against what it holds and its Save does not overwrite the edit.
	reloads := s.readSettingsChanges(muts)
	now := s.nowMs()
	s.mu.Lock()
	var due []deadline
	for {
		d, ok := s.deadlines.peek()
		if !ok || d.atMs > now {
			break
		}
		due = append(due, s.deadlines.pop())
	}
	s.expiring = nil // a watch snapshot of these namespaces waits for their expiries to apply
	for _, d := range due {
		if s.expiring == nil {
			s.expiring = map[string]bool{}
		}
		s.expiring[d.ns] = true
	}
	s.mu.Unlock()
	rereads := 0
	for {
		st := newStage(s, now)
		for _, d := range due {
			st.stageExpire(d)
		}
		st.stageReloads(reloads)
		results := make([]mutResult, len(muts))
		for i, m := range muts {
			results[i] = st.stage(m)
		}
		if len(st.ops) == 0 {
			s.logReloads(reloads, false)
			s.finishBatch(muts, results, len(due) > 0)
			return nil
		}
		start := time.Now()
		err := s.persist(st)
		if err == nil {
			s.opts.Observer.Committed(len(st.ops), time.Since(start))
			s.apply(st)
			s.logReloads(reloads, true)
			s.finishBatch(muts, results, false)
			return nil
		}
		var se *settingsSaveError
		if errors.As(err, &se) && errors.Is(err, ErrSettingsChanged) && !errors.Is(err, errCommitUncertain) &&
			rereads < maxSettingsRereads && reloads[se.ns] != nil {
			// The file was edited between the batch's read and its Save, which wrote nothing: it is
			// read again, and the batch staged again against what it holds.
			rereads++
			s.opts.Logger.Info("a settings file changed while the store wrote it: read again", "namespace", se.ns)
			s.readSettingsFile(se.ns, reloads[se.ns])
			s.rereadPutBack(reloads, se.ns)
			afterSettingsRead()
			continue
		}
		if errors.As(err, &se) && !errors.Is(err, errCommitUncertain) {
			// One settings-backed namespace's file refused the write (and is as it was) while the
			// database was not even tried: that namespace's writes answer STORAGE, and the rest of
			// the batch, and the expiries due, are staged and committed again without them. A
			// configuration file that cannot be written (a hand edit left it unparsable, its
			// directory is full) so never fails the writes of other namespaces, nor holds up their
			// leases' expiries.
			s.opts.Observer.CommitFailed()
			s.opts.Logger.Error("settings namespace write failed", "namespace", se.ns, "err", err)
			serr := wire.Errorf(wire.CodeStorage, "commit failed: %v", err)
			rest := muts[:0:0]
			for i, m := range muts {
				if m.ns == se.ns {
					m.done <- s.failedAnswer(m, results[i], due, reloads, now, serr)
				} else {
					rest = append(rest, m)
				}
			}
			muts = rest
			s.rereadPutBack(reloads, se.ns)
			continue
		}
		s.logReloads(reloads, false)
		return s.failBatch(muts, results, due, reloads, now, err)
	}
}

// rereadPutBack reads again, for a batch staged again after the Save of settings namespace failed
// wrote nothing, the file of every other namespace the batch writes: its Save, made before failed's,
// was put back, and the backend no longer knows what the file held (its next Save would be made over
// whatever it holds, an edit made since the put back included). Read again, an edit made since is
// served before the batch's writes, and the next Save is made only over what was read.
func (s *Store) rereadPutBack(reloads map[string]*settingsReload, failed string) {
	for ns, r := range reloads {
		if r.forWrite && ns != failed {
			s.readSettingsFile(ns, r)
		}
	}
}

// maxSettingsRereads bounds how often a batch reads a settings file again because it changed while
// the batch wrote it; a file that keeps changing fails the batch's writes to it (STORAGE).
const maxSettingsRereads = 3

// finishBatch answers a batch that committed (or had nothing to commit); dueOnly says it staged no
// change although leases were due (all of them stale), so the namespaces they named are no longer
// expiring.
func (s *Store) finishBatch(muts []*mutation, results []mutResult, dueOnly bool) {
	if dueOnly {
		s.mu.Lock()
		s.expiring = nil
		s.commitFailed = false
		s.mu.Unlock()
	}
	for i, m := range muts {
		m.done <- results[i]
	}
}

// failBatch answers a batch whose commit failed with err and leaves memory as it was; the due
// expiries go back to the heap for the next batch.
func (s *Store) failBatch(muts []*mutation, results []mutResult, due []deadline, reloads map[string]*settingsReload, now int64, err error) error {
	s.opts.Observer.CommitFailed()
	s.mu.Lock()
	for _, d := range due {
		s.deadlines.push(d) // they are still due; the next batch tries again
	}
	s.expiring = nil
	s.commitFailed = true
	// The committer goroutine's timer may be set for a deadline that is now past: have the
	// next needsCommitter wake it, so it retries (and then waits commitRetryDelay per retry).
	s.armedAtMs = math.MaxInt64
	s.mu.Unlock()
	s.opts.Logger.Error("commit failed", "mutations", len(muts), "err", err)
	if errors.Is(err, errCommitUncertain) {
		// Neither STORAGE (nothing changed) nor OK would be known to be true.
		s.halt(fmt.Errorf("a commit failed after it may have reached the disk: %w; restart to reload it", err))
		uerr := s.unavailable()
		for _, m := range muts {
			m.done <- mutResult{err: uerr}
		}
		return err
	}
	serr := wire.Errorf(wire.CodeStorage, "commit failed: %v", err)
	for i, m := range muts {
		m.done <- s.failedAnswer(m, results[i], due, reloads, now, serr)
	}
	return err
}

// stage checks m against the state staged so far and, when it passes, stages it.
func (st *stage) stage(m *mutation) (r mutResult) {
	if m.kind == mutPut || m.kind == mutDelete {
		// Its namespace's settings file does not load: the write cannot be checked against what
		// the file holds, and its Save would overwrite it.
		if err := st.reloadError(m.ns); err != nil {
			return mutResult{err: err}
		}
	}
	switch m.kind {
	case mutReload:
		r = st.stageReload()
	case mutPut:
		r.entry, r.err = st.stagePut(m)
	case mutDelete:
		r.revision, r.err = st.stageDelete(m)
	case mutTouch:
		r.entry, r.err = st.stageTouch(m)
	}
	return r
}

// failedAnswer is the answer of m when its batch's commit failed. A mutation that passed its checks
// answers STORAGE. One that failed them was checked against changes that never committed, so it is
// checked again against the committed state (with the due expiries, which the next batch retries, and
// the changes found in the settings files the batch read): if it still fails, that error is its
// answer (SPEC section 5: the first failing check answers); if it would have passed, it too answers
// STORAGE.
func (s *Store) failedAnswer(m *mutation, r mutResult, due []deadline, reloads map[string]*settingsReload, now int64, serr error) mutResult {
	if r.err == nil {
		return mutResult{err: serr}
	}
	st := newStage(s, now)
	for _, d := range due {
		st.stageExpire(d)
	}
	st.stageReloads(reloads)
	if again := st.stage(m); again.err != nil {
		return mutResult{err: again.err}
	}
	return mutResult{err: serr}
}

// persist writes the staged ops: settings-backed namespaces to their backends, then everything else
// and the audit records in one database transaction. If the transaction fails, the settings files are
// put back as they were; if one cannot be, the error is errCommitUncertain.
func (s *Store) persist(st *stage) error {
	bt := &batch{namespaces: map[string]nsCounter{}, totalBytes: st.dbTot}
	head := s.audit
	for _, op := range st.ops {
		n := st.spaces[op.ns]
		if !n.settings {
			bt.changes = append(bt.changes, change{kind: op.kind, ns: op.ns, key: op.key, entry: op.entry, json: op.json})
			bt.namespaces[op.ns] = nsCounter{Revision: n.revision, Entries: n.count, Bytes: n.bytes}
		} else {
			// A settings-backed namespace's entries live in its file; the database keeps its revision
			// only, as a floor, so the revision never goes back if the file is replaced by an older one
			// or the namespace stops being settings-backed (SPEC section 4), and a record of what it
			// served, so the next Open can tell an entry changed by hand (see reconcileSettings).
			bt.namespaces[op.ns] = nsCounter{Revision: n.revision}
			if bt.settings == nil {
				bt.settings = map[string]*settingsChange{}
			}
			sc := bt.settings[op.ns]
			if sc == nil {
				sc = &settingsChange{entries: map[string]*servedEntry{}}
				bt.settings[op.ns] = sc
			}
			sc.revision = n.revision
			switch op.kind {
			case changePut:
				sc.entries[op.key] = &servedEntry{Revision: op.revision, SHA256: entryDigest(op.entry)}
			case changeDelete, changeExpire:
				sc.entries[op.key] = nil
			}
		}
		if op.kind == changeTouch {
			continue // a keepalive is not an audited mutation
		}
		rec := auditRecord{AtMs: st.now, Principal: op.principal, Op: op.kind.String(),
			Namespace: op.ns, Key: op.key, Revision: op.revision}
		if op.kind == changePut {
			rec.DocumentSHA256 = op.digest
		}
		rec, head = head.chain(rec)
		bt.audit = append(bt.audit, rec)
	}
	saved, err := s.saveSettings(st)
	if err != nil {
		return s.putSettingsBack(saved, err)
	}
	if err := s.be.commit(bt); err != nil {
		if errors.Is(err, errCommitUncertain) {
			return err // the batch may be in the database: the files stay with it
		}
		return s.putSettingsBack(saved, err)
	}
	s.audit = head
	return nil
}

// saveSettings writes each settings-backed namespace the batch touched; it returns the previous state
// of every namespace whose file it may have changed: those written, and the one whose Save failed, if
// its file no longer reads as it was (a Save may fail after it replaced the file, as settingsfile's
// does when the fsync of the directory after its rename fails).
func (s *Store) saveSettings(st *stage) (map[string]SettingsState, error) {
	saved := map[string]SettingsState{}
	for ns, n := range st.spaces {
		if !n.settings || !n.touched {
			continue
		}
		// What the file held: as the batch read it (every namespace a batch writes is read first,
		// see readSettingsChanges), else as memory serves it.
		prev := s.settingsState(ns, nil)
		if r := st.reloads[ns]; r != nil && r.read != nil {
			prev = r.read.state
		}
		next := s.settingsState(ns, st)
		next.Revision = n.revision
		sb := s.opts.Settings[ns]
		if err := sb.Save(next); err != nil {
			if errors.Is(err, ErrSettingsNotWritten) {
				return saved, &settingsSaveError{ns: ns, err: err}
			}
			if cur, lerr := sb.Load(); lerr != nil || !sameSettingsState(cur, prev) {
				saved[ns] = prev
			}
			return saved, &settingsSaveError{ns: ns, err: err}
		}
		saved[ns] = prev
	}
	return saved, nil
}

// settingsSaveError is the error of a batch whose commit stopped because the Save of one
// settings-backed namespace, ns, failed: the database was not written.
type settingsSaveError struct {
	ns  string
	err error
}

func (e *settingsSaveError) Error() string {
	return "settings namespace " + e.ns + ": " + e.err.Error()
}
func (e *settingsSaveError) Unwrap() error { return e.err }

// putSettingsBack writes back the settings namespaces of a batch whose commit failed with err, and
// returns err. If a file cannot be put back, it holds a write that memory and the database do not (and
// that the next start serves): the batch's outcome is unknown, and the error says so
// (errCommitUncertain), so the store stops rather than answer STORAGE, which says nothing changed.
func (s *Store) putSettingsBack(saved map[string]SettingsState, err error) error {
	var failed []error
	for ns, prev := range saved {
		if serr := s.opts.Settings[ns].Save(prev); serr != nil {
			s.opts.Logger.Error("could not put a settings namespace back after a failed commit", "namespace", ns, "err", serr)
			failed = append(failed, fmt.Errorf("settings namespace %s could not be put back: %w", ns, serr))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %w (%w)", errCommitUncertain, err, errors.Join(failed...))
	}
	return err
}

// settingsState is ns's content in memory, or as staged when st is not nil.
func (s *Store) settingsState(ns string, st *stage) SettingsState {
	out := SettingsState{}
	sp := s.spaces[ns]
	if sp != nil {
		out.Revision = sp.revision
		sp.ascend(func(e *wire.Entry) bool {
			if st != nil {
				if _, ok := st.vals[ns+"\x00"+e.Key]; ok {
					return true // staged value added below
				}
			}
			out.Entries = append(out.Entries, *e)
			return true
		})
	}
	if st != nil {
		prefix := ns + "\x00"
		for k, e := range st.vals {
			if e != nil && len(k) > len(prefix) && k[:len(prefix)] == prefix {
				out.Entries = append(out.Entries, *e)
			}
		}
	}
	return out
}

// apply makes a committed batch visible: memory, then the watch fan-out, under the write lock so a
// watch snapshot sees all of it or none of it.
func (s *Store) apply(st *stage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expiring = nil
	s.commitFailed = false
	for _, op := range st.ops {
		sp := s.space(op.ns)
		var prevSize int64
		if old := sp.get(op.key); old != nil {
			prevSize = int64(len(old.Document))
		}
		switch op.kind {
		case changePut, changeTouch:
			s.index(sp, op.entry)
		case changeDelete, changeExpire:
			s.unindex(sp, op.key)
		}
		if !sp.settings {
			var size int64
			if op.entry != nil {
				size = int64(len(op.entry.Document))
			}
			s.dbBytes += size - prevSize
		}
		if op.kind == changeTouch {
			continue
		}
		sp.revision = op.revision
		ev := &Event{Revision: op.revision, Key: op.key}
		switch op.kind {
		case changePut:
			ev.Kind, ev.Entry, ev.entryJSON = wire.UpdatePut, op.entry, op.json
		case changeDelete:
			ev.Kind = wire.UpdateDelete
		case changeExpire:
			ev.Kind = wire.UpdateExpire
		}
		s.watches.fanout(op.ns, ev)
	}
}
