//go:build !linux

package store

import "os"

// qualDataSync flushes f's data; without fdatasync, as bbolt does there, with fsync.
func qualDataSync(f *os.File) error { return f.Sync() }
