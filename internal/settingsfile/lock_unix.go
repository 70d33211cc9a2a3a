//go:build unix

package settingsfile

import (
	"errors"
	"os"
	"syscall"
)

// canLock says whether tryLock works here: a sweep removes only what it could lock.
const canLock = true

// tryLock takes an exclusive flock on f without waiting; false (and no error) when another open file
// description holds it. flock locks belong to the open file description, so two opens of the same
// file conflict even within one process, and the lock goes with the last close (or the process's end).
func tryLock(f *os.File) (bool, error) {
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
