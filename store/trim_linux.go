//go:build linux

package store

import (
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// trimMemory drops the database's mapped pages from the process's resident set: MADV_DONTNEED on
// bbolt's read-only shared file mapping, so the next read faults a page back in from the page cache.
// It runs inside a read transaction, which keeps bbolt from remapping meanwhile.
func (b *boltBackend) trimMemory() {
	_ = b.db.View(func(tx *bolt.Tx) error {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, b.db.Info().Data, uintptr(tx.Size()), unix.MADV_DONTNEED)
		return nil
	})
}
