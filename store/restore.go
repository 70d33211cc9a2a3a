package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/keeppeek/coordination/store/schema"
)

// Restore replaces the database at path with the backup read from r, offline: the server must be
// stopped (Restore refuses while another process holds the database). It writes the backup to a
// temporary file beside path, validates it exactly as Open would (format, identifiers, schemas,
// counts and bytes within opts.Bounds, revisions, byte counters, and with them the entries of the
// settings-backed namespaces of opts.Settings, read from their files), starts a new epoch in it, and only
// then puts it at path (a rename), so entries, namespace revisions and byte counters come back together or
// not at all. It returns the new epoch. A copy left by an earlier restore that was cut short is removed.
// Restores into one directory are exclusive: a second one started meanwhile is refused.
func Restore(path string, r io.Reader, opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	unlockDir, err := lockRestoreDir(dir)
	if err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	defer unlockDir()
	unlock, held, err := lockForRestore(path)
	if err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	defer unlock()
	// A restore cut short (killed, or the machine stopped) leaves its copy of the backup behind, as large
	// as a database: restores into dir are exclusive (its lock), so any such copy is a leftover.
	if left, err := filepath.Glob(filepath.Join(dir, restoreTempPattern)); err == nil {
		for _, name := range left {
			_ = os.Remove(name)
		}
	}
	tmp, err := os.CreateTemp(dir, restoreTempPattern)
	if err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // no-op after a rename; after a link, the copy's second name
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return "", fmt.Errorf("restore: copy backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	epoch, err := validateBackup(tmpName, opts)
	if err != nil {
		return "", fmt.Errorf("restore: the backup is not valid, nothing was changed: %w", err)
	}
	if err := syncFile(tmpName); err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	if err := installRestored(tmpName, path, held); err != nil {
		return "", fmt.Errorf("restore: %w", err)
	}
	if err := syncFile(dir); err != nil {
		return "", fmt.Errorf("restore: sync %s: %w", dir, err)
	}
	return epoch, nil
}

// installRestored puts the validated copy tmp at path. held says the restore holds the lock of the
// database at path (taken before the copy), so no store has it open: it is renamed over. A path that
// had no database when the restore began may have one now: a store started meanwhile created it, and
// may be serving it, and a rename over it would leave that store writing to a file no longer at path,
// every write it acknowledged gone at the next start. So the copy is linked into place only if path is
// still free; otherwise that database's lock is taken first, and a store holding it refuses the restore.
func installRestored(tmp, path string, held bool) error {
	if !held {
		err := os.Link(tmp, path)
		switch {
		case err == nil:
			return nil // the copy's own name is removed by Restore
		case errors.Is(err, os.ErrExist):
			unlock, _, err := lockForRestore(path)
			if err != nil {
				return err
			}
			defer unlock()
		case !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, os.ErrPermission):
			return err
		}
		// A file system without hard links: the rename below, which cannot tell a database created
		// meanwhile from none.
	}
	return os.Rename(tmp, path)
}

// restoreTempPattern names the copy of a backup that Restore validates beside the database.
const restoreTempPattern = ".restore-*.db"

func validateBackup(file string, opts Options) (string, error) {
	reg, err := schema.New()
	if err != nil {
		return "", err
	}
	b, err := openBolt(file, opts.OpenTimeout, opts.AuditRetention, false)
	if err != nil {
		return "", err
	}
	defer b.close()
	ld, err := b.load(&loadRules{bounds: opts.Bounds, schemas: reg, settings: opts.Settings})
	if err != nil {
		return "", err
	}
	// With the settings-backed namespaces, as Open replays them: their entries count against the same
	// bounds as the backup's, and a backup that passes alone may not with them.
	v := &Store{opts: opts, schemas: reg, spaces: map[string]*space{}}
	if _, err := v.replay(ld); err != nil {
		return "", err
	}
	epoch := randomHex(8)
	if err := b.setEpoch(epoch); err != nil {
		return "", err
	}
	return epoch, nil
}

func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
