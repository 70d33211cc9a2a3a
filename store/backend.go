package store

import (
	"io"

	"github.com/keeppeek/coordination/store/wire"
)

// backend is the small internal boundary between the engine and its persistence: what the committer
// writes and what Open replays. Everything above it (the memory index, policy, TTL handling, quotas,
// the audit chain's hashing and the watch registry) is shared by every backend. The bbolt backend is
// the one shipped; memBackend serves InMemory stores; a replicated backend on NATS JetStream would
// implement the same four methods.
type backend interface {
	// load replays the persisted state after validating it against rules. Invalid or inconsistent data
	// is an error that names the reason; the store is then opened unavailable.
	load(rules *loadRules) (*loaded, error)
	// commit persists one batch atomically: all of it or, with an error, none of it.
	commit(b *batch) error
	// backup writes a consistent snapshot of the whole persisted store to w.
	backup(w io.Writer) (int64, error)
	// scanAudit calls fn with the checkpoint for every kept audit record in sequence order (rec is
	// nil when raw does not decode) and returns the checkpoint that stands for the pruned prefix and the recorded head.
	scanAudit(fn func(cp auditCheckpoint, rec *auditRecord, raw []byte) error) (auditCheckpoint, auditHead, error)
	close() error
}

// loaded is the replayed state of a backend.
type loaded struct {
	epoch     string
	spaces    map[string]*loadedSpace
	auditHead auditHead
	// settings is what the store last served from each settings-backed namespace's file (see
	// settingsRecord); a namespace absent here has no record (a database of an older format, or a
	// namespace never settings-backed: see unrecorded).
	settings map[string]*settingsRecord
	// unrecorded: the database was just migrated from a format without that record (3 or older), so
	// a settings-backed namespace without one may have been served from its file all along; in a
	// database of the current format, one without a record was never served from its file, and
	// only its revision (clients saw every revision up to it) is known.
	unrecorded bool
	// anchor is the clock anchor the last run recorded (nil: none; see clockAnchor).
	anchor *clockAnchor
}

// settingsRecord is what the store last served from a settings-backed namespace: the namespace
// revision at which it was recorded and, for each entry, the revision served and the digest of the
// content it was served with (entryDigest). Open compares a file with it to tell an entry changed by
// hand from one the store wrote (see Store.reconcileSettings).
type settingsRecord struct {
	revision uint64
	entries  map[string]servedEntry
}

// servedEntry is one entry of a settingsRecord.
type servedEntry struct {
	Revision uint64 `json:"revision"`
	SHA256   string `json:"sha256"`
}

type loadedSpace struct {
	revision uint64
	entries  []*wire.Entry
}

// changeKind is what a committed change does to its key.
type changeKind uint8

const (
	changePut changeKind = iota + 1
	changeDelete
	changeExpire
	changeTouch // a keepalive: new deadline, same revision, no watch update
)

func (k changeKind) String() string {
	switch k {
	case changePut:
		return "put"
	case changeDelete:
		return "delete"
	case changeExpire:
		return "expire"
	case changeTouch:
		return "touch"
	}
	return "unknown"
}

// change is one committed mutation of a database-backed key.
type change struct {
	kind  changeKind
	ns    string
	key   string
	entry *wire.Entry // put and touch
	json  []byte      // put and touch: the entry's JSON encoding
}

// nsCounter is a namespace's persisted metadata after a batch.
type nsCounter struct {
	Revision uint64 `json:"revision"`
	Entries  int64  `json:"entries"`
	Bytes    int64  `json:"bytes"`
}

// batch is one atomic commit.
type batch struct {
	changes    []change
	namespaces map[string]nsCounter // every namespace the batch touched (a settings-backed one: its revision only)
	totalBytes int64                // database-backed document bytes after the batch
	audit      []auditRecord
	settings   map[string]*settingsChange // the records of the settings-backed namespaces the batch touched
	anchor     *clockAnchor               // when set, recorded as this run's clock anchor
}

// settingsChange updates one namespace's settingsRecord: its revision becomes revision, each key of
// entries is recorded (a nil value: removed) and, with replace, every record not in entries goes.
type settingsChange struct {
	revision uint64
	entries  map[string]*servedEntry
	replace  bool
}

// memBackend persists nothing: the InMemory store.
type memBackend struct{ epoch string }

func (m *memBackend) load(*loadRules) (*loaded, error) {
	return &loaded{epoch: m.epoch, spaces: map[string]*loadedSpace{}}, nil
}
func (m *memBackend) commit(*batch) error { return nil }
func (m *memBackend) backup(io.Writer) (int64, error) {
	return 0, wire.Errorf(wire.CodeUnavailable, "an in-memory store has nothing to back up")
}
func (m *memBackend) scanAudit(func(auditCheckpoint, *auditRecord, []byte) error) (auditCheckpoint, auditHead, error) {
	return auditCheckpoint{}, auditHead{}, nil
}
func (m *memBackend) close() error { return nil }
