//go:build !unix

package store

import (
	"os"
	"time"
)

// lockShared is a no-op here: the file is checked without waiting for a store that holds it.
func lockShared(*os.File, time.Duration) (unlock func(), err error) { return func() {}, nil }
