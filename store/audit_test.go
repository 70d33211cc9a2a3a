package store

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/keeppeek/coordination/store/wire"
)

func TestAuditChainRecordsEveryMutation(t *testing.T) {
	s, _ := openT(t, DefaultOptions())
	ctx := ctxT(t)
	mustPut(t, s, admin, putLease("service/tx", "a"))
	mustPut(t, s, alice, wire.PutRequest{Namespace: "user/alice", Key: "p", Schema: "keeppeek.preference.v1", Document: json.RawMessage(`{"kind":"x"}`)})
	if _, err := s.Delete(ctx, admin, wire.DeleteRequest{Namespace: "service/tx", Key: "a"}); err != nil {
		t.Fatal(err)
	}
	_, _ = s.Put(ctx, admin, wire.PutRequest{Namespace: "service/tx", Key: "a", Schema: "nope.v1", Document: leaseDoc("w")}) // rejected: not audited
	rep, err := s.VerifyAudit()
	if err != nil || !rep.OK() || rep.Records != 3 || rep.HeadSeq != 3 || len(rep.HeadHash) != 64 {
		t.Fatalf("report %+v %v", rep, err)
	}
	if !strings.HasPrefix(rep.String(), "OK: 3 records, hash chain intact (head seq 3, hash ") {
		t.Fatalf("report text %q", rep.String())
	}
	var recs []auditRecord
	if _, _, err := s.be.scanAudit(func(_ auditCheckpoint, r *auditRecord, _ []byte) error {
		recs = append(recs, *r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if recs[0].Op != "put" || recs[1].Principal != "alice" || recs[2].Op != "delete" || recs[2].DocumentSHA256 != "" ||
		recs[0].DocumentSHA256 != documentDigest(leaseDoc("w1")) || recs[1].PrevHash != recs[0].Hash {
		t.Fatalf("records %+v", recs)
	}
}

func TestAuditRetentionKeepsChainVerifiable(t *testing.T) {
	opts := DefaultOptions()
	opts.AuditRetention = 10
	s, path := openT(t, opts)
	for range auditPruneSlack + 20 {
		mustPut(t, s, admin, putLease("service/tx", "k"))
	}
	rep, err := s.VerifyAudit()
	total := uint64(auditPruneSlack + 20)
	if err != nil || !rep.OK() || rep.HeadSeq != total || rep.CheckpointSeq == 0 || rep.Records > 10+auditPruneSlack || rep.Records+rep.CheckpointSeq != total {
		t.Fatalf("after pruning: %+v %v", rep, err)
	}
	s.Close()
	s2 := openAt(t, path, opts)
	if rep2, _ := s2.VerifyAudit(); rep2 != rep {
		t.Fatalf("after reopen %+v, want %+v", rep2, rep)
	}
}

// Pruning verifies the records it deletes: a break among them is kept in the checkpoint and reported
// for good, and writes go on, whether the record was edited or no longer decodes.
func TestAuditPruneKeepsABreak(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage []byte // nil: edit the principal
		want   string
	}{{"edited", nil, "does not match the record's content"}, {"undecodable", []byte("{"), "does not decode"}} {
		t.Run(c.name, func(t *testing.T) {
			opts := DefaultOptions()
			opts.AuditRetention = 10
			s, path := openT(t, opts)
			for range 5 {
				mustPut(t, s, admin, putLease("service/tx", "k"))
			}
			s.Close()
			if c.damage == nil {
				boltEditFile(t, path, editAuditRecord(3, func(r *auditRecord) { r.Principal = "mallory" }))
			} else {
				boltEditFile(t, path, func(tx *bolt.Tx) error { return auditHolder(tx, 3).Put(seqKey(3), c.damage) })
			}
			s2 := openAt(t, path, opts)
			// Enough writes to prune record 3 and far past it.
			for i := range 2 * (auditPruneSlack + 10) {
				if _, err := s2.Put(ctxT(t), admin, putLease("service/tx", "k")); err != nil {
					t.Fatalf("write %d after the damage: %v", i, err)
				}
			}
			rep, err := s2.VerifyAudit()
			if err != nil || rep.OK() || rep.BrokenSeq != 3 || rep.CheckpointSeq < 3 || !strings.Contains(rep.Problem, c.want) ||
				!strings.Contains(rep.Problem, "pruned") {
				t.Fatalf("after record 3 was pruned: %+v %v", rep, err)
			}
			s2.Close()
			s3 := openAt(t, path, opts)
			if rep3, _ := s3.VerifyAudit(); rep3.BrokenSeq != 3 {
				t.Fatalf("after reopen: %+v", rep3)
			}
		})
	}
}

// editAuditRecord changes audit record seq in place (a database edit for boltEditFile).
func editAuditRecord(seq uint64, change func(r *auditRecord)) func(tx *bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		b := auditHolder(tx, seq)
		var r auditRecord
		if err := json.Unmarshal(b.Get(seqKey(seq)), &r); err != nil {
			return err
		}
		change(&r)
		v, _ := json.Marshal(r)
		return b.Put(seqKey(seq), v)
	}
}

// auditHolder is the bucket that holds audit record seq: the log or its tail.
func auditHolder(tx *bolt.Tx, seq uint64) *bolt.Bucket {
	if tail := tx.Bucket(bucketAuditTail); tail.Get(seqKey(seq)) != nil {
		return tail
	}
	return tx.Bucket(bucketAudit)
}

func TestAuditVerifyFindsTampering(t *testing.T) {
	edit := editAuditRecord
	// Five puts of ~330-byte records: the tail keeps two inline and moves them with the third, so records
	// 1 to 3 are in the log, 4 and 5 in its tail.
	for _, c := range []struct {
		name   string
		tamper func(tx *bolt.Tx) error
		broken uint64
		want   string
	}{
		{"edited record", edit(3, func(r *auditRecord) { r.Principal = "mallory" }), 3, "does not match the record's content"},
		{"edited tail record", edit(5, func(r *auditRecord) { r.Key = "other" }), 5, "does not match the record's content"},
		{"removed record", func(tx *bolt.Tx) error { return auditHolder(tx, 2).Delete(seqKey(2)) }, 2, "sequence jumps"},
		{"removed tail record", func(tx *bolt.Tx) error { return auditHolder(tx, 4).Delete(seqKey(4)) }, 4, "sequence jumps"},
		{"garbage record", func(tx *bolt.Tx) error { return auditHolder(tx, 4).Put(seqKey(4), []byte("{")) }, 4, "does not decode"},
		{"bytes after a record", func(tx *bolt.Tx) error {
			b := auditHolder(tx, 2)
			return b.Put(seqKey(2), append(bytes.Clone(b.Get(seqKey(2))), '}'))
		}, 2, "does not decode"},
		{"bytes after a tail record", func(tx *bolt.Tx) error {
			b := auditHolder(tx, 5)
			return b.Put(seqKey(5), append(bytes.Clone(b.Get(seqKey(5))), ']'))
		}, 5, "does not decode"},
		{"relinked record", edit(4, func(r *auditRecord) {
			r.PrevHash = strings.Repeat("0", 64)
			r.Hash = r.computeHash()
		}), 4, "prev_hash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, path := openT(t, DefaultOptions())
			for range 5 {
				mustPut(t, s, admin, putLease("service/tx", "k"))
			}
			s.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.View(func(tx *bolt.Tx) error {
				if n := tx.Bucket(bucketAudit).Stats().KeyN; n != 3 {
					t.Errorf("the log holds %d records, want 3", n)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := db.Update(c.tamper); err != nil {
				t.Fatal(err)
			}
			db.Close()
			s2 := openAt(t, path, DefaultOptions())
			rep, err := s2.VerifyAudit()
			if err != nil || rep.OK() || rep.BrokenSeq != c.broken || !strings.Contains(rep.Problem, c.want) {
				t.Fatalf("report %+v %v", rep, err)
			}
			if !strings.HasPrefix(rep.String(), "BROKEN: record seq ") {
				t.Fatalf("report text %q", rep.String())
			}
		})
	}
}

// The audit encoder writes exactly what encoding/json writes for a record (hashes of records written
// by either stay valid), whatever its strings hold.
func TestAuditEncodingIsEncodingJSONs(t *testing.T) {
	odd := []string{"", "plain", `quote " and \ backslash`, "<tag> & amp", "tab\tnl\ncr\r\x00\x1f\x7f",
		"é ü 日本", "\u2028\u2029", "bad \xff\xfe utf-8", "\xed\xa0\x80 surrogate"}
	for i, a := range odd {
		for j, b := range odd {
			r := auditRecord{Seq: uint64(i*100 + j), AtMs: -int64(j), Principal: a, Op: b, Namespace: a + b,
				Key: b + a, Revision: 1<<64 - 1, DocumentSHA256: a, PrevHash: b}
			for _, hash := range []string{"", strings.Repeat("ab", 32)} {
				r.Hash = hash
				want, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				if got := r.appendJSON(nil); string(got) != string(want) {
					t.Fatalf("record %d/%d hash %q:\n got %s\nwant %s", i, j, hash, got, want)
				}
			}
		}
	}
}

// quickLink, pruning's fast check of a stored record, passes the records the store writes, and
// passes no record the full check refuses: every one-byte change of a record, and every record
// checked against the wrong predecessor or sequence, is refused by both.
func TestQuickLinkNeverPassesWhatTheFullCheckRefuses(t *testing.T) {
	prev := auditHead{}
	var chain [][]byte
	for seq := uint64(1); seq <= 3; seq++ {
		r := auditRecord{Seq: seq, AtMs: 1764489600000, Principal: "transcoder-01", Op: "put", Namespace: "service/bench",
			Key: "writers/w-0001", Revision: 99 + seq, DocumentSHA256: strings.Repeat("0f", 32), PrevHash: prev.Hash}
		r.Hash = r.computeHash()
		raw := r.appendJSON(nil)
		h, ok := quickLink(prev, seq, raw)
		if !ok || h != r.Hash {
			t.Fatalf("record %d: quick check %q %v, want %s", seq, h, ok, r.Hash)
		}
		if next, problem := fullLink(prev, seq, raw); problem != "" || next.Hash != h {
			t.Fatalf("record %d: full check %+v %q", seq, next, problem)
		}
		chain = append(chain, raw)
		prev = auditHead{Seq: seq, Hash: r.Hash}
	}
	raw, prev := chain[1], auditHead{Seq: 1}
	_ = json.Unmarshal(chain[0], &struct{ Hash *string }{&prev.Hash})
	for i := range raw {
		for _, c := range []byte{'0', '9', 'a', 'f', '"', '}', ',', ' '} {
			if raw[i] == c {
				continue
			}
			bad := append([]byte(nil), raw...)
			bad[i] = c
			if _, ok := quickLink(prev, 2, bad); ok {
				t.Fatalf("quick check passes %s", bad)
			}
			if _, problem := verifyLink(prev, 2, bad); problem == "" {
				t.Fatalf("a changed record passes: %s", bad)
			}
		}
	}
	for _, tc := range []struct {
		prev auditHead
		seq  uint64
	}{{auditHead{Seq: 1, Hash: strings.Repeat("0", 64)}, 2}, {auditHead{Seq: 1}, 2}, {prev, 3}, {prev, 1}} {
		_, ok := quickLink(tc.prev, tc.seq, raw)
		_, problem := fullLink(tc.prev, tc.seq, raw)
		if ok || problem == "" {
			t.Fatalf("after %+v as seq %d: quick %v, full %q", tc.prev, tc.seq, ok, problem)
		}
	}
}
