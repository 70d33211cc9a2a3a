//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
)

// lockShared takes a shared lock on f, the lock bbolt takes exclusively on an open database, waiting
// up to timeout (0: no bound) while a store holds it. A file read under it is not being written.
func lockShared(f *os.File, timeout time.Duration) (unlock func(), err error) {
	const retry = 50 * time.Millisecond // as bbolt retries its own lock
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, fmt.Errorf("%s is in use by another store: %w", f.Name(), bolterrors.ErrTimeout)
		}
		time.Sleep(retry)
	}
}

// canSweep says whether tryLockExclusive works here: a sweep of creation leftovers removes only what
// it could lock.
const canSweep = true

// tryLockExclusive takes the lock bbolt takes on an open database (flock, exclusive) on f without
// waiting: false, and no error, when another open file description holds it.
func tryLockExclusive(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// openNoFollow opens path for reading without following a symbolic link or waiting on a named pipe.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}
