package settingsfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Temporary files.
//
// Save writes the new content to a temporary file beside the configuration file,
// ".<name>.tmp-<digits>", and renames it over the file. A writer killed before the rename (SIGKILL, a
// power cut) leaves its temporary file, a copy of the configuration with its passwords, behind. To
// tell such a file from one a live writer is filling, a writer holds an exclusive flock on its
// temporary file from just after creating it until after the rename; a sweep (RemoveStaleTemps)
// removes only a file it can lock itself, so never one a writer, in this process or another, holds.
// A sweep can lock a writer's file in the instant between its creation and the writer's lock: it
// then removes it, and the writer, which checks after locking that its file is still there, starts
// over with another.

// tempPattern is the os.CreateTemp pattern of the temporary files of the file named base.
func tempPattern(base string) string { return "." + base + ".tmp-*" }

// isTempOf reports whether name is one of os.CreateTemp's names for tempPattern(base): the star
// stands for decimal digits only, so that the temporary files of a configuration file named
// "<base>.tmp-x" are not taken for base's.
func isTempOf(name, base string) bool {
	rest, ok := strings.CutPrefix(name, "."+base+".tmp-")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// createTempAttempts bounds how often createLockedTemp starts over after a sweep took its file.
const createTempAttempts = 5

// createLockedTemp creates a temporary file for base in dir and locks it (see above).
func createLockedTemp(dir, base string) (*os.File, error) {
	for range createTempAttempts {
		tmp, err := os.CreateTemp(dir, tempPattern(base))
		if err != nil {
			return nil, err
		}
		locked, err := tryLock(tmp)
		if err != nil {
			// The file system takes no flock (some network and FUSE ones): a sweep cannot lock
			// either, and removes nothing it could not lock, so the write goes on without one.
			return tmp, nil
		}
		if locked && stillAt(tmp) {
			return tmp, nil
		}
		// A sweep holds it, or held it and removed it: it is the sweep's to remove, and its name may
		// already be another writer's.
		_ = tmp.Close()
	}
	return nil, fmt.Errorf("temporary files in %s were removed as they were created, %d times running", dir, createTempAttempts)
}

// stillAt reports whether f's name still names f.
func stillAt(f *os.File) bool {
	open, err := f.Stat()
	if err != nil {
		return false
	}
	named, err := os.Lstat(f.Name())
	return err == nil && os.SameFile(open, named)
}

// RemoveStaleTemps removes the temporary files that writers killed during a Save left beside the
// configuration file at path (behind its symbolic links), and returns their paths. It leaves the
// temporary files of live writers, and anything that is not a regular file; it is safe to call at
// any time, and a File calls it on its first read. Where file locks are not available it removes
// nothing. A missing directory has nothing to remove.
func RemoveStaleTemps(path string) ([]string, error) {
	if !canLock {
		return nil, nil
	}
	target, err := resolveLinks(path)
	if err != nil {
		return nil, fmt.Errorf("settingsfile: %w", err)
	}
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("settingsfile: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !isTempOf(e.Name(), base) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		ok, err := removeIfStale(p)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, p)
		}
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("settingsfile: stale temporary files: %w", errors.Join(errs...))
	}
	return removed, nil
}

// removeIfStale removes the temporary file at p if no writer holds it.
func removeIfStale(p string) (bool, error) {
	f, err := openNoFollow(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // renamed into place, or removed, meanwhile
	}
	if err != nil {
		if info, lerr := os.Lstat(p); lerr == nil && !info.Mode().IsRegular() {
			return false, nil // a link, a socket, ...: not ours
		}
		return false, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !info.Mode().IsRegular() {
		return false, nil
	}
	locked, err := tryLock(f)
	if err != nil || !locked {
		return false, err
	}
	// Under the lock, and only if the name still names the file locked: a writer that renamed it
	// into place meanwhile made it the configuration file, and its name is gone.
	if !stillAt(f) {
		return false, nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
