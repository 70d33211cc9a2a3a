//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockForRestore takes the lock bbolt takes on an open database (flock, exclusive), without reading
// the file, so a damaged database can be restored over while a running server is refused. The lock is
// held until unlock, past the rename; held says so. A missing file needs no lock (held is false).
func lockForRestore(path string) (unlock func(), held bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("%s is in use (stop the server first): %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, true, nil
}

// lockRestoreDir makes restores into dir exclusive (flock, exclusive, on the directory): a restore
// removes the copies that restores cut short left in dir, and must never take one that another
// restore is still writing for its own; nor may two restores into a path with no database yet (which
// no database lock serializes) each rename their copy into place.
func lockRestoreDir(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		return nil, fmt.Errorf("another restore is running in %s: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		d.Close()
	}, nil
}
