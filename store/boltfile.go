package store

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// checkBoltFile reads the two meta pages of a bbolt file and refuses a file shorter than the pages its
// newest valid meta says are in use. bbolt maps the file into memory; a page past the end of a
// truncated file would be a fatal fault (SIGBUS) on first touch, which no recover can catch, so this
// check runs before bbolt ever opens the file. A file whose metas are both invalid is left for
// bbolt.Open to reject.
func checkBoltFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	const metaEnd = 80 // page header (16) + meta (64)
	buf := make([]byte, metaEnd)
	if _, err := io.ReadFull(f, buf); err != nil {
		return fmt.Errorf("database file is too short to be a database (%d bytes)", fi.Size())
	}
	pageSize := int64(binary.LittleEndian.Uint32(buf[24:28]))
	var best *boltFileMeta
	if m, ok := parseBoltMeta(buf); ok {
		best = &m
	}
	if pageSize >= 512 && pageSize <= 1<<16 {
		buf2 := make([]byte, metaEnd)
		if _, err := f.ReadAt(buf2, pageSize); err == nil {
			if m, ok := parseBoltMeta(buf2); ok && (best == nil || m.txid > best.txid) {
				best = &m
			}
		}
	}
	if best == nil {
		return nil
	}
	if need := int64(best.pgid) * int64(best.pageSize); fi.Size() < need {
		return fmt.Errorf("database file is truncated: %d bytes, its pages need %d", fi.Size(), need)
	}
	return nil
}

type boltFileMeta struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

// parseBoltMeta decodes a meta page (bbolt's on-disk layout) and checks its magic and checksum.
func parseBoltMeta(b []byte) (boltFileMeta, bool) {
	const magic = 0xED0CDAED
	if binary.LittleEndian.Uint32(b[16:20]) != magic {
		return boltFileMeta{}, false
	}
	h := fnv.New64a()
	h.Write(b[16:72])
	if h.Sum64() != binary.LittleEndian.Uint64(b[72:80]) {
		return boltFileMeta{}, false
	}
	return boltFileMeta{pageSize: binary.LittleEndian.Uint32(b[24:28]), pgid: binary.LittleEndian.Uint64(b[56:64]),
		txid: binary.LittleEndian.Uint64(b[64:72])}, true
}
