package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/keeppeek/coordination/store/wire"
)

// auditRecord is one link of the hash-chained audit log (SPEC section 10). Hash is the SHA-256 (hex) of
// the record's JSON encoding with Hash empty; PrevHash is the previous record's Hash ("" for the first).
type auditRecord struct {
	Seq            uint64 `json:"seq"`
	AtMs           int64  `json:"at_ms"`
	Principal      string `json:"principal"`
	Op             string `json:"op"`
	Namespace      string `json:"namespace"`
	Key            string `json:"key"`
	Revision       uint64 `json:"revision"`
	DocumentSHA256 string `json:"document_sha256"`
	PrevHash       string `json:"prev_hash"`
	Hash           string `json:"hash,omitempty"`
}

// computeHash returns the record's hash: SHA-256 over its JSON encoding without the hash field.
func (r auditRecord) computeHash() string {
	r.Hash = ""
	var buf [512]byte
	sum := sha256.Sum256(r.appendJSON(buf[:0]))
	return hex.EncodeToString(sum[:])
}

// appendJSON appends the record's JSON encoding: byte for byte what encoding/json makes of it (fields
// in declaration order, strings escaped as it escapes them, hash left out when empty), so hashes of
// records written before this encoder stay valid. It is what the hash covers and what is stored.
func (r *auditRecord) appendJSON(b []byte) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"at_ms":`...)
	b = strconv.AppendInt(b, r.AtMs, 10)
	b = append(b, `,"principal":`...)
	b = wire.AppendString(b, r.Principal)
	b = append(b, `,"op":`...)
	b = wire.AppendString(b, r.Op)
	b = append(b, `,"namespace":`...)
	b = wire.AppendString(b, r.Namespace)
	b = append(b, `,"key":`...)
	b = wire.AppendString(b, r.Key)
	b = append(b, `,"revision":`...)
	b = strconv.AppendUint(b, r.Revision, 10)
	b = append(b, `,"document_sha256":`...)
	b = wire.AppendString(b, r.DocumentSHA256)
	b = append(b, `,"prev_hash":`...)
	b = wire.AppendString(b, r.PrevHash)
	if r.Hash != "" {
		b = append(b, hashField...)
		b = append(b, r.Hash...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// hashField opens the last field of a stored record; a hash is 64 lower-case hex digits.
const hashField = `,"hash":"`

// quickLink checks raw, kept under seq, as the record after prev when raw is in the form the store
// writes: {"seq":<seq>, ... ,"prev_hash":"<prev's hash>","hash":"<h>"}, h being the SHA-256 of raw
// without its hash field. It returns h and true when that holds. When it does not (another form,
// a damaged record, a broken link), it returns false and verifyLink's full check says what is wrong.
// It reads no field it does not check, so it finds every break the full check finds in a record it
// passes: pruning verifies a thousand records at a time inside a commit.
func quickLink(prev auditHead, seq uint64, raw []byte) (string, bool) {
	n := len(raw) - len(hashField) - sha256.Size*2 - 2
	if n < 0 || string(raw[n:n+len(hashField)]) != hashField || string(raw[len(raw)-2:]) != `"}` {
		return "", false
	}
	body, h := raw[:n], raw[n+len(hashField):len(raw)-2]
	var buf [64]byte
	if !bytes.HasPrefix(body, append(strconv.AppendUint(append(buf[:0], `{"seq":`...), seq, 10), ',')) {
		return "", false
	}
	tail := append(append(append(buf[:0], `,"prev_hash":"`...), prev.Hash...), '"')
	if len(prev.Hash) > sha256.Size*2 || !bytes.HasSuffix(body, tail) {
		return "", false
	}
	sum := sha256.New()
	sum.Write(body)
	sum.Write([]byte{'}'})
	var got [sha256.Size]byte
	var hexed [sha256.Size * 2]byte
	hex.Encode(hexed[:], sum.Sum(got[:0]))
	if string(hexed[:]) != string(h) {
		return "", false
	}
	return string(h), true
}

// auditHead is the last record of the chain.
type auditHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// chain links rec after h, the chain's last record: it sets rec's sequence, previous hash and hash, and
// returns rec and the chain's new head.
func (h auditHead) chain(rec auditRecord) (auditRecord, auditHead) {
	rec.Seq, rec.PrevHash = h.Seq+1, h.Hash
	rec.Hash = rec.computeHash()
	return rec, auditHead{Seq: rec.Seq, Hash: rec.Hash}
}

// documentDigest is a document's digest in its put's audit record: its SHA-256, in hex.
func documentDigest(doc []byte) string {
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:])
}

// auditCheckpoint stands for the pruned prefix of the chain: the sequence and hash of the last pruned
// record. The first kept record must carry Hash as its prev_hash. Retention rule: the store keeps the
// newest Options.AuditRetention records; when the log grows auditPruneSlack past that, the oldest are
// deleted in the same transaction as the commit that crossed the line, and the checkpoint moves to the
// last deleted record. The chain from the checkpoint to the head stays verifiable. The records pruned
// are verified as they go: the first break found among them is kept in the checkpoint for good
// (BrokenSeq, Problem), so VerifyAudit goes on reporting it, and pruning (and so every write) goes on.
type auditCheckpoint struct {
	Seq       uint64 `json:"seq"`
	Hash      string `json:"hash"`
	BrokenSeq uint64 `json:"broken_seq,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// AuditReport is the result of VerifyAudit.
type AuditReport struct {
	// Records is the number of kept records checked.
	Records uint64
	// HeadSeq and HeadHash name the last record (0 and "" for an empty log).
	HeadSeq  uint64
	HeadHash string
	// CheckpointSeq is the sequence of the last pruned record (0 when nothing was pruned).
	CheckpointSeq uint64
	// BrokenSeq is the sequence of the first broken link, 0 when the chain is intact; Problem says
	// what is wrong with it.
	BrokenSeq uint64
	Problem   string
}

// OK reports whether the chain is intact.
func (r AuditReport) OK() bool { return r.Problem == "" }

// String renders the report the way `statectl audit verify` prints it.
func (r AuditReport) String() string {
	if r.OK() {
		return fmt.Sprintf("OK: %d records, hash chain intact (head seq %d, hash %s)", r.Records, r.HeadSeq, r.HeadHash)
	}
	return fmt.Sprintf("BROKEN: record seq %d: %s", r.BrokenSeq, r.Problem)
}
