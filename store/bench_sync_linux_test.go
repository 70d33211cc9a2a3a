//go:build linux

package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// qualDataSync flushes f's data as bbolt does on Linux: fdatasync.
func qualDataSync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
