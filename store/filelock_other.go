//go:build !unix

package store

import (
	"os"
	"time"
)

// lockShared is a no-op here: the file is checked without waiting for a store that holds it.
func lockShared(*os.File, time.Duration) (unlock func(), err error) { return func() {}, nil }

// canSweep is false here: without a lock, a leftover cannot be told from a file being created.
const canSweep = false

func tryLockExclusive(*os.File) (bool, error) { return false, nil }

func openNoFollow(path string) (*os.File, error) { return os.Open(path) }
