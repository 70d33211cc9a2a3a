//go:build !linux

package store

// trimMemory does nothing where the mapped pages cannot be dropped portably.
func (b *boltBackend) trimMemory() {}
