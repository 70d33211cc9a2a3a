package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"time"
)

// checkBoltFile reads the two meta pages of a bbolt file and refuses a file shorter than the pages its
// newest valid meta says are in use. bbolt maps the file into memory; a page past the end of a
// truncated file would be a fatal fault (SIGBUS) on first touch, which no recover can catch, so this
// check runs before bbolt ever opens the file. A file whose metas are both invalid is left for
// bbolt.Open to reject.
//
// It reads under a shared lock, waiting up to timeout for a store that has the database open (a
// server still stopping when the next one starts): pages that a running store rewrites as they are
// read would look damaged, and a sound database would open unavailable as corrupt.
func checkBoltFile(path string, timeout time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	unlock, err := lockShared(f, timeout)
	if err != nil {
		return err
	}
	defer unlock()
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
	w := pageWalker{f: f, pageSize: int64(best.pageSize), hwm: best.pgid, seen: map[uint64]bool{}}
	if _, err := w.walk(best.root, nil, nil, 0); err != nil {
		return fmt.Errorf("database is corrupt: %w", err)
	}
	return nil
}

// pageWalker reads every page reachable from the root bucket, from the file (not mapped into memory),
// and checks what bbolt takes on trust: each page says it is the page it was reached as, lies below
// the high water mark and is reached once; each element lies inside its page; keys ascend. bbolt,
// opened for writing, walks the same pages on a goroutine of its own to rebuild its free list (never
// synced here), where a damaged page panics or faults beyond any recover and the process dies; this
// walk finds such damage first and the store opens unavailable instead.
type pageWalker struct {
	f        *os.File
	pageSize int64
	hwm      uint64
	seen     map[uint64]bool
}

// bbolt's page layout: a 16-byte header (id, flags, count, overflow), then count 16-byte elements.
const (
	boltPageHeader = 16
	boltElement    = 16
	boltBranch     = 0x01
	boltLeaf       = 0x02
	boltBucketLeaf = 0x01 // a leaf element that is a nested bucket
	boltBucketHead = 16   // a bucket value: root page id, sequence; an inline page follows when root is 0
	boltMaxDepth   = 64
)

// walk checks page id and the pages below it: their keys must lie in [minKey, maxKey) (nil: open), as
// bbolt's own check has it; depth counts the levels above. It returns the subtree's largest key.
func (w *pageWalker) walk(id uint64, minKey, maxKey []byte, depth int) ([]byte, error) {
	if depth > boltMaxDepth {
		return nil, fmt.Errorf("page %d: nested %d levels deep", id, depth)
	}
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d: out of bounds (high water mark %d)", id, w.hwm)
	}
	head := make([]byte, boltPageHeader)
	if _, err := w.f.ReadAt(head, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	if got := binary.LittleEndian.Uint64(head); got != id {
		return nil, fmt.Errorf("page %d: its header says page %d", id, got)
	}
	overflow := uint64(binary.LittleEndian.Uint32(head[12:16]))
	if id+overflow >= w.hwm {
		return nil, fmt.Errorf("page %d: %d overflow pages pass the high water mark %d", id, overflow, w.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d: reached twice", i)
		}
		w.seen[i] = true
	}
	p := make([]byte, int64(overflow+1)*w.pageSize)
	if _, err := w.f.ReadAt(p, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	return w.elements(fmt.Sprintf("page %d", id), p, minKey, maxKey, depth)
}

// elements checks the elements of a page (or an inline bucket's page) p and walks what they point to.
func (w *pageWalker) elements(name string, p []byte, minKey, maxKey []byte, depth int) ([]byte, error) {
	if len(p) < boltPageHeader {
		return nil, fmt.Errorf("%s: %d bytes, shorter than a page header", name, len(p))
	}
	flags := binary.LittleEndian.Uint16(p[8:10])
	count := int(binary.LittleEndian.Uint16(p[10:12]))
	if flags != boltBranch && flags != boltLeaf {
		return nil, fmt.Errorf("%s: neither a branch nor a leaf (flags %#x)", name, flags)
	}
	if boltPageHeader+count*boltElement > len(p) {
		return nil, fmt.Errorf("%s: %d elements do not fit", name, count)
	}
	type element struct {
		key, value []byte
		flags      uint32
		child      uint64
	}
	elems := make([]element, count)
	for i := range elems {
		at := boltPageHeader + i*boltElement
		e := p[at : at+boltElement]
		var pos, ksize, vsize uint64
		if flags == boltBranch {
			pos, ksize = uint64(binary.LittleEndian.Uint32(e[0:4])), uint64(binary.LittleEndian.Uint32(e[4:8]))
			elems[i].child = binary.LittleEndian.Uint64(e[8:16])
		} else {
			elems[i].flags = binary.LittleEndian.Uint32(e[0:4])
			pos, ksize, vsize = uint64(binary.LittleEndian.Uint32(e[4:8])), uint64(binary.LittleEndian.Uint32(e[8:12])), uint64(binary.LittleEndian.Uint32(e[12:16]))
		}
		start := uint64(at) + pos
		if start+ksize+vsize > uint64(len(p)) {
			return nil, fmt.Errorf("%s: element %d lies outside the page", name, i)
		}
		elems[i].key, elems[i].value = p[start:start+ksize], p[start+ksize:start+ksize+vsize]
	}
	last := minKey
	for i, e := range elems {
		switch {
		case i == 0 && last != nil && bytes.Compare(last, e.key) > 0:
			return nil, fmt.Errorf("%s: its first key is below its parent's", name)
		case i > 0 && bytes.Compare(last, e.key) >= 0:
			return nil, fmt.Errorf("%s: keys out of order at element %d", name, i)
		case maxKey != nil && bytes.Compare(e.key, maxKey) >= 0:
			return nil, fmt.Errorf("%s: key %d is not below the next key of its parent", name, i)
		}
		if flags == boltBranch {
			upper := maxKey
			if i+1 < len(elems) {
				upper = elems[i+1].key
			}
			sub, err := w.walk(e.child, e.key, upper, depth+1)
			if err != nil {
				return nil, err
			}
			last = sub
			continue
		}
		last = e.key
		if e.flags&boltBucketLeaf == 0 {
			continue
		}
		// A nested bucket: a tree of its own, its keys ordered among themselves.
		if len(e.value) < boltBucketHead {
			return nil, fmt.Errorf("%s: bucket %q has a %d-byte header", name, e.key, len(e.value))
		}
		var err error
		if root := binary.LittleEndian.Uint64(e.value[0:8]); root != 0 {
			_, err = w.walk(root, nil, nil, depth+1)
		} else {
			_, err = w.elements(fmt.Sprintf("%s: inline bucket %q", name, e.key), e.value[boltBucketHead:], nil, nil, depth+1)
		}
		if err != nil {
			return nil, err
		}
	}
	return last, nil
}

type boltFileMeta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
	pgid     uint64 // the high water mark: pages in use are below it
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
	return boltFileMeta{pageSize: binary.LittleEndian.Uint32(b[24:28]), root: binary.LittleEndian.Uint64(b[32:40]),
		pgid: binary.LittleEndian.Uint64(b[56:64]), txid: binary.LittleEndian.Uint64(b[64:72])}, true
}
