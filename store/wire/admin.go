package wire

// Admin operations extend SPEC section 5 for operators: they travel on
// <prefix>.admin.v1.<principal>.<op>, are answered only for admin principals (PERMISSION_DENIED
// otherwise), and reply with an AdminResult.
const (
	// AdminBackup takes an online backup and serves it in chunks: Step "open" snapshots the store
	// (one read transaction) and answers BackupID, Size and SHA256; "read" answers up to
	// MaxBackupChunk bytes from Offset; "close" discards it (it is also discarded when idle for a
	// while).
	AdminBackup Op = "backup"
	// AdminAuditVerify walks the audit chain and answers the report.
	AdminAuditVerify Op = "audit_verify"
)

// MaxBackupChunk is the most data one backup read answers.
const MaxBackupChunk = 512 * 1024

// AdminSubject is the request subject of an admin op.
func AdminSubject(prefix, principal string, op Op) string {
	return prefix + ".admin.v1." + principal + "." + string(op)
}

// BackupRequest is one step of a chunked backup.
type BackupRequest struct {
	RequestID int64  `json:"request_id"`
	Step      string `json:"step"`
	BackupID  string `json:"backup_id,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
}

// AuditVerifyRequest asks for an audit chain check.
type AuditVerifyRequest struct {
	RequestID int64 `json:"request_id"`
}

// AuditReport is the outcome of an audit chain check. Problem is empty when the chain is intact;
// otherwise BrokenSeq is the first broken record.
type AuditReport struct {
	Records       uint64 `json:"records"`
	HeadSeq       uint64 `json:"head_seq"`
	HeadHash      string `json:"head_hash"`
	CheckpointSeq uint64 `json:"checkpoint_seq"`
	BrokenSeq     uint64 `json:"broken_seq,omitempty"`
	Problem       string `json:"problem,omitempty"`
	Text          string `json:"text"`
}

// AdminResult is the reply of an admin op.
type AdminResult struct {
	RequestID int64        `json:"request_id"`
	OK        bool         `json:"ok"`
	Error     *Error       `json:"error,omitempty"`
	BackupID  string       `json:"backup_id,omitempty"`
	Size      int64        `json:"size,omitempty"`
	SHA256    string       `json:"sha256,omitempty"`
	Data      []byte       `json:"data,omitempty"`
	EOF       bool         `json:"eof,omitempty"`
	Audit     *AuditReport `json:"audit,omitempty"`
}
