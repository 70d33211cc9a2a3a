package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	b, _ := json.Marshal(r) // a struct of strings and integers always encodes
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// auditHead is the last record of the chain.
type auditHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
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
