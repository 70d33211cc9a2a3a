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
// held until unlock, past the rename. A missing file needs no lock.
func lockForRestore(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is in use (stop the server first): %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
