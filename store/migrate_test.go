package store

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/wire"
)

// TestMigrateFormat1: a database of format 1 (namespace counters in a bucket of their own) opens,
// is migrated to the current format in place, and serves the same entries, revisions and counters.
func TestMigrateFormat1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state-store.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	doc := leaseDoc("w1")
	entry := wire.Entry{Namespace: "service/tx", Key: "leases/a", Schema: wire.SchemaLease, Owner: "coordinator", Revision: 3,
		CreatedAtMs: 1, UpdatedAtMs: 2, Document: doc}
	ev, _ := json.Marshal(entry)
	cv, _ := json.Marshal(nsCounter{Revision: 5, Entries: 1, Bytes: int64(len(doc))})
	err = db.Update(func(tx *bolt.Tx) error {
		for name, kv := range map[string]map[string][]byte{
			"meta": {"format": []byte("1"), "epoch": []byte("e1"), "total_bytes": []byte(strconv.Itoa(len(doc))),
				"audit_head": []byte(`{"seq":0,"hash":""}`), "audit_checkpoint": []byte(`{"seq":0,"hash":""}`)},
			"namespaces": {"service/tx": cv},
			"entries":    {"service/tx\x00leases/a": ev},
			"audit":      {},
		} {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for k, v := range kv {
				if err := b.Put([]byte(k), v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := openAt(t, path, DefaultOptions())
	got, err := s.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "leases/a"})
	if err != nil || got.Revision != 3 {
		t.Fatalf("entry after migration %+v %v", got, err)
	}
	if r := nsRevision(t, s, "service/tx"); r != 5 {
		t.Fatalf("namespace revision after migration %d, want 5", r)
	}
	if e := mustPut(t, s, admin, putLease("service/tx", "leases/b")); e.Revision != 6 {
		t.Fatalf("first write after migration at %d", e.Revision)
	}
	if st := s.Stats(); st.TotalBytes != 2*int64(len(doc)) || s.Info().Epoch != "e1" {
		t.Fatalf("stats after migration %+v epoch %s", st, s.Info().Epoch)
	}
	s.Close()
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if f := string(tx.Bucket(bucketMeta).Get(metaFormat)); f != strconv.Itoa(formatVersion) || tx.Bucket(bucketNamespacesV1) != nil ||
			tx.Bucket(bucketAuditTail) == nil {
			t.Errorf("after migration: format %s, namespaces bucket present %v, audit tail present %v", f,
				tx.Bucket(bucketNamespacesV1) != nil, tx.Bucket(bucketAuditTail) != nil)
		}
		return nil
	})
}

// TestMigrateFormat2: a database of format 2 (every audit record in the audit bucket, no tail) opens,
// gains the audit tail, keeps a verifiable chain, and extends it.
func TestMigrateFormat2(t *testing.T) {
	s, path := openT(t, DefaultOptions())
	for range 4 {
		mustPut(t, s, admin, putLease("service/tx", "k"))
	}
	s.Close()
	// Make it format 2: the tail's records back into the log, no tail bucket.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketAudit)
		if err := tx.Bucket(bucketAuditTail).ForEach(func(k, v []byte) error {
			return log.Put(bytes.Clone(k), bytes.Clone(v))
		}); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketAuditTail); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaFormat, []byte("2"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, path, DefaultOptions())
	if rep, err := s2.VerifyAudit(); err != nil || !rep.OK() || rep.Records != 4 || rep.HeadSeq != 4 {
		t.Fatalf("after migration: %+v %v", rep, err)
	}
	for range 3 {
		mustPut(t, s2, admin, putLease("service/tx", "k"))
	}
	if rep, err := s2.VerifyAudit(); err != nil || !rep.OK() || rep.Records != 7 || rep.HeadSeq != 7 {
		t.Fatalf("after more writes: %+v %v", rep, err)
	}
	if e, err := s2.Get(ctxT(t), admin, wire.GetRequest{Namespace: "service/tx", Key: "k"}); err != nil || e.Revision != 7 {
		t.Fatalf("entry %+v %v", e, err)
	}
}
