package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/keeppeek/coordination/store/wire"
)

// SettingsFilePrincipal is the principal of the audit records of changes the store found in a
// settings file: at Open, and while it runs (ReloadSettings, or a write that found its namespace's file
// edited). It is the file's, not any principal's, so it is not a valid principal id (SPEC section 1)
// and no principal can be mistaken for it. The entries keep the owner the file gives them.
const SettingsFilePrincipal = "(settings file)"

// SettingsChange is one change the store found in a settings file and now serves: a PUT of Key at
// Revision (an entry edited or added in the file) or a DELETE (an entry removed from it).
type SettingsChange struct {
	Namespace string
	Key       string
	Kind      wire.UpdateKind
	Revision  uint64
}

// ReloadSettings reads the file of every settings-backed namespace and serves what changed in it
// since the store last read or wrote it, as stated does on SIGHUP. It is a mutation like any other:
// it runs in the committer, compares each file with what the store serves from it by the rules of
// planSettings (an entry whose content changed, or a key added, is a put at a new revision; a key
// removed is a delete, at a new revision; an unchanged entry keeps its revision), commits the new
// revisions, the database's record of what the store serves and one audit record per change
// (principal SettingsFilePrincipal) in one transaction, and then sends watchers each change as an
// ordinary update, in revision order. It returns the changes, in namespace and revision order.
//
// The files are not rewritten: the next write to a namespace puts the new revisions in its file, and
// until then a restart finds them in the database (the entries' content is what the file holds). A
// file that does not load or holds an entry that would not be served (TOML that does not parse, an
// entry that fails its schema, a document, an entry count or a total over a bound) fails the whole
// reload with STORAGE and the reason, and changes nothing. A store killed during a reload has
// committed all of it or nothing; a reload not committed is found again at the next Open.
//
// The store does not need ReloadSettings to keep an edit: a write to a settings-backed namespace
// loads its file first in the same way, so that its expected_revision is checked against what the
// file holds and the edit is served, not overwritten (see SettingsBackend).
func (s *Store) ReloadSettings(ctx context.Context) ([]SettingsChange, error) {
	if err := s.serving(); err != nil {
		return nil, err
	}
	if len(s.opts.Settings) == 0 {
		return nil, nil
	}
	r := s.submit(ctx, &mutation{kind: mutReload})
	return r.changes, r.err
}

// settingsReload is one settings-backed namespace's file as a batch read it, and what it changes.
type settingsReload struct {
	read     *settingsRead
	plan     settingsPlan
	err      error // the file does not load, or would not be served: nothing of it is staged
	forWrite bool  // a mutation of the batch writes the namespace
	staged   bool
}

// afterSettingsRead runs in the committer once a batch has read the settings files it reloads and
// before it commits; tests use it to stop there.
var afterSettingsRead = func() {}

// readSettingsChanges reads, for a batch, the file of every settings-backed namespace that one of its
// mutations writes, and of every settings-backed namespace when it holds a reload, and plans what
// each changes against what memory serves. It runs in the committer (commitMu held), the only writer
// of memory, so it reads memory without mu. A batch that touches no settings-backed namespace reads
// nothing.
func (s *Store) readSettingsChanges(muts []*mutation) map[string]*settingsReload {
	var out map[string]*settingsReload
	add := func(ns string, forWrite bool) {
		if out == nil {
			out = map[string]*settingsReload{}
		}
		r := out[ns]
		if r == nil {
			r = &settingsReload{}
			out[ns] = r
		}
		r.forWrite = r.forWrite || forWrite
	}
	for _, m := range muts {
		switch {
		case m.kind == mutReload:
			for ns := range s.opts.Settings {
				add(ns, false)
			}
		case m.kind == mutPut || m.kind == mutDelete:
			if _, ok := s.opts.Settings[m.ns]; ok {
				add(m.ns, true)
			}
		}
	}
	for ns, r := range out {
		s.readSettingsFile(ns, r)
	}
	if out != nil {
		afterSettingsRead()
	}
	return out
}

// readSettingsFile reads ns's file into r and plans what it changes against what memory serves.
func (s *Store) readSettingsFile(ns string, r *settingsReload) {
	r.read, r.plan, r.staged = nil, settingsPlan{}, false
	r.read, r.err = s.readSettings(ns, s.opts.Settings[ns])
	if r.err != nil {
		return
	}
	sp := s.spaces[ns]
	served := make(map[string]servedEntry, sp.count())
	sp.ascend(func(e *wire.Entry) bool {
		served[e.Key] = servedEntry{Revision: e.Revision, SHA256: entryDigest(e)}
		return true
	})
	r.plan, r.err = planSettings(ns, r.read.entries, r.read.state.Revision, sp.revision, served, true, false)
}

// stageReloads stages, before the batch's mutations, the changes found in the settings files it read
// (readSettingsChanges), namespace by namespace in name order, each change as a put or delete of the
// settings file's (SettingsFilePrincipal), so that the mutations are checked against what the files
// hold and watchers get the changes before the writes. A namespace whose changes would pass
// max_total_value_bytes or max_namespaces is not staged (its reload fails). When the batch holds a
// reload and one file failed, only the namespaces its writes need are staged: a failed reload changes
// nothing. The changes mark no namespace for a Save: the file already holds them.
func (st *stage) stageReloads(reloads map[string]*settingsReload) {
	st.reloads = reloads
	names := make([]string, 0, len(reloads))
	for ns := range reloads {
		names = append(names, ns)
	}
	slices.Sort(names)
	// The namespaces to stage: each file that loads, has changes and, when one failed in a batch
	// holding a reload, is needed by a write; checked against the bounds together, in name order,
	// again after each one that does not fit (it fails, and may change which are staged).
	var stage []string
	for {
		failed := false
		for _, ns := range names {
			failed = failed || reloads[ns].err != nil
		}
		stage = stage[:0]
		for _, ns := range names {
			if r := reloads[ns]; r.err == nil && len(r.plan.edits) > 0 && (!failed || r.forWrite) {
				stage = append(stage, ns)
			}
		}
		if st.checkReloadBounds(stage, reloads) {
			break
		}
	}
	for _, ns := range names {
		reloads[ns].staged = false
	}
	for _, ns := range stage {
		r := reloads[ns]
		n := st.ns(ns)
		touched := n.touched
		for _, ed := range r.plan.edits {
			st.set(ns, ed.key, st.lookup(ns, ed.key), ed.entry)
			n.revision = ed.revision
			op := stagedOp{kind: changeDelete, ns: ns, key: ed.key, revision: ed.revision, principal: SettingsFilePrincipal}
			if ed.entry != nil {
				op.kind, op.entry, op.json, op.digest = changePut, ed.entry, encodeEntry(ed.entry), documentDigest(ed.entry.Document)
			}
			st.ops = append(st.ops, op)
		}
		n.touched = touched
		r.staged = true
	}
}

// checkReloadBounds reports whether the changes of the namespaces named, staged in that order, keep
// max_total_value_bytes and max_namespaces; if not, it fails the first that does not fit.
func (st *stage) checkReloadBounds(names []string, reloads map[string]*settingsReload) bool {
	b := st.s.Bounds()
	total, liveNS := st.total, st.liveNS
	for _, ns := range names {
		r := reloads[ns]
		n := st.ns(ns)
		var dBytes, dCount int64
		for _, ed := range r.plan.edits {
			if cur := st.lookup(ns, ed.key); cur != nil {
				dBytes -= int64(len(cur.Document))
				dCount--
			}
			if ed.entry != nil {
				dBytes += int64(len(ed.entry.Document))
				dCount++
			}
		}
		switch {
		case n.count == 0 && dCount > 0:
			liveNS++
		case n.count > 0 && n.count+dCount == 0:
			liveNS--
		}
		total += dBytes
		if total > b.MaxTotalValueBytes {
			r.err = wire.Errorf(wire.CodeStorage, "settings namespace %s: served as its file holds it, the store would hold %d document bytes, over max_total_value_bytes %d; nothing changed",
				ns, total, b.MaxTotalValueBytes)
			return false
		}
		if liveNS > b.MaxNamespaces {
			r.err = wire.Errorf(wire.CodeStorage, "settings namespace %s: served as its file holds it, %d namespaces would hold entries, over max_namespaces %d; nothing changed",
				ns, liveNS, b.MaxNamespaces)
			return false
		}
	}
	return true
}

// reloadError is the answer of a write to ns when the batch could not load ns's file, or nil.
func (st *stage) reloadError(ns string) error {
	r := st.reloads[ns]
	if r == nil || r.err == nil {
		return nil
	}
	return settingsFileError(ns, r.err)
}

// settingsFileError is the STORAGE error of a settings file that does not load.
func settingsFileError(ns string, err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return wire.Errorf(wire.CodeStorage, "%v (settings namespace %s: its file does not load as the store would serve it; nothing changed)", err, ns)
}

// stageReload answers a reload mutation: the changes staged from every file the batch read, or the
// error of the first file (in namespace order) that failed.
func (st *stage) stageReload() mutResult {
	names := make([]string, 0, len(st.reloads))
	for ns := range st.reloads {
		names = append(names, ns)
	}
	slices.Sort(names)
	var changes []SettingsChange
	for _, ns := range names {
		r := st.reloads[ns]
		if r.err != nil {
			return mutResult{err: settingsFileError(ns, r.err)}
		}
		if !r.staged {
			continue
		}
		for _, ed := range r.plan.edits {
			kind := wire.UpdatePut
			if ed.entry == nil {
				kind = wire.UpdateDelete
			}
			changes = append(changes, SettingsChange{Namespace: ns, Key: ed.key, Kind: kind, Revision: ed.revision})
		}
	}
	return mutResult{changes: changes}
}

// logReloads logs, once a batch committed, the changes found in settings files that its writes
// brought in (a reload's are its caller's to log), and the files that refused its writes.
func (s *Store) logReloads(reloads map[string]*settingsReload, committed bool) {
	names := make([]string, 0, len(reloads))
	for ns := range reloads {
		names = append(names, ns)
	}
	slices.Sort(names)
	for _, ns := range names {
		r := reloads[ns]
		if !r.forWrite {
			continue
		}
		if r.err != nil {
			s.opts.Logger.Error("a settings namespace's file does not load: its writes are refused, nothing changed", "namespace", ns, "err", r.err)
			continue
		}
		if !r.staged || !committed {
			continue
		}
		for _, ed := range r.plan.edits {
			if ed.entry == nil {
				s.opts.Logger.Warn("a settings entry was removed from the file while the store ran: served as deleted before a write to its namespace",
					"namespace", ns, "key", ed.key, "revision", ed.revision)
			} else {
				s.opts.Logger.Warn("a settings entry was changed in the file while the store ran: served at a new revision before a write to its namespace",
					"namespace", ns, "key", ed.key, "file_revision", ed.fileRevision, "revision", ed.revision)
			}
		}
	}
}

// sameSettingsState reports whether two states of a settings-backed namespace hold the same revision
// and entries (key, revision, content).
func sameSettingsState(a, b SettingsState) bool {
	if a.Revision != b.Revision || len(a.Entries) != len(b.Entries) {
		return false
	}
	digests := make(map[string]string, len(a.Entries))
	for i := range a.Entries {
		e := &a.Entries[i]
		digests[e.Key] = entryDigest(e) + "@" + strconv.FormatUint(e.Revision, 10)
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		if d, ok := digests[e.Key]; !ok || d != entryDigest(e)+"@"+strconv.FormatUint(e.Revision, 10) {
			return false
		}
	}
	return true
}

// CheckSettings reports why the next Open, with sb as the SettingsBackend of ns, would not serve the
// store, for a namespace this store does not serve from a settings file (a section added to stated's
// file, which waits for a restart): the file does not load, holds an entry the store would not serve
// (one that fails its schema, or a bound it passes), would take the store past max_total_value_bytes or
// max_namespaces, or the namespace holds entries in the database (a settings-backed namespace's
// entries live in its file only). nil means it would be served as the store stands now; a write to the
// namespace before the restart can still make it fail. A namespace served from a settings file now, or
// a store that is not served, is not checked (nil): ReloadSettings checks the former.
func (s *Store) CheckSettings(ns string, sb SettingsBackend) error {
	if _, served := s.opts.Settings[ns]; served || s.serving() != nil {
		return nil
	}
	if !wire.ValidNamespace(ns) {
		return fmt.Errorf("settings namespace %q is not a valid namespace", ns)
	}
	rd, err := s.readSettings(ns, sb)
	if err != nil {
		return err
	}
	var bytes int64
	for _, e := range rd.entries {
		bytes += int64(len(e.Document))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	b := s.Bounds()
	if sp := s.spaces[ns]; sp != nil && sp.count() > 0 {
		return fmt.Errorf("settings namespace %s holds %d entries in the database: a settings-backed namespace's entries live in its file; delete them first",
			ns, sp.count())
	}
	if s.totalBytes+bytes > b.MaxTotalValueBytes {
		return fmt.Errorf("settings namespace %s: its %d document bytes would take the store to %d, over max_total_value_bytes %d",
			ns, bytes, s.totalBytes+bytes, b.MaxTotalValueBytes)
	}
	if len(rd.entries) > 0 && s.liveNamespaces+1 > b.MaxNamespaces {
		return fmt.Errorf("settings namespace %s: with its entries %d namespaces would hold entries, over max_namespaces %d",
			ns, s.liveNamespaces+1, b.MaxNamespaces)
	}
	return nil
}
