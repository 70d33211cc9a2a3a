package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// The bbolt layout, format 4:
//
//	meta        format -> "4", epoch -> string, total_bytes -> decimal,
//	            audit_head -> {"seq","hash"}, audit_checkpoint -> {"seq","hash"}
//	entries     <namespace> 0x00 -> the namespace's counters {"revision","entries","bytes"}
//	            <namespace> 0x00 <key> -> StateEntry JSON
//	audit       <seq, 8 bytes big-endian> -> audit record JSON
//	audit_tail  <seq, 8 bytes big-endian> -> audit record JSON: the newest records, at most a few
//	settings    <namespace> 0x00 -> {"revision"}: the revision of a settings-backed namespace when
//	            the store last wrote, or opened, its file
//	            <namespace> 0x00 <key> -> {"revision","sha256"}: an entry the store served from that
//	            file, at that revision, with that content (see settingsRecord)
//
// A namespace's counters sort just before its entries, so a commit usually rewrites one leaf for both.
// A commit appends its audit records to audit_tail, a bucket small enough for bbolt to keep inline in
// the root page that every commit rewrites anyway; once it outgrows that (a quarter page), the commit
// moves its records into audit, whose growing tree costs a leaf and a branch page to write. A lone
// writer so writes the big log once every few commits instead of every time. The chain is audit then
// audit_tail, in sequence order.
// Format 1 kept the counters in a bucket of their own ("namespaces"); migrations[1] moves them.
// Format 2 had no audit_tail; migrations[2] adds it.
// Format 3 had no settings bucket; migrations[3] adds it, empty: the first start after it serves every
// settings file as it stands and records it.
//
// A format N+1 adds a migration from N to migrations below; Open runs the chain of migrations in one
// transaction before validating, and refuses formats it does not know.
const formatVersion = 4

var (
	bucketMeta         = []byte("meta")
	bucketEntries      = []byte("entries")
	bucketAudit        = []byte("audit")
	bucketAuditTail    = []byte("audit_tail")
	bucketSettings     = []byte("settings")
	bucketNamespacesV1 = []byte("namespaces") // format 1 only

	metaFormat          = []byte("format")
	metaEpoch           = []byte("epoch")
	metaTotalBytes      = []byte("total_bytes")
	metaClockAnchor     = []byte("clock_anchor")
	metaAuditHead       = []byte("audit_head")
	metaAuditCheckpoint = []byte("audit_checkpoint")

	allBuckets = [][]byte{bucketMeta, bucketEntries, bucketAudit, bucketAuditTail, bucketSettings}
)

// migrations[n] upgrades a format-n database to format n+1 inside one write transaction.
var migrations = map[int]func(tx *bolt.Tx) error{
	1: migrateNamespaceCounters,
	2: func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucketAuditTail); return err },
	3: func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucketSettings); return err },
}

// migrateNamespaceCounters is format 1 to 2: each namespace's counters move from the "namespaces"
// bucket to the key <namespace> 0x00 of the entries bucket.
func migrateNamespaceCounters(tx *bolt.Tx) error {
	old := tx.Bucket(bucketNamespacesV1)
	entries := tx.Bucket(bucketEntries)
	if old == nil || entries == nil {
		return errors.New("format 1 database without its namespaces or entries bucket")
	}
	if err := old.ForEach(func(k, v []byte) error {
		return entries.Put(counterKey(string(k)), bytes.Clone(v))
	}); err != nil {
		return err
	}
	return tx.DeleteBucket(bucketNamespacesV1)
}

// counterKey is the entries-bucket key of a namespace's counters.
func counterKey(ns string) []byte { return append([]byte(ns), 0) }

// entryOverhead bounds the bytes a stored entry may take beyond its document, so a record can be
// rejected by size before it is decoded.
const entryOverhead = 2048

// loadRules are what a replayed database is checked against.
type loadRules struct {
	bounds   wire.Bounds
	schemas  *schema.Registry
	settings map[string]SettingsBackend
}

type boltBackend struct {
	db        *bolt.DB
	retention uint64
	leftovers []string // files of creations cut short that Open removed (see removeCreationLeftovers)
}

// openBolt opens the database at path, creating it (atomically: built beside it, then linked into
// place) when it does not exist. An existing empty file is a truncated database, not a new one. A panic
// of bbolt on a damaged file is returned as an error.
//
// The database it returns is the file at path once its lock is held: bbolt opens the file, then waits
// for its lock, and a restore that held the lock meanwhile has renamed another file over path. The
// file that was opened is then no longer the database (every write to it would be lost at the next
// start), so it is closed and path opened again. timeout bounds the waits for the lock, all of them.
// Without create, a missing file is an error: a restore validates the copy it wrote, and a copy that
// is gone must not pass as a new, empty database.
func openBolt(path string, timeout time.Duration, retention int, create bool) (*boltBackend, error) {
	const attempts = 3
	deadline := time.Now().Add(timeout)
	for range attempts {
		b, same, err := openBoltOnce(path, deadline, retention, create)
		if err != nil || same {
			return b, err
		}
		_ = b.close()
	}
	return nil, fmt.Errorf("the database file was replaced %d times while it was being opened", attempts)
}

// lockWait is how long a wait for a lock may take until deadline. Once it has passed, the lock is
// still tried once (the smallest positive timeout: bbolt and lockShared try before they give up, and a
// zero timeout would make bbolt wait forever): OpenTimeout bounds the waits for a lock held by
// another, not the time spent creating or checking the database, so a slow disk alone never makes a
// free database open unavailable.
func lockWait(deadline time.Time) time.Duration {
	return max(time.Until(deadline), time.Nanosecond)
}

// openBoltOnce opens the database at path, waiting for locks until deadline; same reports whether
// path still names the file it opened once its lock was held.
func openBoltOnce(path string, deadline time.Time, retention int, create bool) (b *boltBackend, same bool, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			b, same, err = nil, false, fmt.Errorf("database is corrupt: %v", r)
		}
	}()
	timeout := lockWait(deadline)
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.Size() == 0:
		return nil, false, errors.New("database file is empty (truncated?)")
	case errors.Is(err, os.ErrNotExist) && !create:
		return nil, false, fmt.Errorf("database file is missing: %w", err)
	case errors.Is(err, os.ErrNotExist):
		if err := createBolt(path, timeout); err != nil {
			return nil, false, fmt.Errorf("create database: %w", err)
		}
		if fi, err = os.Stat(path); err != nil {
			return nil, false, err
		}
	case err != nil:
		return nil, false, err
	default:
		if err := checkBoltFile(path, timeout); err != nil {
			return nil, false, err
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait(deadline), FreelistType: bolt.FreelistMapType, NoFreelistSync: true,
		InitialMmapSize: initialMmapSize})
	if err != nil {
		return nil, false, err
	}
	b = &boltBackend{db: db, retention: uint64(retention)}
	// The file opened is the one stat saw before (checked, for an existing one) if path names that file
	// still: a file replaced at path is never put back.
	now, err := os.Stat(path)
	if err != nil {
		_ = b.close()
		return nil, false, err
	}
	same = os.SameFile(fi, now)
	if same && create {
		b.leftovers = removeCreationLeftovers(path)
	}
	return b, same, nil
}

// initialMmapSize is how much of the database bbolt maps at open: address space only (the file grows
// with its data, and only the pages read become resident). bbolt remaps the file as it grows past its
// mapping, and a remap waits for every open read transaction, a Backup's included, which lasts as
// long as its writer takes: a writer that stops reading would hold back every commit that grows the
// file. A mapping of 1 GiB (16 times the default max_total_value_bytes) is never remapped while the
// database stays under it. Where the address space is small (32 bits), or bbolt sizes the file to its
// mapping (Windows), bbolt's own sizing is kept.
var initialMmapSize = func() int {
	if strconv.IntSize < 64 || runtime.GOOS == "windows" {
		return 0
	}
	return 1 << 30
}()

// update runs fn in a write transaction. Under the mapping of initialMmapSize, bbolt would add its
// whole AllocSize (16 MiB) to the file every time it grows, so that even an empty database took 16 MiB
// of disk; so first the step is set to half the pages in use (from 32 KiB, at most 16 MiB): the file
// is then at most about half as large again as what it holds (bbolt by itself, under a small mapping,
// doubles it), then grows 16 MiB at a time.
func (b *boltBackend) update(fn func(tx *bolt.Tx) error) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		if initialMmapSize > 0 {
			// Read by bbolt only when this transaction commits, on this goroutine.
			tx.DB().AllocSize = min(max(int(tx.Size())/2, minGrowStep), maxGrowStep)
		}
		return fn(tx)
	})
}

// minGrowStep and maxGrowStep bound how far the database file grows at a time (see update).
const (
	minGrowStep = 32 << 10
	maxGrowStep = 16 << 20
)

// createBolt builds a new, empty database of the current format beside path and links it into place,
// so a crash never leaves a half-made database behind, and a store creating it at the same time never
// replaces the one another has opened: the first link wins, and the other store opens that database
// (and waits for its lock). A creation that fails while a database has appeared at path is no
// failure: another store made it (and may have removed this one's file as a leftover, see
// removeCreationLeftovers), and that database is opened.
func createBolt(path string, timeout time.Duration) error {
	err := buildBolt(path, timeout)
	if err != nil {
		if _, serr := os.Stat(path); serr == nil {
			return nil
		}
	}
	return err
}

// creatingPattern is the os.CreateTemp pattern of the file createBolt builds a database in, beside
// the database named base.
func creatingPattern(base string) string { return base + ".creating-*" }

// isCreatingFile reports whether name is one of os.CreateTemp's names for creatingPattern(base): the
// star stands for decimal digits only.
func isCreatingFile(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base+".creating-")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

func buildBolt(path string, timeout time.Duration) error {
	f, err := os.CreateTemp(filepath.Dir(path), creatingPattern(filepath.Base(path)))
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	b := &boltBackend{db: db}
	if err := b.initialize(randomHex(8)); err != nil {
		db.Close()
		return err
	}
	whileCreating(tmp)
	if err := db.Close(); err != nil {
		return err
	}
	beforeCreateLink(tmp)
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil // another store made it first: that one is the database
		}
		if !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, os.ErrPermission) {
			return err
		}
		// A file system without hard links: rename (a store racing this one may then lose its file).
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return syncFile(filepath.Dir(path))
}

// removeCreationLeftovers removes the files that stores killed while creating the database at path
// left beside it (createBolt builds a database in "<name>.creating-<digits>" and links it into
// place), and returns their names. It runs once the database at path is open and its lock held, so
// that path names a database from then on. A store creating the database at this moment holds its
// file's lock (bbolt's, while it builds it) or will find the database at path when its creation
// fails (createBolt), so a file is removed only if its lock can be taken at once and its name still
// names the file locked; where locks are not available nothing is removed. Errors are not returned:
// a leftover that stays changes nothing the store serves, and the next start tries again.
func removeCreationLeftovers(path string) []string {
	if !canSweep {
		return nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		if !isCreatingFile(e.Name(), base) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if removeIfUnlocked(p) {
			removed = append(removed, p)
		}
	}
	return removed
}

// removeIfUnlocked removes the regular file at p if its lock can be taken at once, under the lock.
func removeIfUnlocked(p string) bool {
	f, err := openNoFollow(p)
	if err != nil {
		return false
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return false
	}
	if locked, err := tryLockExclusive(f); err != nil || !locked {
		return false
	}
	open, err := f.Stat()
	if err != nil {
		return false
	}
	if named, err := os.Lstat(p); err != nil || !os.SameFile(open, named) {
		return false
	}
	return os.Remove(p) == nil
}

// whileCreating and beforeCreateLink run in createBolt, with the name of the new file, while bbolt
// holds it and once it has let it go; tests use them to stop there.
var (
	whileCreating    = func(tmp string) {}
	beforeCreateLink = func(tmp string) {}
)

func (b *boltBackend) close() error { return b.db.Close() }

func entryKey(ns, key string) []byte {
	k := make([]byte, 0, len(ns)+1+len(key))
	k = append(k, ns...)
	k = append(k, 0)
	return append(k, key...)
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// initialize creates the layout in a new database that has no buckets at all.
func (b *boltBackend) initialize(epoch string) error {
	return b.update(func(tx *bolt.Tx) error {
		empty := true
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
		if !empty {
			return nil
		}
		for _, name := range allBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		for k, v := range map[string]string{
			string(metaFormat): strconv.Itoa(formatVersion), string(metaEpoch): epoch, string(metaTotalBytes): "0",
			string(metaAuditHead): `{"seq":0,"hash":""}`, string(metaAuditCheckpoint): `{"seq":0,"hash":""}`,
		} {
			if err := m.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
}

// migrate brings an older format up to formatVersion, and returns the format it migrated from (0:
// none, the database is of the current format or not one load accepts). A database that needs no
// migration is only read: a start commits nothing for it.
func (b *boltBackend) migrate() (from int, err error) {
	older := func(tx *bolt.Tx) (int, bool) {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return 0, false // load reports it
		}
		v, err := strconv.Atoi(string(m.Get(metaFormat)))
		return v, err == nil && v < formatVersion // otherwise load reports it
	}
	var needed bool
	if err := b.db.View(func(tx *bolt.Tx) error { _, needed = older(tx); return nil }); err != nil || !needed {
		return 0, err
	}
	err = b.update(func(tx *bolt.Tx) error {
		from = 0
		v, ok := older(tx)
		if !ok {
			return nil
		}
		m := tx.Bucket(bucketMeta)
		from = v
		for ; v < formatVersion; v++ {
			step, ok := migrations[v]
			if !ok {
				return fmt.Errorf("no migration from format %d", v)
			}
			if err := step(tx); err != nil {
				return fmt.Errorf("migrate format %d: %w", v, err)
			}
		}
		return m.Put(metaFormat, []byte(strconv.Itoa(formatVersion)))
	})
	if err != nil {
		from = 0
	}
	return from, err
}

// strictJSON decodes exactly one JSON value into v, refusing unknown fields and anything after the
// value (json.Decoder.More alone would let a stray '}' or ']' through: it stops at a closing byte).
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// load validates and replays the database. bbolt may panic on a corrupt page; that is recovered and
// reported as the reason, never propagated.
func (b *boltBackend) load(rules *loadRules) (ld *loaded, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a bad page faults as a panic, recovered below
	defer func() {
		if r := recover(); r != nil {
			ld, err = nil, fmt.Errorf("database is corrupt: %v", r)
		}
	}()
	from, err := b.migrate()
	if err != nil {
		return nil, err
	}
	err = b.db.View(func(tx *bolt.Tx) error {
		var e error
		ld, e = loadTx(tx, rules)
		return e
	})
	if err != nil {
		return nil, err
	}
	ld.unrecorded = from != 0 && from <= 3 // format 4 added the settings bucket
	return ld, nil
}

func loadTx(tx *bolt.Tx, rules *loadRules) (*loaded, error) {
	bounds := rules.bounds
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil {
			return nil, fmt.Errorf("bucket %q is missing", name)
		}
	}
	// Metadata first, before any document is decoded.
	meta := tx.Bucket(bucketMeta)
	format, err := strconv.Atoi(string(meta.Get(metaFormat)))
	if err != nil {
		return nil, fmt.Errorf("format version %q is not a number", meta.Get(metaFormat))
	}
	if format != formatVersion {
		return nil, fmt.Errorf("unsupported format version %d (this build reads %d)", format, formatVersion)
	}
	ld := &loaded{epoch: string(meta.Get(metaEpoch)), spaces: map[string]*loadedSpace{}, anchor: decodeAnchor(meta.Get(metaClockAnchor))}
	if ld.epoch == "" {
		return nil, errors.New("epoch is missing")
	}
	total, err := strconv.ParseInt(string(meta.Get(metaTotalBytes)), 10, 64)
	if err != nil || total < 0 {
		return nil, fmt.Errorf("total_bytes %q is not a byte count", meta.Get(metaTotalBytes))
	}
	if total > bounds.MaxTotalValueBytes {
		return nil, fmt.Errorf("total_bytes %d exceeds max_total_value_bytes %d", total, bounds.MaxTotalValueBytes)
	}
	if err := strictJSON(meta.Get(metaAuditHead), &ld.auditHead); err != nil {
		return nil, fmt.Errorf("audit_head: %v", err)
	}
	var cp auditCheckpoint
	if err := strictJSON(meta.Get(metaAuditCheckpoint), &cp); err != nil {
		return nil, fmt.Errorf("audit_checkpoint: %v", err)
	}
	if cp.Seq > ld.auditHead.Seq {
		return nil, fmt.Errorf("audit checkpoint seq %d is past the head seq %d", cp.Seq, ld.auditHead.Seq)
	}
	lastLog, _ := tx.Bucket(bucketAudit).Cursor().Last()
	firstTail, _ := tx.Bucket(bucketAuditTail).Cursor().First()
	lastTail, _ := tx.Bucket(bucketAuditTail).Cursor().Last()
	if firstTail != nil && lastLog != nil && bytes.Compare(firstTail, lastLog) <= 0 {
		return nil, errors.New("the audit tail does not follow the audit log")
	}
	// The head names the last record; with none kept, the head is the checkpoint (the head record is
	// never pruned). A head behind the records would have the next commits write over them.
	last := lastTail
	if last == nil {
		last = lastLog
	}
	if (last == nil && ld.auditHead.Seq != cp.Seq) || (last != nil && (len(last) != 8 || binary.BigEndian.Uint64(last) != ld.auditHead.Seq)) {
		return nil, fmt.Errorf("audit head seq %d is not the last audit record", ld.auditHead.Seq)
	}

	// Every key of the audit log and its tail is a record's: a sequence number (8 bytes) holding a
	// value. A commit that prunes reads the oldest keys as sequence numbers: a shorter key panicked it
	// (the process died, and again after every restart), a nested bucket failed it and every commit
	// after it. The records themselves are VerifyAudit's to judge.
	for _, name := range [][]byte{bucketAudit, bucketAuditTail} {
		b := tx.Bucket(name)
		if err := b.ForEach(func(k, v []byte) error {
			if len(k) != 8 || (v == nil && b.Bucket(k) != nil) {
				return fmt.Errorf("bucket %q holds %q, which is not an audit record's sequence number and value", name, k)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}

	// Counters first: a key that ends at its 0x00 separator. No document is decoded in this pass.
	counters := map[string]nsCounter{}
	var sum int64
	var nonEmpty int64
	err = tx.Bucket(bucketEntries).ForEach(func(k, v []byte) error {
		if len(k) == 0 || k[len(k)-1] != 0 {
			return nil // an entry: the next pass
		}
		ns := string(k[:len(k)-1])
		if !wire.ValidNamespace(ns) {
			return fmt.Errorf("namespace %q is not a valid namespace", ns)
		}
		var c nsCounter
		if err := strictJSON(v, &c); err != nil {
			return fmt.Errorf("namespace %q metadata: %v", ns, err)
		}
		if _, ok := rules.settings[ns]; ok && (c.Entries != 0 || c.Bytes != 0) {
			return fmt.Errorf("namespace %q is settings-backed but has database entries", ns)
		}
		if c.Entries < 0 || c.Bytes < 0 || !revisionRoom(c.Revision, c.Entries) { // revision + entries <= 2^53-1: see revisionRoom
			return fmt.Errorf("namespace %q metadata out of range", ns)
		}
		if c.Entries > bounds.MaxEntriesPerNamespace {
			return fmt.Errorf("namespace %q holds %d entries, over max_entries_per_namespace %d", ns, c.Entries, bounds.MaxEntriesPerNamespace)
		}
		if c.Entries == 0 && c.Bytes != 0 {
			return fmt.Errorf("namespace %q has no entries but %d bytes", ns, c.Bytes)
		}
		if c.Entries > 0 {
			nonEmpty++
		}
		sum += c.Bytes
		counters[ns] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	if nonEmpty > bounds.MaxNamespaces {
		return nil, fmt.Errorf("%d namespaces hold entries, over max_namespaces %d", nonEmpty, bounds.MaxNamespaces)
	}
	if sum != total {
		return nil, fmt.Errorf("total_bytes %d disagrees with the namespaces' byte counters (sum %d)", total, sum)
	}
	if ld.settings, err = loadSettingsRecords(tx.Bucket(bucketSettings), counters, bounds); err != nil {
		return nil, err
	}

	// Documents, each bounded by size before it is decoded.
	seen := map[string]nsCounter{}
	maxRecord := int(bounds.MaxDocumentBytes) + entryOverhead
	err = tx.Bucket(bucketEntries).ForEach(func(k, v []byte) error {
		if len(k) > 0 && k[len(k)-1] == 0 {
			return nil // counters, checked above
		}
		ns, key, ok := strings.Cut(string(k), "\x00")
		if !ok {
			return fmt.Errorf("entry key %q has no namespace separator", k)
		}
		c, ok := counters[ns]
		if !ok {
			return fmt.Errorf("orphan entry %s:%s: its namespace has no metadata", ns, key)
		}
		if !wire.ValidKey(key) {
			return fmt.Errorf("entry %s:%q has an invalid key", ns, key)
		}
		if len(v) > maxRecord {
			return fmt.Errorf("entry %s:%s is %d bytes, over the bound", ns, key, len(v))
		}
		var e wire.Entry
		if err := strictJSON(v, &e); err != nil {
			return fmt.Errorf("entry %s:%s does not decode: %v", ns, key, err)
		}
		if e.Namespace != ns || e.Key != key {
			return fmt.Errorf("entry %s:%s names itself %s:%s", ns, key, e.Namespace, e.Key)
		}
		if e.Revision < 1 || e.Revision > c.Revision {
			return fmt.Errorf("entry %s:%s has revision %d but its namespace is at %d", ns, key, e.Revision, c.Revision)
		}
		if !wire.ValidPrincipalID(e.Owner) {
			return fmt.Errorf("entry %s:%s has an invalid owner %q", ns, key, e.Owner)
		}
		if e.TTLMs < 0 || e.ExpiresAtMs < 0 || (e.TTLMs == 0) != (e.ExpiresAtMs == 0) {
			return fmt.Errorf("entry %s:%s has an inconsistent lease", ns, key)
		}
		// Every integer an entry carries is one the contract can (a JSON number up to 2^53-1), and a
		// lease is one a put accepts: a deadline centuries away would otherwise overflow the wait for
		// it, and the committer would spin.
		if e.CreatedAtMs < 0 || e.CreatedAtMs > wire.MaxSafeInteger || e.UpdatedAtMs < 0 || e.UpdatedAtMs > wire.MaxSafeInteger {
			return fmt.Errorf("entry %s:%s has a timestamp out of range", ns, key)
		}
		if e.TTLMs != 0 && (e.TTLMs < MinTTLMs || e.TTLMs > MaxTTLMs || e.ExpiresAtMs > wire.MaxSafeInteger) {
			return fmt.Errorf("entry %s:%s has a lease out of range (ttl_ms %d, expires_at_ms %d)", ns, key, e.TTLMs, e.ExpiresAtMs)
		}
		doc, err := wire.CompactDocument(e.Document)
		if err != nil || !bytes.Equal(doc, e.Document) {
			return fmt.Errorf("entry %s:%s document is not a compact JSON object", ns, key)
		}
		if int64(len(doc)) > bounds.MaxDocumentBytes {
			return fmt.Errorf("entry %s:%s document is %d bytes, over max_document_bytes", ns, key, len(doc))
		}
		if err := rules.schemas.Validate(e.Schema, ns, doc); err != nil {
			return fmt.Errorf("entry %s:%s: %v", ns, key, err)
		}
		s := seen[ns]
		s.Entries++
		s.Bytes += int64(len(doc))
		seen[ns] = s
		ls := ld.spaces[ns]
		if ls == nil {
			ls = &loadedSpace{revision: c.Revision}
			ld.spaces[ns] = ls
		}
		ls.entries = append(ls.entries, &e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for ns, c := range counters {
		s := seen[ns]
		if s.Entries != c.Entries || s.Bytes != c.Bytes {
			return nil, fmt.Errorf("namespace %q counters say %d entries and %d bytes, its entries hold %d and %d",
				ns, c.Entries, c.Bytes, s.Entries, s.Bytes)
		}
		if ld.spaces[ns] == nil {
			ld.spaces[ns] = &loadedSpace{revision: c.Revision}
		}
	}
	return ld, nil
}

// loadSettingsRecords reads and checks the settings bucket: each namespace's record (key <ns> 0x00,
// sorted before its entries) at a revision no higher than the namespace's counter, then its entries,
// each at a revision from 1 to the record's with a SHA-256 digest, at most max_entries_per_namespace.
func loadSettingsRecords(b *bolt.Bucket, counters map[string]nsCounter, bounds wire.Bounds) (map[string]*settingsRecord, error) {
	out := map[string]*settingsRecord{}
	err := b.ForEach(func(k, v []byte) error {
		if v == nil {
			return fmt.Errorf("settings bucket holds a bucket %q", k)
		}
		ns, key, ok := strings.Cut(string(k), "\x00")
		if !ok {
			return fmt.Errorf("settings record %q has no namespace separator", k)
		}
		if key == "" {
			if !wire.ValidNamespace(ns) {
				return fmt.Errorf("settings record of %q: not a valid namespace", ns)
			}
			var r struct {
				Revision uint64 `json:"revision"`
			}
			if err := strictJSON(v, &r); err != nil {
				return fmt.Errorf("settings record of %s: %v", ns, err)
			}
			if c, ok := counters[ns]; !ok || r.Revision > c.Revision {
				return fmt.Errorf("settings record of %s is at revision %d, past the namespace's %d", ns, r.Revision, c.Revision)
			}
			out[ns] = &settingsRecord{revision: r.Revision, entries: map[string]servedEntry{}}
			return nil
		}
		rec := out[ns]
		if rec == nil {
			return fmt.Errorf("settings record %s:%s: its namespace has no record", ns, key)
		}
		if !wire.ValidKey(key) {
			return fmt.Errorf("settings record %s:%q has an invalid key", ns, key)
		}
		var e servedEntry
		if err := strictJSON(v, &e); err != nil {
			return fmt.Errorf("settings record %s:%s: %v", ns, key, err)
		}
		if e.Revision < 1 || e.Revision > rec.revision || !validSHA256(e.SHA256) {
			return fmt.Errorf("settings record %s:%s is out of range (revision %d of %d, digest %q)", ns, key, e.Revision, rec.revision, e.SHA256)
		}
		if int64(len(rec.entries)) >= bounds.MaxEntriesPerNamespace {
			return fmt.Errorf("settings record of %s holds more than max_entries_per_namespace entries", ns)
		}
		rec.entries[key] = e
		return nil
	})
	return out, err
}

// validSHA256 reports whether s is a SHA-256 digest in lower-case hex.
func validSHA256(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// writeSettings applies a batch's settings changes to the settings bucket.
func writeSettings(b *bolt.Bucket, changes map[string]*settingsChange) error {
	for ns, c := range changes {
		if c.replace {
			prefix := counterKey(ns)
			cur := b.Cursor()
			for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Seek(prefix) {
				if err := cur.Delete(); err != nil {
					return err
				}
			}
		}
		v, _ := json.Marshal(struct {
			Revision uint64 `json:"revision"`
		}{c.revision})
		if err := b.Put(counterKey(ns), v); err != nil {
			return err
		}
		for key, e := range c.entries {
			if e == nil {
				if err := b.Delete(entryKey(ns, key)); err != nil {
					return err
				}
				continue
			}
			v, _ := json.Marshal(e)
			if err := b.Put(entryKey(ns, key), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// errCommitUncertain wraps a commit error after which the database, or a settings file that could not
// be put back, may hold the batch anyway.
var errCommitUncertain = errors.New("the commit may have reached the database or a settings file")

func (b *boltBackend) commit(bt *batch) error {
	var txid int
	err := b.update(func(tx *bolt.Tx) error {
		txid = tx.ID()
		return b.write(tx, bt)
	})
	if err != nil && txid != 0 {
		// bbolt writes the meta page before syncing it: if that sync fails, Commit reports an error,
		// yet the new meta is in place and later transactions read the batch.
		var now int
		if verr := b.db.View(func(tx *bolt.Tx) error { now = tx.ID(); return nil }); verr != nil || now >= txid {
			return fmt.Errorf("%w: %w", errCommitUncertain, err)
		}
	}
	return err
}

// write puts one batch in tx.
func (b *boltBackend) write(tx *bolt.Tx, bt *batch) error {
	entries := tx.Bucket(bucketEntries)
	for _, c := range bt.changes {
		switch c.kind {
		case changePut, changeTouch:
			if err := entries.Put(entryKey(c.ns, c.key), c.json); err != nil {
				return err
			}
		case changeDelete, changeExpire:
			if err := entries.Delete(entryKey(c.ns, c.key)); err != nil {
				return err
			}
		}
	}
	for ns, c := range bt.namespaces {
		v, _ := json.Marshal(c)
		if err := entries.Put(counterKey(ns), v); err != nil {
			return err
		}
	}
	if len(bt.settings) > 0 {
		if err := writeSettings(tx.Bucket(bucketSettings), bt.settings); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(metaTotalBytes, []byte(strconv.FormatInt(bt.totalBytes, 10))); err != nil {
		return err
	}
	if bt.anchor != nil {
		v, _ := json.Marshal(bt.anchor)
		if err := meta.Put(metaClockAnchor, v); err != nil {
			return err
		}
	}
	if len(bt.audit) == 0 {
		return nil
	}
	// The records share one buffer (bbolt keeps each value until the commit; a record already put
	// keeps the old array when the buffer grows).
	buf := make([]byte, 0, 400*len(bt.audit))
	recs := make([][]byte, len(bt.audit))
	for i := range bt.audit {
		start := len(buf)
		buf = bt.audit[i].appendJSON(buf)
		recs[i] = buf[start:len(buf):len(buf)]
	}
	last := bt.audit[len(bt.audit)-1]
	head, _ := json.Marshal(auditHead{Seq: last.Seq, Hash: last.Hash})
	if err := meta.Put(metaAuditHead, head); err != nil {
		return err
	}
	// New records go to the audit tail while it stays small enough for bbolt to keep inline (a quarter
	// page, counted as bbolt counts it): a commit of a few changes then writes no page of the log.
	// Once the tail would outgrow that, its records and the new ones go to the log.
	const pageHeader, leafElement = 16, 16
	tail, ab := tx.Bucket(bucketAuditTail), tx.Bucket(bucketAudit)
	size := pageHeader
	c := tail.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		size += leafElement + len(k) + len(v)
	}
	for _, r := range recs {
		size += leafElement + 8 + len(r)
	}
	into := tail
	if size > tx.DB().Info().PageSize/4 {
		ab.FillPercent = 1.0 // keys only ever append: fill pages instead of splitting them in half
		for k, v := c.First(); k != nil; k, v = c.First() {
			// The tail's own memory is not the log's to keep: bbolt holds a value until the commit.
			if err := ab.Put(bytes.Clone(k), bytes.Clone(v)); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		into = ab
	}
	for i, r := range recs {
		if err := into.Put(seqKey(bt.audit[i].Seq), r); err != nil {
			return err
		}
	}
	if into == tail {
		return nil
	}
	return b.prune(meta, ab, last.Seq)
}

// prune applies the retention rule (see auditCheckpoint).
func (b *boltBackend) prune(meta, ab *bolt.Bucket, head uint64) error {
	var cp auditCheckpoint
	if err := json.Unmarshal(meta.Get(metaAuditCheckpoint), &cp); err != nil {
		return fmt.Errorf("audit checkpoint: %w", err)
	}
	if head-cp.Seq <= b.retention+auditPruneSlack {
		return nil
	}
	through := head - b.retention
	c := ab.Cursor()
	for k, v := c.First(); k != nil && binary.BigEndian.Uint64(k) <= through; k, v = c.First() {
		seq := binary.BigEndian.Uint64(k)
		next, problem := verifyLink(auditHead{Seq: cp.Seq, Hash: cp.Hash}, seq, v)
		if problem != "" && cp.BrokenSeq == 0 {
			cp.BrokenSeq, cp.Problem = seq, problem
		}
		cp.Seq, cp.Hash = next.Seq, next.Hash
		if err := c.Delete(); err != nil {
			return err
		}
	}
	v, _ := json.Marshal(cp)
	return meta.Put(metaAuditCheckpoint, v)
}

func (b *boltBackend) backup(w io.Writer) (int64, error) {
	var n int64
	err := b.db.View(func(tx *bolt.Tx) error {
		var e error
		n, e = tx.WriteTo(w)
		return e
	})
	return n, err
}

func (b *boltBackend) scanAudit(fn func(auditCheckpoint, *auditRecord, []byte) error) (auditCheckpoint, auditHead, error) {
	var cp auditCheckpoint
	var head auditHead
	err := b.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := json.Unmarshal(meta.Get(metaAuditCheckpoint), &cp); err != nil {
			return fmt.Errorf("audit checkpoint: %w", err)
		}
		if err := json.Unmarshal(meta.Get(metaAuditHead), &head); err != nil {
			return fmt.Errorf("audit head: %w", err)
		}
		each := func(k, v []byte) error {
			var rec auditRecord
			if err := strictJSON(v, &rec); err != nil || len(k) != 8 || binary.BigEndian.Uint64(k) != rec.Seq {
				return fn(cp, nil, v)
			}
			return fn(cp, &rec, v)
		}
		if err := tx.Bucket(bucketAudit).ForEach(each); err != nil {
			return err
		}
		return tx.Bucket(bucketAuditTail).ForEach(each)
	})
	return cp, head, err
}

// setEpoch starts a new epoch (restore).
func (b *boltBackend) setEpoch(epoch string) error {
	return b.update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return errors.New("meta bucket is missing")
		}
		return m.Put(metaEpoch, []byte(epoch))
	})
}
