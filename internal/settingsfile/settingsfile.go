// Package settingsfile reads and writes the entries of settings-backed namespaces
// (SPEC.md sections 6 and 14) in the server's TOML configuration file.
//
// A settings-backed namespace lives in the table
//
//	[state_store.settings."service/mqtt-bridge"]
//	revision = 3
//
//	[state_store.settings."service/mqtt-bridge".entries."bridge/config"]
//	schema = "keeppeek.preference.v1"
//	owner = "coordinator"
//	revision = 3
//	created_at_ms = 1764451200000
//	updated_at_ms = 1764451260000
//	document = '{"kind":"x"}'
//
// The document is kept as a TOML string holding compact JSON, so any JSON object
// survives TOML unchanged. All integers are TOML integers from 0 to 2^53-1.
//
// This package reads and writes the section as it stands; it does not judge the
// revisions. An operator who edits an entry by hand need not raise them: the
// store (package store) records what it served from the file and, at its next
// start, at a reload (stated's SIGHUP) or before its next write to the
// namespace, serves an entry whose content changed at a new revision, however
// the file numbers it. SaveIf writes only over the section as the caller read
// it, so that such an edit is never overwritten by a write that did not see it.
//
// Save rewrites the whole file: it decodes it into a generic map, replaces the one
// namespace's table and encodes the map again. Every other key, table and array of
// tables keeps its meaning (values, types, date-times), but comments, key order,
// quoting style and layout are not kept: the file comes back in the encoder's
// canonical form. The write is atomic (temporary file in the same directory,
// fsync, rename over the file, fsync of the directory) and keeps the file's
// permission bits (0600 for a new file); the file's owner becomes the writing
// process, as with any rename. A symbolic link at the path is followed, and the
// file it points to is replaced (created, if the link dangles). A file that was
// there once and is gone (removed or moved away) is not created again, nor is one
// that held something once and is empty now written over: see Open.
// The temporary files of writers killed mid-write are removed by a File's first
// read, or by RemoveStaleTemps; a live writer's never are (see temps.go).
//
// A File serialises its own Load, Save and Namespaces calls. It takes no lock on
// the file itself: use one File per path. Save notices a file that changed
// between its read and its rename (another inode, size or modification time), as
// when an editor rewrites it in place, and reads and writes again (SaveIf then
// compares the section again, and refuses to write over an edit of it), so that it
// does not put back a file it read half-written or undo an edit it did not see; an
// edit that lands in the instant between that check and the rename is still lost.
package settingsfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// maxInt is the largest integer the wire contract carries (2^53-1).
const maxInt = 1<<53 - 1

// Names of the tables and keys in the file.
const (
	keyStateStore = "state_store"
	keySettings   = "settings"
	keyRevision   = "revision"
	keyEntries    = "entries"
	keySchema     = "schema"
	keyOwner      = "owner"
	keyCreatedAt  = "created_at_ms"
	keyUpdatedAt  = "updated_at_ms"
	keyDocument   = "document"
)

// newFilePerm is the permission of a configuration file that Save creates.
const newFilePerm fs.FileMode = 0o600

// rename is os.Rename; tests replace it to make the last step of Save fail.
var rename = os.Rename

// beforeRename runs just before Save checks that the file is unchanged and renames its new content
// into place; tests use it to change the file in between.
var beforeRename = func(path string) {}

// saveAttempts bounds how often Save reads the file again because it changed during a write.
const saveAttempts = 5

// ErrNotWritten is wrapped by every error of Save after which the file is as it was before the
// call. The one error that does not wrap it is a failed fsync of the directory after the rename: the
// new content is then in place, though perhaps not durable.
var ErrNotWritten = errors.New("settingsfile: the file was not written")

// ErrGone is wrapped by the error of every call on a File whose file was there when the File last
// read or wrote it and is missing now (removed or moved away).
var ErrGone = errors.New("the file is gone (removed or moved away since it was read): it is not created again; put it back at its path")

// ErrEmptied is wrapped by the error of every call on a File whose file held something when the File
// last read or wrote it and is empty now (nothing but white space): emptied, or caught while an editor
// rewrites it in place. Read as a configuration, it would say nothing at all: no principal, no
// settings entry.
var ErrEmptied = errors.New("the file is empty (emptied since it was read, or being rewritten in place): it is not read as a configuration; put its content back")

// ErrSectionChanged is wrapped, with ErrNotWritten, by the error of SaveIf when the namespace's
// section no longer holds what the caller expected (an edit made since the caller read it).
var ErrSectionChanged = errors.New("the namespace's section changed since it was read")

// errChanged: the file changed between Save's read and its rename.
var errChanged = errors.New("the file changed while it was being rewritten")

// notWritten is an error of Save that left the file as it was; it reads as its cause.
type notWritten struct{ err error }

func (e notWritten) Error() string   { return e.err.Error() }
func (e notWritten) Unwrap() []error { return []error{e.err, ErrNotWritten} }

// Entry is one stored entry of a settings-backed namespace.
type Entry struct {
	Key         string
	Schema      string
	Owner       string
	Revision    uint64
	CreatedAtMs int64
	UpdatedAtMs int64
	Document    []byte // compact JSON of one object
}

// State is a namespace's whole content: its revision and its entries (any order).
type State struct {
	Revision uint64
	Entries  []Entry
}

// File is one configuration file; safe for concurrent use (a mutex serialises Load/Save).
type File struct {
	path string
	mu   sync.Mutex
	// existed: the file was there when this File last read or wrote it. A file missing after
	// that was removed or moved away, and is not created again (see Open).
	existed bool
	// swept: the File's first read removed the temporary files dead writers left (RemoveStaleTemps).
	swept bool
	// held: the file held something (not only white space) when this File last read or wrote it.
	// A file empty after that is refused (ErrEmptied), as a missing one is (ErrGone).
	held bool
}

// Open returns the File at path. It does not touch the file system: a missing
// file reads as empty, and the first Save creates it. Once the File has read the
// file, or written it, a missing file is an error of every call (it wraps
// ErrGone): the configuration was removed or moved away, and a file that Save
// made anew would hold only its settings section, on which stated would start
// with its built-in defaults (a fresh data directory, the dev principal that
// needs no credentials) instead of refusing to start without its configuration.
// So is a file that held something then and is empty (or white space) now
// (ErrEmptied): emptied, or caught while an editor rewrites it in place; read, it
// would be a configuration without principals or settings entries. A file put
// back at the path is read and written again.
func Open(path string) *File {
	return &File{path: path}
}

// Path returns the path given to Open.
func (f *File) Path() string {
	return f.path
}

// Load reads the namespace's section. A missing file or a missing section is an empty State with revision 0.
// A section that is malformed (wrong types, a document that is not a JSON object, duplicate keys) is an error.
//
// A section holds only revision and entries; each entry needs all of schema,
// owner, revision, created_at_ms, updated_at_ms and document, and nothing else.
// An entry's revision is at least 1 and at most the section's revision. Entries
// come back sorted by key, each document in compact form.
func (f *File) Load(namespace string) (State, error) {
	if err := checkNamespace(namespace); err != nil {
		return State{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()

	snap, err := f.read()
	if err != nil {
		return State{}, err
	}
	if _, err := settingsTable(snap.doc); err != nil {
		return State{}, err
	}
	s, err := sectionState(snap.doc, namespace)
	if err != nil {
		return State{}, fmt.Errorf("settingsfile: %s: namespace %q: %w", f.path, namespace, err)
	}
	return s, nil
}

// Save replaces the namespace's section with s, atomically (temp file + fsync + rename + dir fsync),
// keeping every other part of the file. On error the file is unchanged.
//
// s must satisfy what Load checks: unique non-empty keys, non-empty schema and
// owner, entry revisions from 1 to s.Revision, integers up to 2^53-1 and
// documents that are JSON objects (stored compacted). A file that does not parse
// is not overwritten. The one error after which the file may already hold the
// new content is a failed fsync of the directory after the rename; the error
// says so, and it is the one error that does not wrap ErrNotWritten.
//
// A file that changes between the read and the rename is read again and the
// write made again, up to a few times; a file that keeps changing is an error.
func (f *File) Save(namespace string, s State) error {
	return f.SaveIf(namespace, s, nil)
}

// SaveIf is Save, made only if the namespace's section still holds expect (as Load returns it;
// nil: whatever it holds): the file is read, its section compared and the new content renamed into
// place, with Save's check that the file did not change in between. A section that no longer holds
// expect (an edit by hand since the caller's Load) is left as it is, and the error wraps
// ErrSectionChanged and ErrNotWritten; so is a section that no longer loads.
func (f *File) SaveIf(namespace string, s State, expect *State) error {
	err := f.save(namespace, s, expect)
	if err != nil && !errors.Is(err, errRenamed) {
		err = notWritten{err}
	}
	return err
}

func (f *File) save(namespace string, s State, expect *State) error {
	if err := checkNamespace(namespace); err != nil {
		return err
	}
	section, err := encodeSection(s)
	if err != nil {
		return fmt.Errorf("settingsfile: namespace %q: %w", namespace, err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()

	for attempt := 1; ; attempt++ {
		err := f.saveOnce(namespace, section, expect)
		if !errors.Is(err, errChanged) {
			return err
		}
		if attempt == saveAttempts {
			return fmt.Errorf("settingsfile: %s: %w, %d times running: not written", f.path, errChanged, attempt)
		}
	}
}

// saveOnce reads the file, replaces the namespace's section and writes the file, unless it changed
// since the read (errChanged), or its section does not hold expect (ErrSectionChanged). The caller
// holds f.mu.
func (f *File) saveOnce(namespace string, section map[string]any, expect *State) error {
	snap, err := f.read()
	if err != nil {
		return err
	}
	if expect != nil {
		cur, err := sectionState(snap.doc, namespace)
		if err != nil {
			return fmt.Errorf("settingsfile: %s: namespace %q: %w (%v)", f.path, namespace, ErrSectionChanged, err)
		}
		if !sameState(cur, *expect) {
			return fmt.Errorf("settingsfile: %s: namespace %q: %w", f.path, namespace, ErrSectionChanged)
		}
	}
	doc := snap.doc
	if doc == nil {
		doc = map[string]any{}
	}
	store, err := subTable(doc, keyStateStore, keyStateStore)
	if err != nil {
		return fmt.Errorf("settingsfile: %s: %w", f.path, err)
	}
	settings, err := subTable(store, keySettings, keyStateStore+"."+keySettings)
	if err != nil {
		return fmt.Errorf("settingsfile: %s: %w", f.path, err)
	}
	settings[namespace] = section

	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.Indent = ""
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("settingsfile: %s: encode: %w", f.path, err)
	}
	// Never write a file that would not load again.
	var check map[string]any
	if _, err := toml.Decode(buf.String(), &check); err != nil {
		return fmt.Errorf("settingsfile: %s: encoded file does not parse: %w", f.path, err)
	}
	err = writeAtomic(snap.target, buf.Bytes(), snap.perm, func() error {
		beforeRename(snap.target)
		if !snap.unchanged() {
			return errChanged
		}
		return nil
	})
	if err == nil || errors.Is(err, errRenamed) {
		f.existed, f.held = true, true
	}
	return err
}

// sectionState is the namespace's section of doc, as Load returns it.
func sectionState(doc map[string]any, namespace string) (State, error) {
	settings, err := settingsTable(doc)
	if err != nil {
		return State{}, err
	}
	raw, ok := settings[namespace]
	if !ok {
		return State{}, nil
	}
	return decodeSection(raw)
}

// sameState reports whether a and b hold the same revision and entries, in the same order.
func sameState(a, b State) bool {
	if a.Revision != b.Revision || len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		x, y := a.Entries[i], b.Entries[i]
		if x.Key != y.Key || x.Schema != y.Schema || x.Owner != y.Owner || x.Revision != y.Revision ||
			x.CreatedAtMs != y.CreatedAtMs || x.UpdatedAtMs != y.UpdatedAtMs || !bytes.Equal(x.Document, y.Document) {
			return false
		}
	}
	return true
}

// Namespaces lists the namespaces that have a section in the file, sorted.
func (f *File) Namespaces() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	snap, err := f.read()
	if err != nil {
		return nil, err
	}
	settings, err := settingsTable(snap.doc)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(settings))
	for name, v := range settings {
		if _, ok := v.(map[string]any); !ok {
			return nil, fmt.Errorf("settingsfile: %s: %s.%s.%q is a %s, not a table",
				f.path, keyStateStore, keySettings, name, TypeName(v))
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// snapshot is the file as read: its decoded document (nil for a missing or
// empty file), the path to write (the file behind a symbolic link), the
// permission bits to keep, and what the file was when read (nil if missing).
type snapshot struct {
	doc    map[string]any
	target string
	perm   fs.FileMode
	info   fs.FileInfo
}

// unchanged reports whether the file is still the one read: the same inode, size
// and modification time, or still missing.
func (s snapshot) unchanged() bool {
	now, err := os.Stat(s.target)
	if s.info == nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	return err == nil && os.SameFile(s.info, now) && now.Size() == s.info.Size() && now.ModTime().Equal(s.info.ModTime())
}

// read decodes the file. The caller holds f.mu.
func (f *File) read() (snapshot, error) {
	if !f.swept {
		f.swept = true
		// Best effort: a temporary file that cannot be removed changes nothing read or written.
		_, _ = RemoveStaleTemps(f.path)
	}
	target, err := resolveLinks(f.path)
	if err != nil {
		return snapshot{}, fmt.Errorf("settingsfile: %w", err)
	}
	// Not a directory, and not a named pipe or a device, whose open could wait for ever.
	if info, err := os.Stat(target); err == nil && !info.Mode().IsRegular() {
		return snapshot{}, fmt.Errorf("settingsfile: %s is not a regular file", target)
	}
	file, err := os.Open(target)
	if errors.Is(err, fs.ErrNotExist) {
		if f.existed {
			return snapshot{}, fmt.Errorf("settingsfile: %s: %w", f.path, ErrGone)
		}
		return snapshot{target: target, perm: newFilePerm}, nil
	}
	if err != nil {
		return snapshot{}, fmt.Errorf("settingsfile: %w", err)
	}
	defer file.Close()
	// The file's state is taken before its content: a change while it is read shows as a change.
	info, err := file.Stat()
	if err != nil {
		return snapshot{}, fmt.Errorf("settingsfile: %w", err)
	}
	if !info.Mode().IsRegular() {
		return snapshot{}, fmt.Errorf("settingsfile: %s is not a regular file", target)
	}
	data, err := io.ReadAll(file)
	if err != nil {
		return snapshot{}, fmt.Errorf("settingsfile: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if f.held {
			return snapshot{}, fmt.Errorf("settingsfile: %s: %w", f.path, ErrEmptied)
		}
	} else {
		f.held = true
	}
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return snapshot{}, fmt.Errorf("settingsfile: %s: %w", f.path, err)
	}
	f.existed = true
	return snapshot{doc: doc, target: target, perm: info.Mode().Perm(), info: info}, nil
}

// maxLinks bounds a chain of symbolic links, as the kernel does.
const maxLinks = 40

// resolveLinks returns the path of the file behind path, following symbolic
// links. That file need not exist: a dangling link names the file that Save
// creates, so that the link stays in place.
func resolveLinks(path string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		return resolved, nil
	}
	// Something on the way is missing (or EvalSymlinks failed otherwise): follow the links of the
	// last element one at a time, until one is missing or is not a link.
	for range maxLinks {
		info, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		dest, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(dest) {
			// Relative to the directory the link is in, as the kernel reads it.
			dir, err := filepath.EvalSymlinks(filepath.Dir(path))
			if err != nil {
				return "", err
			}
			dest = filepath.Join(dir, dest)
		}
		path = dest
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", path)
}

// settingsTable returns the state_store.settings table of doc, or nil when absent.
func settingsTable(doc map[string]any) (map[string]any, error) {
	store, err := optTable(doc, keyStateStore, keyStateStore)
	if err != nil || store == nil {
		return nil, err
	}
	return optTable(store, keySettings, keyStateStore+"."+keySettings)
}

// optTable returns parent[key] as a table, nil when absent, an error when it is something else.
func optTable(parent map[string]any, key, name string) (map[string]any, error) {
	v, ok := parent[key]
	if !ok {
		return nil, nil
	}
	t, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("settingsfile: %s is a %s, not a table", name, TypeName(v))
	}
	return t, nil
}

// subTable returns parent[key] as a table, creating it when absent.
func subTable(parent map[string]any, key, name string) (map[string]any, error) {
	t, err := optTable(parent, key, name)
	if err != nil {
		return nil, err
	}
	if t == nil {
		t = map[string]any{}
		parent[key] = t
	}
	return t, nil
}

func checkNamespace(namespace string) error {
	if namespace == "" {
		return errors.New("settingsfile: empty namespace")
	}
	if !utf8.ValidString(namespace) {
		return fmt.Errorf("settingsfile: namespace %q is not valid UTF-8", namespace)
	}
	return nil
}

// decodeSection turns a namespace's decoded table into a State.
func decodeSection(raw any) (State, error) {
	table, ok := raw.(map[string]any)
	if !ok {
		return State{}, fmt.Errorf("section is a %s, not a table", TypeName(raw))
	}
	var s State
	for k := range table {
		if k != keyRevision && k != keyEntries {
			return State{}, fmt.Errorf("unknown key %q", k)
		}
	}
	if v, ok := table[keyRevision]; ok {
		rev, err := intValue(v, keyRevision)
		if err != nil {
			return State{}, err
		}
		s.Revision = uint64(rev)
	}
	if v, ok := table[keyEntries]; ok {
		entries, ok := v.(map[string]any)
		if !ok {
			return State{}, fmt.Errorf("%s is a %s, not a table of entries", keyEntries, TypeName(v))
		}
		keys := make([]string, 0, len(entries))
		for k := range entries {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		s.Entries = make([]Entry, 0, len(keys))
		for _, k := range keys {
			e, err := decodeEntry(k, entries[k], s.Revision)
			if err != nil {
				return State{}, fmt.Errorf("entry %q: %w", k, err)
			}
			s.Entries = append(s.Entries, e)
		}
	}
	return s, nil
}

func decodeEntry(key string, raw any, nsRevision uint64) (Entry, error) {
	table, ok := raw.(map[string]any)
	if !ok {
		return Entry{}, fmt.Errorf("is a %s, not a table", TypeName(raw))
	}
	if key == "" {
		return Entry{}, errors.New("empty key")
	}
	for k := range table {
		switch k {
		case keySchema, keyOwner, keyRevision, keyCreatedAt, keyUpdatedAt, keyDocument:
		default:
			return Entry{}, fmt.Errorf("unknown key %q", k)
		}
	}
	e := Entry{Key: key}
	var err error
	if e.Schema, err = stringField(table, keySchema); err != nil {
		return Entry{}, err
	}
	if e.Owner, err = stringField(table, keyOwner); err != nil {
		return Entry{}, err
	}
	rev, err := intField(table, keyRevision)
	if err != nil {
		return Entry{}, err
	}
	e.Revision = uint64(rev)
	if e.CreatedAtMs, err = intField(table, keyCreatedAt); err != nil {
		return Entry{}, err
	}
	if e.UpdatedAtMs, err = intField(table, keyUpdatedAt); err != nil {
		return Entry{}, err
	}
	doc, err := stringField(table, keyDocument)
	if err != nil {
		return Entry{}, err
	}
	if e.Document, err = compactObject([]byte(doc)); err != nil {
		return Entry{}, err
	}
	if err := checkRevision(e.Revision, nsRevision); err != nil {
		return Entry{}, err
	}
	return e, nil
}

func stringField(table map[string]any, key string) (string, error) {
	v, ok := table[key]
	if !ok {
		return "", fmt.Errorf("missing %s", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s is a %s, not a string", key, TypeName(v))
	}
	if s == "" {
		return "", fmt.Errorf("empty %s", key)
	}
	return s, nil
}

func intField(table map[string]any, key string) (int64, error) {
	v, ok := table[key]
	if !ok {
		return 0, fmt.Errorf("missing %s", key)
	}
	return intValue(v, key)
}

func intValue(v any, key string) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%s is a %s, not an integer", key, TypeName(v))
	}
	if n < 0 || n > maxInt {
		return 0, fmt.Errorf("%s %d is outside 0 to 2^53-1", key, n)
	}
	return n, nil
}

func checkRevision(entryRev, nsRevision uint64) error {
	if entryRev == 0 {
		return errors.New("revision 0 (an entry's revision is at least 1)")
	}
	if entryRev > nsRevision {
		return fmt.Errorf("revision %d is above the namespace revision %d", entryRev, nsRevision)
	}
	return nil
}

// compactObject checks that doc is one JSON object and returns its compact form.
func compactObject(doc []byte) ([]byte, error) {
	trimmed := bytes.TrimLeft(doc, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(doc) {
		return nil, errors.New("document is not a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, doc); err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeSection validates s and turns it into the table written to the file.
func encodeSection(s State) (map[string]any, error) {
	if s.Revision > maxInt {
		return nil, fmt.Errorf("revision %d is above 2^53-1", s.Revision)
	}
	section := map[string]any{keyRevision: int64(s.Revision)}
	if len(s.Entries) == 0 {
		return section, nil
	}
	entries := make(map[string]any, len(s.Entries))
	for _, e := range s.Entries {
		if e.Key == "" {
			return nil, errors.New("entry with an empty key")
		}
		if _, dup := entries[e.Key]; dup {
			return nil, fmt.Errorf("duplicate entry key %q", e.Key)
		}
		table, err := encodeEntry(e, s.Revision)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", e.Key, err)
		}
		entries[e.Key] = table
	}
	section[keyEntries] = entries
	return section, nil
}

func encodeEntry(e Entry, nsRevision uint64) (map[string]any, error) {
	for _, sv := range []struct{ name, v string }{{"key", e.Key}, {keySchema, e.Schema}, {keyOwner, e.Owner}} {
		if sv.v == "" {
			return nil, fmt.Errorf("empty %s", sv.name)
		}
		if !utf8.ValidString(sv.v) {
			return nil, fmt.Errorf("%s is not valid UTF-8", sv.name)
		}
	}
	if e.Revision > maxInt {
		return nil, fmt.Errorf("revision %d is above 2^53-1", e.Revision)
	}
	if err := checkRevision(e.Revision, nsRevision); err != nil {
		return nil, err
	}
	for _, iv := range []struct {
		name string
		v    int64
	}{{keyCreatedAt, e.CreatedAtMs}, {keyUpdatedAt, e.UpdatedAtMs}} {
		if iv.v < 0 || iv.v > maxInt {
			return nil, fmt.Errorf("%s %d is outside 0 to 2^53-1", iv.name, iv.v)
		}
	}
	doc, err := compactObject(e.Document)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(doc) {
		return nil, errors.New("document is not valid UTF-8")
	}
	return map[string]any{
		keySchema:    e.Schema,
		keyOwner:     e.Owner,
		keyRevision:  int64(e.Revision),
		keyCreatedAt: e.CreatedAtMs,
		keyUpdatedAt: e.UpdatedAtMs,
		keyDocument:  string(doc),
	}, nil
}

// errRenamed marks the error of a Save whose new content was renamed into place.
var errRenamed = errors.New("renamed into place")

// writeAtomic replaces path with data: a temporary file in the same directory is
// created and locked (see temps.go), written, given perm, fsynced and, if ready
// (called last) allows it, renamed over path, then the directory is fsynced.
// Until the rename, path is untouched; the temporary file is removed on every
// failure (and left, for a later sweep, only by a writer that dies).
func writeAtomic(path string, data []byte, perm fs.FileMode, ready func() error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := createLockedTemp(dir, base)
	if err != nil {
		return fmt.Errorf("settingsfile: create temporary file: %w", err)
	}
	tmpName := tmp.Name()
	// The file stays open, and so locked, until it is renamed into place or removed: a sweep of
	// stale temporary files (RemoveStaleTemps) must not take it for a dead writer's. Once renamed,
	// its old name may be another writer's.
	renamed := false
	defer func() {
		if err != nil && !renamed {
			_ = os.Remove(tmpName)
		}
		_ = tmp.Close()
	}()
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("settingsfile: %w", err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("settingsfile: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("settingsfile: %w", err)
	}
	if err = ready(); err != nil {
		return err
	}
	if err = rename(tmpName, path); err != nil {
		return fmt.Errorf("settingsfile: %w", err)
	}
	renamed = true
	if derr := syncDir(dir); derr != nil {
		// The rename happened: the new content is in place but may not be durable.
		return fmt.Errorf("settingsfile: %s %w but fsync of its directory failed: %w", path, errRenamed, derr)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	return errors.Join(serr, cerr)
}

// TypeName names a decoded TOML value's kind (string, integer, table, ...) for error messages.
func TypeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case map[string]any:
		return "table"
	case []map[string]any:
		return "array of tables"
	case []any:
		return "array"
	default:
		t := fmt.Sprintf("%T", v)
		if strings.HasPrefix(t, "time.") {
			return "date-time"
		}
		return t
	}
}
