package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// backupIdle is how long an opened backup is kept without a read.
const backupIdle = 2 * time.Minute

// backups holds opened backups: consistent snapshots written to temporary files, served in chunks.
// A backup not read for backupIdle is removed by a timer of its own; closeAll removes every one and
// refuses those that open later (an open still writing when Stop gave up waiting).
type backups struct {
	mu     sync.Mutex
	files  map[string]*backupFile
	closed bool
}

type backupFile struct {
	owner string
	path  string
	size  int64
	used  time.Time
	timer *time.Timer
}

// add keeps f and returns its id; false (f's file removed) once closeAll ran.
func (b *backups) add(f *backupFile) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		os.Remove(f.path)
		return "", false
	}
	if b.files == nil {
		b.files = map[string]*backupFile{}
	}
	id := randomID()
	b.files[id] = f
	f.timer = time.AfterFunc(backupIdle, func() { b.expire(id) })
	return id, true
}

// expire removes backup id if it was not read for backupIdle, or waits again for the rest.
func (b *backups) expire(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.files[id]
	if f == nil {
		return
	}
	if idle := time.Since(f.used); idle < backupIdle {
		f.timer.Reset(backupIdle - idle)
		return
	}
	os.Remove(f.path)
	delete(b.files, id)
}

func (b *backups) get(owner, id string) *backupFile {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.files[id]
	if f == nil || f.owner != owner {
		return nil
	}
	f.used = time.Now()
	return f
}

func (b *backups) remove(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.files[id]; f != nil {
		f.timer.Stop()
		os.Remove(f.path)
		delete(b.files, id)
	}
}

func (b *backups) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for id, f := range b.files {
		f.timer.Stop()
		os.Remove(f.path)
		delete(b.files, id)
	}
}

// backupPattern names the temporary files of opened backups (os.CreateTemp's pattern).
const backupPattern = "keeppeek-backup-*.db"

// removeStaleBackups removes the backup files a stated killed before it could remove them left in dir.
// Only a directory of the server's own (Options.BackupDir) is cleaned: another process may be using
// the system's temporary directory.
func removeStaleBackups(dir string) error {
	stale, err := filepath.Glob(filepath.Join(dir, backupPattern))
	if err != nil {
		return err
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func randomID() string {
	var b [12]byte
	_, _ = io.ReadFull(randReader, b[:])
	return hex.EncodeToString(b[:])
}

// adminHandler serves an admin op for admin principals. Admin requests are requests like the state
// operations': each takes one of the MaxConcurrentRequests slots (an open backup writes the whole
// database to a file), is counted as activity, and is counted in the metrics under its op (the last
// token of its subject, as a state operation's is) and its code.
func (s *Server) adminHandler(op wire.Op) micro.HandlerFunc {
	return func(req micro.Request) {
		start := time.Now()
		if !s.replyAllowed(req.Subject(), "admin.v1", req.Reply()) {
			s.opts.Logger.Debug("admin request not served: its reply subject lies outside its principal's space",
				"subject", req.Subject(), "reply", req.Reply())
			if m := s.opts.Metrics; m != nil {
				m.observeRequest(string(op), ReplyRefused, time.Since(start))
			}
			return
		}
		s.slots <- struct{}{}     // a free slot first: past the bound, requests wait in NATS
		detached := s.detach(req) // answered after this handler returns (see detachedRequest)
		go func() {
			defer func() { <-s.slots }()
			s.serveAdmin(op, detached, start)
		}()
	}
}

// serveAdmin handles the admin request req, taken off NATS at start.
func (s *Server) serveAdmin(op wire.Op, req micro.Request, start time.Time) {
	s.activity.Add(1)
	s.inflight.RLock()
	defer s.inflight.RUnlock()
	data := req.Data()
	id := wire.RequestIDOf(data)
	var res wire.AdminResult
	if s.stopped {
		res = adminError(id, wire.Errorf(wire.CodeUnavailable, "the server is stopping"))
	} else {
		res = s.admin(op, req.Subject(), data)
	}
	res.RequestID = id
	res.Error = cutMessage(res.Error)
	body, _ := json.Marshal(res)
	respErr := req.Respond(body)
	if m := s.opts.Metrics; m != nil {
		m.observeRequest(string(op), resultCode(res.Error, respErr), time.Since(start))
	}
}

// backupChunk is the most backup data one read answers when NATS messages may hold maxPayload bytes
// (0: not known): wire.MaxBackupChunk, or less, so that the chunk, base64 in the JSON reply beside
// its other fields (envelopeRoom), fits one message. A larger reply could not be sent, and the reader
// would wait for it in vain; readers advance by the data they get, so a smaller chunk costs only
// more reads.
func backupChunk(maxPayload int64) int64 {
	if maxPayload <= 0 {
		return wire.MaxBackupChunk
	}
	return max(min(int64(wire.MaxBackupChunk), (maxPayload-envelopeRoom)/4*3), 1)
}

func adminError(id int64, err error) wire.AdminResult {
	r := wire.ErrorResult(id, err)
	return wire.AdminResult{RequestID: id, Error: r.Error}
}

// admin answers an admin call. Its checks run in the order of SPEC section 5, as every other call's:
// (0) the store is served, (1) the request's shape, (2) the principal is an admin.
func (s *Server) admin(op wire.Op, subject string, data []byte) wire.AdminResult {
	id := wire.RequestIDOf(data)
	toks, err := wire.SubjectTokens(subject, s.opts.Prefix, "admin.v1", 2)
	if err != nil {
		return adminError(id, wire.Errorf(wire.CodeInvalidArgument, "%v", err))
	}
	if err := s.st.Unavailable(); err != nil {
		return adminError(id, wire.Errorf(wire.CodeUnavailable, "state store is not served: %v", err))
	}
	var (
		audit  wire.AuditVerifyRequest
		backup wire.BackupRequest
	)
	switch op {
	case wire.AdminAuditVerify:
		err = wire.Decode(data, &audit)
	case wire.AdminBackup:
		err = wire.Decode(data, &backup)
	default:
		err = wire.Errorf(wire.CodeInvalidArgument, "unknown admin op %q", op)
	}
	if err != nil {
		return adminError(id, err)
	}
	p, ok := s.Principal(toks[0])
	if !ok || !p.Admin {
		return adminError(id, wire.Errorf(wire.CodePermissionDenied, "principal %q may not use admin operations", toks[0]))
	}
	if op == wire.AdminBackup {
		return s.backup(p, backup)
	}
	rep, err := s.st.VerifyAudit()
	if err != nil {
		return adminError(id, err) // UNAVAILABLE, or STORAGE when the database could not be read
	}
	return wire.AdminResult{OK: true, Audit: &wire.AuditReport{Records: rep.Records, HeadSeq: rep.HeadSeq, HeadHash: rep.HeadHash,
		CheckpointSeq: rep.CheckpointSeq, BrokenSeq: rep.BrokenSeq, Problem: rep.Problem, Text: rep.String()}}
}

func (s *Server) backup(p policy.Principal, r wire.BackupRequest) wire.AdminResult {
	switch r.Step {
	case "open":
		f, err := os.CreateTemp(s.opts.BackupDir, backupPattern)
		if err != nil {
			return adminError(r.RequestID, wire.Errorf(wire.CodeStorage, "backup: %v", err))
		}
		h := sha256.New()
		// The server's context: Stop ends it once its own context has ended, and the backup then
		// stops writing and ends its read transaction, which the store's Close waits for. A backup
		// of a large database would otherwise hold a SIGTERM past its deadline.
		n, err := s.st.Backup(s.ctx, p, io.MultiWriter(f, h))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			if errors.Is(err, context.Canceled) {
				err = wire.Errorf(wire.CodeUnavailable, "the server is stopping")
			}
			return adminError(r.RequestID, err)
		}
		bid, ok := s.backups.add(&backupFile{owner: p.ID, path: f.Name(), size: n, used: time.Now()})
		if !ok {
			return adminError(r.RequestID, wire.Errorf(wire.CodeUnavailable, "the server is stopping"))
		}
		return wire.AdminResult{OK: true, BackupID: bid, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	case "read":
		bf := s.backups.get(p.ID, r.BackupID)
		if bf == nil {
			return adminError(r.RequestID, wire.Errorf(wire.CodeNotFound, "no open backup %q", r.BackupID))
		}
		if r.Offset < 0 || r.Offset > bf.size {
			return adminError(r.RequestID, wire.Errorf(wire.CodeInvalidArgument, "offset %d outside 0 to %d", r.Offset, bf.size))
		}
		f, err := os.Open(bf.path)
		if err != nil {
			return adminError(r.RequestID, wire.Errorf(wire.CodeStorage, "backup: %v", err))
		}
		defer f.Close()
		buf := make([]byte, min(backupChunk(s.nc.MaxPayload()), bf.size-r.Offset))
		if _, err := f.ReadAt(buf, r.Offset); err != nil && err != io.EOF {
			return adminError(r.RequestID, wire.Errorf(wire.CodeStorage, "backup: %v", err))
		}
		return wire.AdminResult{OK: true, BackupID: r.BackupID, Size: bf.size, Data: buf, EOF: r.Offset+int64(len(buf)) >= bf.size}
	case "close":
		if s.backups.get(p.ID, r.BackupID) == nil {
			return adminError(r.RequestID, wire.Errorf(wire.CodeNotFound, "no open backup %q", r.BackupID))
		}
		s.backups.remove(r.BackupID)
		return wire.AdminResult{OK: true, BackupID: r.BackupID}
	}
	return adminError(r.RequestID, wire.Errorf(wire.CodeInvalidArgument, "step must be open, read or close"))
}
