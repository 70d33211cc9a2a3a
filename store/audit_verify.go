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
			prev = auditHead{Seq: cp.Seq, Hash: cp.Hash}
		}
		if rec == nil {
			return fail(prev.Seq+1, "record does not decode: %.80q", raw)
		}
		if problem := checkLink(prev, rec); problem != "" {
			return fail(prev.Seq+1, "%s", problem)
		}
		prev = auditHead{Seq: rec.Seq, Hash: rec.Hash}
		rep.Records++
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return rep, err
	}
	rep.CheckpointSeq = cp.Seq
	if cp.BrokenSeq != 0 {
		// A break among records pruned since: the first one found stands.
		rep.BrokenSeq, rep.Problem = cp.BrokenSeq, "in the pruned records: "+cp.Problem
		return rep, nil
	}
	if !rep.OK() {
		return rep, nil
	}
	if !started {
		prev = auditHead{Seq: cp.Seq, Hash: cp.Hash}
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

// checkLink reports what is wrong with rec as the record after prev, or "".
func checkLink(prev auditHead, rec *auditRecord) string {
	switch {
	case rec.Seq != prev.Seq+1:
		return fmt.Sprintf("sequence jumps from %d to %d", prev.Seq, rec.Seq)
	case rec.PrevHash != prev.Hash:
		return fmt.Sprintf("prev_hash %s does not match the previous hash %s", rec.PrevHash, prev.Hash)
	}
	if h := rec.computeHash(); rec.Hash != h {
		return fmt.Sprintf("hash %s does not match the record's content (%s)", rec.Hash, h)
	}
	return ""
}

// verifyLink checks the stored record raw, kept under seq, as the record after prev; it returns the
// chain's new end (the record's own seq and hash, or seq and "" when it does not decode) and what is
// wrong, or "".
func verifyLink(prev auditHead, seq uint64, raw []byte) (auditHead, string) {
	if h, ok := quickLink(prev, seq, raw); ok {
		return auditHead{Seq: seq, Hash: h}, ""
	}
	return fullLink(prev, seq, raw)
}

// fullLink is verifyLink's check of any form: raw decoded strictly, then checkLink.
func fullLink(prev auditHead, seq uint64, raw []byte) (auditHead, string) {
	var rec auditRecord
	if err := strictJSON(raw, &rec); err != nil {
		return auditHead{Seq: seq}, fmt.Sprintf("record does not decode: %v", err)
	}
	if rec.Seq != seq {
		return auditHead{Seq: seq, Hash: rec.Hash}, fmt.Sprintf("the record kept under seq %d says seq %d", seq, rec.Seq)
	}
	return auditHead{Seq: rec.Seq, Hash: rec.Hash}, checkLink(prev, &rec)
}
