package store

import (
	"errors"
	"fmt"

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
// (temporary file, fsync, rename) on every write.
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
