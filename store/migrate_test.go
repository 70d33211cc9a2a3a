package store

import (
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
		if f := string(tx.Bucket(bucketMeta).Get(metaFormat)); f != strconv.Itoa(formatVersion) || tx.Bucket(bucketNamespacesV1) != nil {
			t.Errorf("after migration: format %s, namespaces bucket present %v", f, tx.Bucket(bucketNamespacesV1) != nil)
		}
		return nil
	})
}
