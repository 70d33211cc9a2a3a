package store

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/keeppeek/coordination/internal/settingsfile"
	"github.com/keeppeek/coordination/store/wire"
)

// SettingsState is the whole content of a settings-backed namespace.
type SettingsState struct {
	Revision uint64
	Entries  []wire.Entry
}

// SettingsBackend holds the entries of one settings-backed namespace (SPEC section 6): live
// configuration rather than leases. The engine calls Load at Open, at ReloadSettings and, from its
// committer, before every batch that writes the namespace; then Save, from its committer, with the
// namespace's whole new content before it answers a write. Save must be atomic (all of the new state
// or none of it) and durable when it returns; a backend may refuse a Save over a state changed since
// its last Load (ErrSettingsChanged), and the engine then loads it again and stages the batch again.
// After a Save that failed, unless its error wraps ErrSettingsNotWritten, the engine calls Load to
// learn whether the new state landed anyway, and puts the previous state (as the batch loaded it)
// back (Save) if it did (or if Load fails), or if the database then refuses the commit; if that fails
// too, the store stops serving (a restart serves what the file holds).
//
// The backend's state may change outside the store (a configuration file edited by hand). The store
// learns it at Open, at ReloadSettings (stated's SIGHUP), and before any write to the namespace, so
// that the write is checked against it and never overwrites it. It gives every entry whose content
// changed a new revision above the namespace's, as if it had been put then, even when its revision in
// the file was kept or lowered; an entry removed (or gone with a namespace no longer declared) is a
// delete, which advances the namespace's revision; an unchanged entry keeps the revision it was served
// at; revisions never go back. While the store runs, watchers get each change as an ordinary update
// and each is audited (SettingsFilePrincipal); at Open, nobody watches yet, and the changes are
// audited the same way and logged. For that the database records, with each settings write, the
// revision and a digest of every entry it served (see planSettings for the exact rules). A state that
// does not load, or holds an entry the store would not serve, is refused with the reason: a reload
// then changes nothing, and a write to the namespace answers STORAGE, changing nothing, until it is
// put right.
type SettingsBackend interface {
	Load() (SettingsState, error)
	Save(SettingsState) error
}

// ErrSettingsNotWritten, wrapped by the error of a SettingsBackend's Save, says the stored state is as
// it was before the call: the write is refused (STORAGE) with nothing to put back, even when the state
// cannot be read (a configuration file left unparsable by a hand edit).
var ErrSettingsNotWritten = errors.New("store: the settings were not written")

// ErrSettingsChanged, wrapped with ErrSettingsNotWritten by the error of a SettingsBackend's Save, says
// the stored state changed since the backend's last Load (an edit by hand in between): the Save was
// not made, so as not to overwrite it. The engine then loads the state again and retries the write
// against it.
var ErrSettingsChanged = errors.New("store: the settings changed since they were read")

// TOMLSettings returns the SettingsBackend that keeps namespace ns in the
// `[state_store.settings."<ns>"]` section of the TOML configuration file at path, rewritten atomically
// (temporary file, fsync, rename) on every write, and only over the section as the store last read it
// (an edit made since is read first, never overwritten). An operator may edit the section, while the
// store runs or not, without touching any revision: the next Open, ReloadSettings or write to the
// namespace serves a changed entry at a new revision (see SettingsBackend); the file itself is
// renumbered by the namespace's next write.
func TOMLSettings(path, ns string) SettingsBackend {
	return &tomlSettings{file: settingsfile.Open(path), ns: ns}
}

// TOMLSettingsFile is TOMLSettings over a shared settingsfile.File, for several namespaces of one file.
func tomlSettingsFile(f *settingsfile.File, ns string) SettingsBackend {
	return &tomlSettings{file: f, ns: ns}
}

type tomlSettings struct {
	file *settingsfile.File
	ns   string
	mu   sync.Mutex
	// loaded is the section as the last Load read it, until the next Save: that Save writes only
	// over it (settingsfile's SaveIf), so that an edit made since the store read the file is never
	// overwritten.
	loaded *settingsfile.State
}

func (t *tomlSettings) Load() (SettingsState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loaded = nil
	st, err := t.file.Load(t.ns)
	if err != nil {
		return SettingsState{}, err
	}
	t.loaded = &st
	out := SettingsState{Revision: st.Revision, Entries: make([]wire.Entry, 0, len(st.Entries))}
	for _, e := range st.Entries {
		out.Entries = append(out.Entries, wire.Entry{
			Namespace: t.ns, Key: e.Key, Schema: e.Schema, Owner: e.Owner, Revision: e.Revision,
			CreatedAtMs: e.CreatedAtMs, UpdatedAtMs: e.UpdatedAtMs, Document: e.Document,
		})
	}
	return out, nil
}

func (t *tomlSettings) Save(s SettingsState) error {
	st := settingsfile.State{Revision: s.Revision, Entries: make([]settingsfile.Entry, 0, len(s.Entries))}
	for _, e := range s.Entries {
		st.Entries = append(st.Entries, settingsfile.Entry{
			Key: e.Key, Schema: e.Schema, Owner: e.Owner, Revision: e.Revision,
			CreatedAtMs: e.CreatedAtMs, UpdatedAtMs: e.UpdatedAtMs, Document: e.Document,
		})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	expect := t.loaded
	t.loaded = nil // what the file holds next is this Save's (or, after an error, unknown)
	if err := t.file.SaveIf(t.ns, st, expect); err != nil {
		switch {
		case errors.Is(err, settingsfile.ErrSectionChanged):
			return fmt.Errorf("%w: %w: %w", ErrSettingsNotWritten, ErrSettingsChanged, err)
		case errors.Is(err, settingsfile.ErrNotWritten):
			return fmt.Errorf("%w: %w", ErrSettingsNotWritten, err)
		}
		return err
	}
	return nil
}

// TOMLSettingsNamespaces returns a SettingsBackend for each namespace with a section in the TOML file
// at path, sharing one file handle; pass the result as Options.Settings.
func TOMLSettingsNamespaces(path string) (map[string]SettingsBackend, error) {
	f := settingsfile.Open(path)
	names, err := f.Namespaces()
	if err != nil {
		return nil, err
	}
	out := make(map[string]SettingsBackend, len(names))
	for _, ns := range names {
		out[ns] = tomlSettingsFile(f, ns)
	}
	return out, nil
}

// entryDigest is the SHA-256, in hex, of what a settings entry holds besides its key and revision:
// schema, owner, timestamps and document (each field length-prefixed). Open compares it with the
// digest recorded when the store served the entry, to tell an entry changed in the file from one
// the store wrote (see reconcileSettings).
func entryDigest(e *wire.Entry) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range [][]byte{[]byte(e.Schema), []byte(e.Owner), strconv.AppendInt(nil, e.CreatedAtMs, 10),
		strconv.AppendInt(nil, e.UpdatedAtMs, 10), e.Document} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// settingsEdit is one change found in a settings file: key's entry as the file gives it (nil: the
// key was removed from the file), served from now on at revision.
type settingsEdit struct {
	key          string
	entry        *wire.Entry // nil: removed
	revision     uint64
	fileRevision uint64 // the revision the file gives the entry (0: removed)
}

// settingsPlan is what a settings file changes in its namespace (see planSettings).
type settingsPlan struct {
	revision uint64         // the namespace's revision once the edits are served
	edits    []settingsEdit // the changes, in revision order
	// found are the entries served at the revisions the file gives them, above every one served (at
	// Open only: a write cut short, or an edit by hand that raised the revisions), in revision order.
	found  []settingsEdit
	record map[string]*servedEntry // what the store serves from the file once they are
}

// planSettings compares a settings-backed namespace's file with what the store served from it, and
// says what to serve: the rules of reconcileSettings (at Open) and of a reload (ReloadSettings, and
// every write to a settings-backed namespace, while the store runs). A file is the namespace's source
// of truth for its content, the database for its revisions, which never go back and are never given
// to other content (SPEC section 4).
//
// file is the file's entries, checked (readSettings), in key order; planSettings sets each one's
// Revision to the revision it is to be served at. fileRev is the file's own revision, floor (F) the
// namespace revision the store served last, served what it served at floor (the revision and digest
// of each entry) and known whether that is known at all. With atOpen, the file may hold a write of
// the store cut short by a crash between the file's rename and the database's commit, and the
// namespace starts at the file's revision if it is above F; while the store runs that cannot be (a
// write whose file cannot be put back stops the store), and the namespace starts at F. The rules:
//
//   - an entry whose content (schema, owner, timestamps, document) is what the store last served for
//     its key is served at the revision it was served at, whatever revision the file gives it (the
//     same content is never served at two revisions);
//   - else, at Open, an entry at a revision above F was never served, and is served as the file gives
//     it: a write cut short, or an edit by hand that raised its revision (and the namespace's) above
//     every revision served; so is every entry when nothing served is known (known false: a database
//     just migrated from format 3 or older); a namespace never settings-backed before is known to
//     have served nothing from its file, but every revision up to F (database writes), so its
//     entries at F or below are changes, as below;
//   - any other entry is a change made outside the store (its content edited, its revision kept or
//     lowered; a key added by hand; while the store runs, an edit that raised the revision too): it
//     is served with the file's content at a new revision above the namespace's, one per entry, in
//     key order, as if put then;
//   - a key the store served that the file no longer holds was deleted by hand: a delete, which takes
//     a new revision of its own, in the same key order; at Open, unless the file's own revision is
//     above F (the write that removed it was never served).
//
// A plan that would need a revision past 2^53-1 is an error; so is, while the store runs, one whose
// puts leave the namespace more entries than the revisions left up to 2^53-1 can remove (revisionRoom,
// as for a client's put).
func planSettings(ns string, file []*wire.Entry, fileRev, floor uint64, served map[string]servedEntry, known, atOpen bool) (settingsPlan, error) {
	inFile := make(map[string]*wire.Entry, len(file))
	keys := make([]string, 0, len(file)+len(served))
	for _, e := range file {
		inFile[e.Key] = e
		keys = append(keys, e.Key)
	}
	for key := range served {
		if inFile[key] == nil && (!atOpen || fileRev <= floor) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	next := floor
	if atOpen {
		next = max(floor, fileRev)
	}
	plan := settingsPlan{record: make(map[string]*servedEntry, len(file))}
	for _, key := range keys {
		e := inFile[key]
		d := ""
		if e != nil {
			d = entryDigest(e)
			if was, ok := served[key]; ok && was.SHA256 == d {
				e.Revision = was.Revision
				plan.record[key] = &servedEntry{Revision: e.Revision, SHA256: d}
				continue
			}
			if atOpen && (e.Revision > floor || !known) {
				plan.record[key] = &servedEntry{Revision: e.Revision, SHA256: d}
				if known {
					plan.found = append(plan.found, settingsEdit{key: key, entry: e, revision: e.Revision, fileRevision: e.Revision})
				}
				continue // never served, or nothing served is known
			}
		}
		// A change: it takes a revision, which a namespace at the last one (2^53-1) does not have.
		if next >= wire.MaxSafeInteger {
			return settingsPlan{}, fmt.Errorf("settings namespace %s: %s changed in the file outside the store, and no revision is left for it", ns, key)
		}
		next++
		edit := settingsEdit{key: key, entry: e, revision: next}
		if e != nil {
			edit.fileRevision = e.Revision
			e.Revision = next
			plan.record[key] = &servedEntry{Revision: next, SHA256: d}
		}
		plan.edits = append(plan.edits, edit)
	}
	plan.revision = next
	slices.SortStableFunc(plan.found, func(a, b settingsEdit) int { return cmp.Compare(a.revision, b.revision) })
	// While the store runs, the changes are puts and deletes like a client's, and held to the rule a
	// put is (revisionRoom): once they are served, every entry can still be removed, each delete at a
	// revision up to 2^53-1. Deletes keep revision + entries as it was; a put raises it.
	if !atOpen && !revisionRoom(next, int64(len(file))) && slices.ContainsFunc(plan.edits, func(ed settingsEdit) bool { return ed.entry != nil }) {
		return settingsPlan{}, fmt.Errorf("settings namespace %s: served as its file holds it, it would be at revision %d with %d entries: the revisions left up to 2^53-1 are kept for their removal",
			ns, next, len(file))
	}
	return plan, nil
}

// reconcileSettings runs at Open, before the store serves: it compares each settings-backed
// namespace's file, as replay put it in memory (fileRevs: the files' own revisions), with what the
// database recorded the store served from it (settingsRecord), gives a new revision to what changed
// outside the store (planSettings, with F the namespace revision the database recorded, its floor),
// and records the outcome.
//
// A namespace the database recorded as settings-backed that is no longer declared (its section
// removed from the file) lost every entry it served: its revision advances by one per entry, as for
// keys removed by hand, unless it was written in the database since.
//
// The file is not rewritten: the database records the revisions given, and the next write to the
// namespace puts them in the file. A namespace written in the database since its record (not
// declared settings-backed for a while) has every entry at F or below treated as changed. Changes
// found here reach no watcher (none is registered before Open returns); each is audited, as a reload's
// (principal SettingsFilePrincipal), in the transaction that records it, and logged as a warning.
func (s *Store) reconcileSettings(ld *loaded, fileRevs map[string]uint64) error {
	bt := &batch{namespaces: map[string]nsCounter{}, totalBytes: s.dbBytes, settings: map[string]*settingsChange{}}
	head, now := s.audit, s.nowMs()
	audit := func(kind changeKind, ns, key string, rev uint64, doc []byte) {
		rec := auditRecord{AtMs: now, Principal: SettingsFilePrincipal, Op: kind.String(), Namespace: ns, Key: key, Revision: rev}
		if kind == changePut {
			rec.DocumentSHA256 = documentDigest(doc)
		}
		var r auditRecord
		r, head = head.chain(rec)
		bt.audit = append(bt.audit, r)
	}
	names := make([]string, 0, len(s.opts.Settings))
	for ns := range s.opts.Settings {
		names = append(names, ns)
	}
	slices.Sort(names)
	for _, ns := range names {
		sp := s.spaces[ns]
		var floor uint64
		if ls := ld.spaces[ns]; ls != nil {
			floor = ls.revision
			if fileRevs[ns] > floor {
				s.opts.Logger.Warn("a settings namespace's file is ahead of the database: changes made to the file outside the store, or a write cut short by a crash after the file was written, are audited as the settings file's",
					"namespace", ns, "file_revision", fileRevs[ns], "recorded_revision", floor)
			}
		}
		rec := ld.settings[ns]
		var served map[string]servedEntry
		if rec != nil && rec.revision == floor {
			served = rec.entries // else written in the database since: nothing served is known
		}
		file := make([]*wire.Entry, 0, sp.count())
		sp.ascend(func(e *wire.Entry) bool { file = append(file, e); return true })
		// Without a record, a namespace was never served from its file, unless the database was
		// just migrated from a format that kept none: then nothing served is known.
		plan, err := planSettings(ns, file, fileRevs[ns], floor, served, rec != nil || !ld.unrecorded, true)
		if err != nil {
			return err
		}
		for _, ed := range plan.found {
			s.opts.Logger.Warn("a settings entry in the file was never served: it is served at the revision the file gives it",
				"namespace", ns, "key", ed.key, "revision", ed.revision)
			audit(changePut, ns, ed.key, ed.revision, ed.entry.Document)
		}
		for _, ed := range plan.edits {
			if ed.entry == nil {
				s.opts.Logger.Warn("a settings entry was removed from the file outside the store: the namespace's revision advances for it",
					"namespace", ns, "key", ed.key, "revision", ed.revision)
				audit(changeDelete, ns, ed.key, ed.revision, nil)
			} else {
				s.opts.Logger.Warn("a settings entry was changed in the file outside the store: it is served at a new revision",
					"namespace", ns, "key", ed.key, "file_revision", ed.fileRevision, "revision", ed.revision)
				audit(changePut, ns, ed.key, ed.revision, ed.entry.Document)
			}
		}
		sp.revision = plan.revision
		if rec != nil && rec.revision == floor && floor == plan.revision && sameRecord(rec.entries, plan.record) {
			continue
		}
		bt.namespaces[ns] = nsCounter{Revision: plan.revision}
		bt.settings[ns] = &settingsChange{revision: plan.revision, entries: plan.record, replace: true}
	}
	// A namespace no longer settings-backed (its section removed from the file, or no longer
	// declared) lost its entries with the file: each is a delete, as for an entry removed by hand,
	// unless the namespace was written in the database since (its revision then moved past them).
	for _, ns := range slices.Sorted(maps.Keys(ld.settings)) {
		rec := ld.settings[ns]
		if _, declared := s.opts.Settings[ns]; declared || len(rec.entries) == 0 {
			continue
		}
		ls := ld.spaces[ns]
		if ls == nil || rec.revision != ls.revision {
			continue
		}
		gone := uint64(len(rec.entries))
		if ls.revision > wire.MaxSafeInteger-gone {
			return fmt.Errorf("namespace %s: its %d settings entries are gone with its file, and no revision is left for them", ns, gone)
		}
		next := ls.revision + gone
		s.opts.Logger.Warn("a namespace is no longer settings-backed: its entries are gone with the file, and its revision advances for them",
			"namespace", ns, "entries", gone, "revision", next)
		for i, key := range slices.Sorted(maps.Keys(rec.entries)) {
			audit(changeDelete, ns, key, ls.revision+1+uint64(i), nil)
		}
		s.space(ns).revision = next
		bt.namespaces[ns] = nsCounter{Revision: next}
		bt.settings[ns] = &settingsChange{revision: next, entries: map[string]*servedEntry{}, replace: true}
	}
	if len(bt.namespaces) == 0 {
		return nil
	}
	if err := s.be.commit(bt); err != nil {
		return err
	}
	s.audit = head
	return nil
}

// sameRecord reports whether the database's record of a namespace's entries is want.
func sameRecord(have map[string]servedEntry, want map[string]*servedEntry) bool {
	if len(have) != len(want) {
		return false
	}
	for k, w := range want {
		if h, ok := have[k]; !ok || h != *w {
			return false
		}
	}
	return true
}
