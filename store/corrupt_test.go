package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/wire"
)

// corruptFixture makes a valid, closed store with entries in two namespaces and returns its path.
// The file is grown past a few pages so that a truncation cuts through data pages.
func corruptFixture(t *testing.T) string {
	t.Helper()
	s, path := openT(t, DefaultOptions())
	for i := range 4 {
		mustPut(t, s, admin, putLease("service/tx", fmt.Sprintf("leases/l%d", i)))
	}
	for i := range 24 {
		mustPut(t, s, admin, wire.PutRequest{Namespace: "user/alice", Key: fmt.Sprintf("intents/i%02d", i),
			Schema: "keeppeek.media-intent.v1", Document: proseIntentDoc(fmt.Sprintf("cam%d", i), 4)})
	}
	if _, err := s.Delete(ctxT(t), admin, wire.DeleteRequest{Namespace: "service/tx", Key: "leases/l3"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return path
}

// proseIntentDoc is a schema-valid media intent of roughly kib KiB: its parameters hold prose (words
// and spaces, no line breaks), which the content guard accepts.
func proseIntentDoc(source string, kib int) json.RawMessage {
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}
	var sb strings.Builder
	for i := 0; sb.Len() < 900; i++ {
		sb.WriteString(words[i%len(words)])
		sb.WriteByte(' ')
	}
	text := strings.TrimSpace(sb.String())
	params := map[string]string{}
	for i := range kib {
		params[fmt.Sprintf("p%02d", i)] = text
	}
	doc := map[string]any{"role": "publish", "desired": true, "source_id": source, "media_kind": "video",
		"recording_mode": "disabled", "parameters": map[string]any{"svc": params}}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

// boltEditFile opens the closed database at path with bbolt directly and runs fn in one write transaction.
func boltEditFile(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("bolt.Open: %v", err)
	}
	if err := db.Update(fn); err != nil {
		db.Close()
		t.Fatalf("bolt edit: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("bolt close: %v", err)
	}
}

// editStoredEntry rewrites the stored entry (ns, key) through fn.
func editStoredEntry(ns, key string, fn func(e map[string]any)) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		k := entryKey(ns, key)
		v := b.Get(k)
		if v == nil {
			return fmt.Errorf("no entry %s:%s", ns, key)
		}
		var e map[string]any
		if err := json.Unmarshal(v, &e); err != nil {
			return err
		}
		fn(e)
		nv, err := json.Marshal(e)
		if err != nil {
			return err
		}
		return b.Put(k, nv)
	}
}

func TestCorruptFilesOpenUnavailable(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   []string // the reason names the problem: one of these substrings
	}{
		{"random garbage", func(t *testing.T, path string) {
			b := make([]byte, 64<<10)
			_, _ = rand.Read(b)
			writeBytes(t, path, b)
		}, []string{"invalid", "checksum", "version"}},
		{"truncated to half", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, []string{"truncat", "corrupt", "size", "page"}},
		{"format version from the future", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketMeta).Put(metaFormat, fmt.Appendf(nil, "%d", formatVersion+1))
			})
		}, []string{fmt.Sprintf("unsupported format version %d", formatVersion+1)}},
		{"total_bytes disagrees", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				m := tx.Bucket(bucketMeta)
				n, err := strconv.ParseInt(string(m.Get(metaTotalBytes)), 10, 64)
				if err != nil {
					return err
				}
				return m.Put(metaTotalBytes, fmt.Appendf(nil, "%d", n+7))
			})
		}, []string{"total_bytes"}},
		{"namespace entry count disagrees", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				var c nsCounter
				if err := json.Unmarshal(b.Get(counterKey("service/tx")), &c); err != nil {
					return err
				}
				c.Entries++
				v, _ := json.Marshal(c)
				return b.Put(counterKey("service/tx"), v)
			})
		}, []string{`namespace "service/tx" counters say 4 entries`}},
		{"orphan entry", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				e := wire.Entry{Namespace: "service/ghost", Key: "k", Schema: "keeppeek.lease.v1", Owner: "coordinator",
					Revision: 1, CreatedAtMs: 1, UpdatedAtMs: 1, Document: leaseDoc("w1")}
				v, _ := json.Marshal(e)
				return tx.Bucket(bucketEntries).Put([]byte("service/ghost\x00k"), v)
			})
		}, []string{"orphan entry service/ghost:k"}},
		{"entry revision above namespace revision", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l0", func(e map[string]any) { e["revision"] = 999 }))
		}, []string{"leases/l0 has revision 999 but its namespace is at"}},
		{"unregistered schema", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l1", func(e map[string]any) { e["schema"] = "keeppeek.nope.v1" }))
		}, []string{"unregistered schema"}},
		{"entry not JSON", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketEntries).Put(entryKey("user/alice", "intents/i03"), []byte(`{"namespace":"user/alice","key":`))
			})
		}, []string{"intents/i03 does not decode"}},
		{"bytes after an entry", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				k := entryKey("service/tx", "leases/l1")
				return b.Put(k, append(bytes.Clone(b.Get(k)), '}'))
			})
		}, []string{"leases/l1 does not decode: trailing data"}},
		{"missing bucket", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketAudit) })
		}, []string{`bucket "audit" is missing`}},
		{"audit tail before the log's end", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				k, v := tx.Bucket(bucketAudit).Cursor().First()
				if k == nil {
					return fmt.Errorf("the fixture's audit log is empty")
				}
				return tx.Bucket(bucketAuditTail).Put(bytes.Clone(k), bytes.Clone(v))
			})
		}, []string{"the audit tail does not follow the audit log"}},
		{"audit head not the last record", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				m := tx.Bucket(bucketMeta)
				var h auditHead
				if err := json.Unmarshal(m.Get(metaAuditHead), &h); err != nil {
					return err
				}
				h.Seq++
				v, _ := json.Marshal(h)
				return m.Put(metaAuditHead, v)
			})
		}, []string{"is not the last audit record"}},
		{"zero-byte file", func(t *testing.T, path string) {
			writeBytes(t, path, nil)
		}, []string{"empty", "zero", "truncat"}},
		{"namespace counter over max_entries_per_namespace", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				var c nsCounter
				if err := json.Unmarshal(b.Get(counterKey("service/tx")), &c); err != nil {
					return err
				}
				c.Entries = wire.DefaultBounds().MaxEntriesPerNamespace + 1
				v, _ := json.Marshal(c)
				return b.Put(counterKey("service/tx"), v)
			})
		}, []string{fmt.Sprintf(`namespace "service/tx" holds %d entries, over max_entries_per_namespace`, wire.DefaultBounds().MaxEntriesPerNamespace+1)}},
		{"more namespaces with entries than max_namespaces", func(t *testing.T, path string) {
			// The fixture has 2 namespaces with entries; counters for enough more pass the bound by one.
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				v, _ := json.Marshal(nsCounter{Revision: 1, Entries: 1})
				for i := range wire.DefaultBounds().MaxNamespaces - 1 {
					if err := b.Put(counterKey(fmt.Sprintf("service/n%04d", i)), v); err != nil {
						return err
					}
				}
				return nil
			})
		}, []string{fmt.Sprintf("%d namespaces hold entries, over max_namespaces", wire.DefaultBounds().MaxNamespaces+1)}},
		{"document over max_document_bytes", func(t *testing.T, path string) {
			// A compact, schema-valid document one byte over the bound, with the byte counters made to
			// agree, so its size is the only problem.
			base := `{"holder":"w1","claimed_at_ms":1,"purpose":""}`
			big := `{"holder":"w1","claimed_at_ms":1,"purpose":"` +
				strings.Repeat("p ", int(wire.DefaultBounds().MaxDocumentBytes))[:int(wire.DefaultBounds().MaxDocumentBytes)+1-len(base)] + `"}`
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				var old map[string]json.RawMessage
				if err := json.Unmarshal(b.Get(entryKey("service/tx", "leases/l0")), &old); err != nil {
					return err
				}
				delta := int64(len(big) - len(old["document"]))
				if err := editStoredEntry("service/tx", "leases/l0", func(e map[string]any) { e["document"] = json.RawMessage(big) })(tx); err != nil {
					return err
				}
				var c nsCounter
				if err := json.Unmarshal(b.Get(counterKey("service/tx")), &c); err != nil {
					return err
				}
				c.Bytes += delta
				v, _ := json.Marshal(c)
				if err := b.Put(counterKey("service/tx"), v); err != nil {
					return err
				}
				m := tx.Bucket(bucketMeta)
				total, err := strconv.ParseInt(string(m.Get(metaTotalBytes)), 10, 64)
				if err != nil {
					return err
				}
				return m.Put(metaTotalBytes, fmt.Appendf(nil, "%d", total+delta))
			})
		}, []string{fmt.Sprintf("leases/l0 document is %d bytes, over max_document_bytes", wire.DefaultBounds().MaxDocumentBytes+1)}},
		{"owner not a principal id", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l1", func(e map[string]any) { e["owner"] = "Not.A.Principal" }))
		}, []string{`leases/l1 has an invalid owner "Not.A.Principal"`}},
		{"invalid key", func(t *testing.T, path string) {
			// The entry moves to a key that breaks the key rule; counters still agree.
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				var e map[string]any
				if err := json.Unmarshal(b.Get(entryKey("service/tx", "leases/l2")), &e); err != nil {
					return err
				}
				e["key"] = "leases//l2"
				v, _ := json.Marshal(e)
				if err := b.Delete(entryKey("service/tx", "leases/l2")); err != nil {
					return err
				}
				return b.Put(entryKey("service/tx", "leases//l2"), v)
			})
		}, []string{`"leases//l2" has an invalid key`}},
		{"lease with ttl_ms but no expires_at_ms", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l0", func(e map[string]any) {
				e["ttl_ms"] = 5000
				e["expires_at_ms"] = 0
			}))
		}, []string{"leases/l0 has an inconsistent lease"}},
		{"lease shorter than a second", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l0", func(e map[string]any) {
				e["ttl_ms"] = 5
				e["expires_at_ms"] = 1
			}))
		}, []string{"leases/l0 has a lease out of range (ttl_ms 5"}},
		{"lease deadline past the JSON integer range", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l0", func(e map[string]any) {
				e["ttl_ms"] = 5000
				e["expires_at_ms"] = int64(1) << 60
			}))
		}, []string{"leases/l0 has a lease out of range"}},
		{"negative created_at_ms", func(t *testing.T, path string) {
			boltEditFile(t, path, editStoredEntry("service/tx", "leases/l1", func(e map[string]any) { e["created_at_ms"] = -1 }))
		}, []string{"leases/l1 has a timestamp out of range"}},
		{"audit head behind its records", func(t *testing.T, path string) {
			// The next commits would write their records over the ones kept under the same seqs.
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketMeta).Put(metaAuditHead, []byte(`{"seq":0,"hash":""}`))
			})
		}, []string{"audit head seq 0 is not the last audit record"}},
		{"audit key shorter than a sequence number", func(t *testing.T, path string) {
			// It sorts first: the next prune used to read it as a sequence number and panic.
			boltEditFile(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketAudit).Put([]byte{0}, []byte(`{}`)) })
		}, []string{`bucket "audit" holds "\x00", which is not an audit record's sequence number`}},
		{"audit record replaced by a bucket", func(t *testing.T, path string) {
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketAudit)
				k, _ := b.Cursor().First()
				if k == nil {
					return fmt.Errorf("the fixture's audit log is empty")
				}
				k = bytes.Clone(k)
				if err := b.Delete(k); err != nil {
					return err
				}
				_, err := b.CreateBucket(k)
				return err
			})
		}, []string{`bucket "audit" holds "\x00\x00\x00\x00\x00\x00\x00\x01", which is not an audit record's sequence number`}},
		{"document not compact", func(t *testing.T, path string) {
			// Valid JSON of the same compact size (so the byte counters agree), with a space in it.
			boltEditFile(t, path, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketEntries)
				k := entryKey("service/tx", "leases/l1")
				v := b.Get(k)
				nv := bytes.Replace(v, []byte(`"claimed_at_ms":1}`), []byte(`"claimed_at_ms": 1}`), 1)
				if bytes.Equal(nv, v) {
					return fmt.Errorf("fixture document of leases/l1 changed: %s", v)
				}
				return b.Put(k, nv)
			})
		}, []string{"leases/l1 document is not a compact JSON object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := corruptFixture(t)
			tc.damage(t, path)

			s, err := openRecovering(path, DefaultOptions())
			if err != nil {
				t.Fatalf("Open returned an error, want an unavailable store: %v", err)
			}
			if s == nil {
				t.Fatal("Open returned a nil store")
			}
			defer func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			reason := s.Unavailable()
			if reason == nil {
				t.Fatalf("a damaged database (%s) was served", tc.name)
			}
			if !slices.ContainsFunc(tc.want, func(w string) bool { return strings.Contains(reason.Error(), w) }) {
				t.Errorf("reason %q names none of %q", reason, tc.want)
			}
			assertAllUnavailable(t, s)
		})
	}
}

// assertAllUnavailable checks that every operation of s answers UNAVAILABLE and Info lacks the feature.
func assertAllUnavailable(t *testing.T, s *Store) {
	t.Helper()
	ctx := ctxT(t)
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("%s: want UNAVAILABLE, got %v", op, err)
		}
	}
	_, err := s.Get(ctx, admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/l0"})
	check("Get", err)
	_, err = s.Put(ctx, admin, putLease("service/tx", "leases/new"))
	check("Put", err)
	_, err = s.Delete(ctx, admin, wire.DeleteRequest{Namespace: "service/tx", Key: "leases/l0"})
	check("Delete", err)
	_, err = s.List(ctx, admin, wire.ListRequest{Namespace: "service/tx"})
	check("List", err)
	sink, _ := chanSink(4)
	_, err = s.Watch(ctx, admin, wire.WatchRequest{WatchID: "w", Namespace: "service/tx"}, sink)
	check("Watch", err)
	check("Ack", s.Ack(ctx, admin, wire.AckRequest{WatchID: "w", AppliedSequence: i64(0)}))
	check("Unwatch", s.Unwatch(ctx, admin, wire.UnwatchRequest{WatchID: "w"}))
	if f := s.Info().Features; slices.Contains(f, wire.FeatureStateStore) {
		t.Errorf("Info of an unavailable store advertises %s: %v", wire.FeatureStateStore, f)
	}
}

func TestCorruptHealthyStoreHasFeature(t *testing.T) {
	path := corruptFixture(t)
	s := openAt(t, path, DefaultOptions())
	if f := s.Info().Features; !slices.Contains(f, wire.FeatureStateStore) {
		t.Fatalf("a healthy store's Info lacks %s: %v", wire.FeatureStateStore, f)
	}
	l, err := s.List(ctxT(t), admin, wire.ListRequest{Namespace: "user/alice", Limit: 256})
	if err != nil || len(l.Entries) != 24 || l.Revision != 24 {
		t.Fatalf("List of the fixture: %d entries at revision %d, %v", len(l.Entries), l.Revision, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if f := s.Info().Features; slices.Contains(f, wire.FeatureStateStore) {
		t.Fatalf("a closed store's Info advertises %s: %v", wire.FeatureStateStore, f)
	}
}

func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// openRecovering calls Open and turns a panic into an error, so a store that panics on a damaged file
// fails its own test instead of killing the whole test binary.
// A damaged file can also make bbolt read past its memory map; SetPanicOnFault turns that fault, on
// this goroutine, into a panic too. (TestCorruptTruncatedNoFatalFault checks the unprotected case, as a
// server runs it, in a child process.)
func openRecovering(path string, opts Options) (s *Store, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("Open panicked (it must answer with an unavailable store instead): %v", r)
		}
	}()
	return Open(path, opts)
}

// corruptChildEnv carries a database path to TestCorruptChild, the child process of openInChild.
const corruptChildEnv = "STORE_CORRUPT_CHILD"

// TestCorruptChild is the child process of openInChild, not a test of its own: without
// STORE_CORRUPT_CHILD it returns at once. With it, it opens the store at that path, with no fault
// protection at all (as a server would), and prints "unavailable: <reason>", or, after a read, an
// audit verification and a write, "served".
func TestCorruptChild(t *testing.T) {
	path := os.Getenv(corruptChildEnv)
	if path == "" {
		return
	}
	s, err := Open(path, DefaultOptions())
	switch {
	case err != nil:
		fmt.Printf("error: %v\n", err)
	case s.Unavailable() != nil:
		fmt.Printf("unavailable: %v\n", s.Unavailable())
	default:
		ctx := context.Background()
		_, _ = s.List(ctx, admin, wire.ListRequest{Namespace: "service/tx"})
		_, _ = s.VerifyAudit()
		_, _ = s.Put(ctx, admin, putLease("service/tx", "leases/after"))
		fmt.Println("served")
	}
	if s != nil {
		s.Close()
	}
	os.Exit(0)
}

// boltMeta reads the newer meta page of a closed bbolt file: its freelist page and high-water mark.
func boltMeta(t *testing.T, path string) (pageSize, freelist, pgid uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Page header: id u64, flags u16, count u16, overflow u32. Meta: magic u32, version u32,
	// page_size u32, flags u32, root {pgid u64, sequence u64}, freelist u64, pgid u64, txid u64.
	le := func(off int) uint64 {
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(b[off+i])
		}
		return v
	}
	le32 := func(off int) uint64 { return le(off) & 0xffffffff }
	pageSize = le32(16 + 8)
	best := -1
	var bestTx uint64
	for m := range 2 {
		off := m * int(pageSize)
		if le32(off+16) != 0xED0CDAED {
			continue
		}
		if tx := le(off + 64); best < 0 || tx > bestTx {
			best, bestTx = off, tx
		}
	}
	if best < 0 {
		t.Fatal("no valid bbolt meta page")
	}
	return pageSize, le(best + 48), le(best + 56)
}

// TestCorruptTruncatedNoFatalFault truncates a database below its high-water page, so pages its tree
// may reference lie past the end of the file but inside the memory map bbolt makes (a power of two):
// reading them is a SIGBUS, which no recover catches. Open must notice the short file and answer
// with an unavailable store, in a process that keeps running. The open runs in a child process, with
// no fault protection, so a crash fails this test and not the whole test binary.
func TestCorruptTruncatedNoFatalFault(t *testing.T) {
	path := corruptFixture(t)
	pageSize, _, pgid := boltMeta(t, path)
	cut := pgid - 1 // the last page in use is gone
	for size := cut * pageSize; size&(size-1) == 0; size = cut * pageSize {
		cut-- // the cut must not fall on a power of two (the end of bbolt's map)
	}
	size := int64(cut * pageSize)
	if cut < 8 {
		t.Fatalf("fixture layout changed: high water %d", pgid)
	}
	freelist := cut
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := openInChild(t, path)
	if err != nil {
		t.Fatalf("opening a database truncated to %d bytes (page %d onwards missing) killed the process: %v\n%s",
			size, freelist, err, firstLines(stderr, 16))
	}
	if !strings.HasPrefix(out, "unavailable: ") {
		t.Fatalf("opening a truncated database: %q, want an unavailable store", out)
	}
}

// openInChild opens the database at path in a child process (TestCorruptChild), where a fault that
// no recover catches kills the child, not the test binary. It returns the child's output and stderr,
// and the error of a child that did not exit normally.
func openInChild(t *testing.T, path string) (out, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCorruptChild$", "-test.count=1")
	// A race-enabled child would otherwise sleep a second at exit.
	cmd.Env = append(os.Environ(), corruptChildEnv+"="+path, "GORACE=atexit_sleep_ms=0")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return strings.TrimSpace(o.String()), e.String(), err
}

func firstLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}
