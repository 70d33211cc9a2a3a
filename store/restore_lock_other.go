//go:build !unix

package store

import (
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// lockForRestore checks that no server holds the database: a read-only open waits on its lock. (On
// these systems the check cannot be held past the rename, nor tell a damaged file from a locked one.)
func lockForRestore(path string) (unlock func(), held bool, err error) {
	if _, err := os.Stat(path); err != nil {
		return func() {}, false, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if err != nil {
		return nil, false, fmt.Errorf("%s is in use or unreadable (stop the server first): %w", path, err)
	}
	_ = db.Close()
	return func() {}, false, nil
}

// lockRestoreDir is a no-op here: restores into one directory are not made exclusive.
func lockRestoreDir(string) (unlock func(), err error) { return func() {}, nil }
