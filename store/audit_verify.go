package store

import (
	"errors"
	"fmt"
)

// verifyChain walks the backend's audit log and reports the first broken link: a record that does
// not decode, a sequence jump, a prev_hash that is not the previous hash, a hash that does not match
// the content, or a recorded head that is not the last record (a truncated tail).
func verifyChain(be backend) (AuditReport, error) {
	var rep AuditReport
	var prev auditHead
	started := false
	cp, head, err := be.scanAudit(func(cp auditCheckpoint, rec *auditRecord, raw []byte) error {
		fail := func(seq uint64, format string, args ...any) error {
			rep.BrokenSeq = seq
			rep.Problem = fmt.Sprintf(format, args...)
			return errStopScan
		}
		if !started {
			started = true
			prev = auditHead(cp)
		}
		if rec == nil {
			return fail(prev.Seq+1, "record does not decode: %.80q", raw)
		}
		if rec.Seq != prev.Seq+1 {
			return fail(prev.Seq+1, "sequence jumps from %d to %d", prev.Seq, rec.Seq)
		}
		if rec.PrevHash != prev.Hash {
			return fail(rec.Seq, "prev_hash %s does not match the previous hash %s", rec.PrevHash, prev.Hash)
		}
		if h := rec.computeHash(); rec.Hash != h {
			return fail(rec.Seq, "hash %s does not match the record's content (%s)", rec.Hash, h)
		}
		prev = auditHead{Seq: rec.Seq, Hash: rec.Hash}
		rep.Records++
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return rep, err
	}
	rep.CheckpointSeq = cp.Seq
	if !rep.OK() {
		return rep, nil
	}
	if !started {
		prev = auditHead(cp)
	}
	if head != prev {
		rep.BrokenSeq = prev.Seq + 1
		rep.Problem = fmt.Sprintf("recorded head is seq %d hash %s but the chain ends at seq %d", head.Seq, head.Hash, prev.Seq)
		return rep, nil
	}
	rep.HeadSeq, rep.HeadHash = prev.Seq, prev.Hash
	return rep, nil
}

var errStopScan = errors.New("stop scan")
