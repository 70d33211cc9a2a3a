package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Damaged page headers and elements (wrong page ids, counts, offsets, flags, keys out of order) open
// the store unavailable or are served; the process never dies. bbolt, opened for writing, rebuilds its
// free list on a goroutine of its own, where such damage used to panic or fault beyond any recover.
// Each damaged file is opened, read, verified and written in a child process, which must exit
// normally. STORE_DAMAGED_FILES and STORE_DAMAGED_SEED make a longer run.
func TestDamagedPagesNeverKillTheProcess(t *testing.T) {
	path := corruptFixture(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize, _, pgid := boltMeta(t, path)
	files, seed := 40, uint64(1)
	if v := os.Getenv("STORE_DAMAGED_FILES"); v != "" {
		fmt.Sscan(v, &files)
	}
	if v := os.Getenv("STORE_DAMAGED_SEED"); v != "" {
		fmt.Sscan(v, &seed)
	}
	r := mrand.New(mrand.NewPCG(seed, 7))
	dir := t.TempDir()
	counts := map[string]int{}
	for i := range files {
		b := bytes.Clone(orig)
		// A bit flipped in a page's header or first elements, past the two meta pages.
		off := (2+r.IntN(int(pgid)-2))*int(pageSize) + r.IntN(160)
		b[off] ^= byte(1 << r.IntN(8))
		p := filepath.Join(dir, fmt.Sprintf("damaged-%d.db", i))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, err := openInChild(t, p)
		switch {
		case err != nil:
			t.Fatalf("flip at byte %d: the process died: %v\n%s", off, err, firstLines(stderr, 40))
		case out == "served":
			counts["served"]++
		case strings.HasPrefix(out, "unavailable: "):
			counts["unavailable"]++
		default:
			t.Fatalf("flip at byte %d: %q", off, out)
		}
	}
	if counts["unavailable"] == 0 || counts["served"] == 0 {
		t.Fatalf("the damage did not exercise both outcomes: %v", counts)
	}
	t.Logf("%d damaged files: %v", files, counts)
}

// The page walk names the damage: a page whose header says it is another page.
func TestPageHeaderNamingAnotherPage(t *testing.T) {
	path := corruptFixture(t)
	var root uint64
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error { root = uint64(tx.Bucket(bucketEntries).Root()); return nil })
	_ = db.Close()
	pageSize, _, _ := boltMeta(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(b[root*pageSize:], root+1)
	writeBytes(t, path, b)
	s, err := Open(path, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := fmt.Sprintf("page %d: its header says page %d", root, root+1)
	if s.Unavailable() == nil || !strings.Contains(s.Unavailable().Error(), want) {
		t.Fatalf("unavailable reason %v, want it to contain %q", s.Unavailable(), want)
	}
}
