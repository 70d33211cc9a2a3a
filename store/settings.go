package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/keeppeek/coordination/internal/settingsfile"
	"github.com/keeppeek/coordination/store/wire"
)

// SettingsState is the whole content of a settings-backed namespace.
type SettingsState struct {
	Revision uint64
	Entries  []wire.Entry
}

// SettingsBackend holds the entries of one settings-backed namespace (SPEC section 6): live
// configuration rather than leases. The engine calls Load once at Open and Save, from its committer,
// with the namespace's whole new content before it answers a write; Save must be atomic (all of the new
// state or none of it) and durable when it returns. After a Save that failed, unless its error wraps
// ErrSettingsNotWritten, the engine calls Load to learn whether the new state landed anyway, and puts
// the previous state back (Save) if it did (or if Load fails), or if the database then refuses the
// commit; if that fails too, the store stops serving (a restart serves what the file holds).
//
// The backend's state may change outside the store (a configuration file edited by hand). The store
// learns it at Open only (it reads each backend once; stated's SIGHUP does not reload settings), and
// then gives every entry whose content changed a new revision above the namespace's, as if it had
// been put then, even when its revision in the file was kept or lowered; an entry removed (or gone
// with a namespace no longer declared) is a delete, which advances the namespace's revision; an
// unchanged entry keeps the revision it was served at; revisions never go back. For that the
// database records, with each settings write, the revision and a digest of every entry it served
// (see Store.reconcileSettings for the exact rule).
type SettingsBackend interface {
	Load() (SettingsState, error)
	Save(SettingsState) error
}

// ErrSettingsNotWritten, wrapped by the error of a SettingsBackend's Save, says the stored state is as
// it was before the call: the write is refused (STORAGE) with nothing to put back, even when the state
// cannot be read (a configuration file left unparsable by a hand edit).
var ErrSettingsNotWritten = errors.New("store: the settings were not written")

// TOMLSettings returns the SettingsBackend that keeps namespace ns in the
// `[state_store.settings."<ns>"]` section of the TOML configuration file at path, rewritten atomically
// (temporary file, fsync, rename) on every write. An operator may edit the section while the store is
// stopped without touching any revision: the next Open serves a changed entry at a new revision (see
// SettingsBackend); the file itself is renumbered by the namespace's next write.
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
}

func (t *tomlSettings) Load() (SettingsState, error) {
	st, err := t.file.Load(t.ns)
	if err != nil {
		return SettingsState{}, err
	}
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
	if err := t.file.Save(t.ns, st); err != nil {
		if errors.Is(err, settingsfile.ErrNotWritten) {
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

// reconcileSettings runs at Open, before the store serves: it compares each settings-backed
// namespace's file, as replay put it in memory (fileRevs: the files' own revisions), with what the
// database recorded the store served from it (settingsRecord), gives a new revision to what changed
// outside the store, and records the outcome. A file is the namespace's source of truth for its
// content, the database for its revisions, which never go back and are never given to other content
// (SPEC section 4). With F the namespace revision the database recorded (its floor):
//
//   - an entry at a revision above F was never served, and is served as the file gives it: a write
//     cut short between the file's rename and the database's commit, or an edit by hand that raised
//     its revision (and the namespace's) above every revision served;
//   - an entry whose content (schema, owner, timestamps, document) is what the store last served for
//     its key is served at the revision it was served at, whatever revision the file gives it (an
//     older copy of the file, edited to a lower revision; a file the store did not rewrite);
//   - any other entry is a change made outside the store (its content edited, its revision kept or
//     lowered; a key added by hand at a revision already passed): it is served with the file's
//     content at a new revision above the namespace's, one per entry, in key order, as if put then;
//   - a key the store served that the file no longer holds was deleted by hand: the namespace's
//     revision advances by one for it, unless the file's own revision is above F (the write that
//     removed it was never served).
//
// A namespace the database recorded as settings-backed that is no longer declared (its section
// removed from the file) lost every entry it served: its revision advances by one per entry, as for
// keys removed by hand, unless it was written in the database since.
//
// The file is not rewritten: the database records the revisions given, and the next write to the
// namespace puts them in the file. A namespace the database has no record of (a database of format 3
// or older, or one never settings-backed before) is served as its file gives it. A namespace written
// in the database since its record (not declared settings-backed for a while) has every entry at F or
// below treated as changed. Changes found here have no audit record and no watcher (none is
// registered before Open returns); the store logs a warning for each.
func (s *Store) reconcileSettings(ld *loaded, fileRevs map[string]uint64) error {
	bt := &batch{namespaces: map[string]nsCounter{}, totalBytes: s.dbBytes, settings: map[string]*settingsChange{}}
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
				s.opts.Logger.Warn("a settings namespace's file is ahead of the database: changes made to the file outside the store, or a write cut short by a crash after the file was written, have no audit record",
					"namespace", ns, "file_revision", fileRevs[ns], "recorded_revision", floor)
			}
		}
		rec := ld.settings[ns]
		var served map[string]servedEntry
		if rec != nil && rec.revision == floor {
			served = rec.entries // else written in the database since: nothing served is known
		}
		keys := make([]string, 0, sp.count()+len(served))
		sp.tree.Ascend(func(e *wire.Entry) bool { keys = append(keys, e.Key); return true })
		for key := range served {
			if sp.get(key) == nil && fileRevs[ns] <= floor {
				keys = append(keys, key)
			}
		}
		slices.Sort(keys)
		next := sp.revision
		record := make(map[string]*servedEntry, sp.count())
		for _, key := range keys {
			e := sp.get(key)
			if e != nil && (e.Revision > floor || rec == nil) {
				record[key] = &servedEntry{Revision: e.Revision, SHA256: entryDigest(e)}
				continue // never served, or nothing served is known
			}
			d := ""
			if e != nil {
				d = entryDigest(e)
				if was, known := served[key]; known && was.SHA256 == d {
					e.Revision = was.Revision
					record[key] = &servedEntry{Revision: e.Revision, SHA256: d}
					continue
				}
			}
			// A change: it takes a revision, which a file at the last one (2^53-1) does not have.
			if next >= wire.MaxSafeInteger {
				return fmt.Errorf("settings namespace %s: %s changed in the file outside the store, and no revision is left for it", ns, key)
			}
			next++
			if e == nil {
				s.opts.Logger.Warn("a settings entry was removed from the file outside the store: the namespace's revision advances for it",
					"namespace", ns, "key", key, "revision", next)
				continue
			}
			s.opts.Logger.Warn("a settings entry was changed in the file outside the store: it is served at a new revision",
				"namespace", ns, "key", key, "file_revision", e.Revision, "revision", next)
			e.Revision = next
			record[key] = &servedEntry{Revision: e.Revision, SHA256: d}
		}
		sp.revision = next
		if rec != nil && rec.revision == floor && floor == next && sameRecord(rec.entries, record) {
			continue
		}
		bt.namespaces[ns] = nsCounter{Revision: next}
		bt.settings[ns] = &settingsChange{revision: next, entries: record, replace: true}
	}
	// A namespace no longer settings-backed (its section removed from the file, or no longer
	// declared) lost its entries with the file: each is a delete, as for an entry removed by hand,
	// unless the namespace was written in the database since (its revision then moved past them).
	for ns, rec := range ld.settings {
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
		s.space(ns).revision = next
		bt.namespaces[ns] = nsCounter{Revision: next}
		bt.settings[ns] = &settingsChange{revision: next, entries: map[string]*servedEntry{}, replace: true}
	}
	if len(bt.namespaces) == 0 {
		return nil
	}
	return s.be.commit(bt)
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
