package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// The admin operations (wire/admin.go) have no store/client API yet: these helpers speak them over
// the client's connection, the way the client speaks the state operations.

var adminRequestID atomic.Int64

// adminCall sends one admin request on <prefix>.admin.v1.<principal>.<op> and returns the ok
// AdminResult, or its *wire.Error. A principal that may not publish there (not an admin) gets no
// reply from NATS, only a permissions violation: that is PERMISSION_DENIED.
func (a *app) adminCall(ctx context.Context, cn *conn, op wire.Op, build func(id int64) any) (wire.AdminResult, error) {
	id := adminRequestID.Add(1)
	data, err := json.Marshal(build(id))
	if err != nil {
		return wire.AdminResult{}, err
	}
	subj := wire.AdminSubject(a.g.prefix, cn.c.Principal(), op)
	ctx, cancel := context.WithTimeout(ctx, a.g.timeout)
	defer cancel()
	var msg *nats.Msg
	err = cn.do(ctx, func(v error) error {
		return wire.Errorf(wire.CodePermissionDenied, "principal %s may not use admin operations (NATS: %v)", cn.c.Principal(), v)
	}, func(ctx context.Context) (err error) {
		msg, err = cn.c.Conn().RequestWithContext(ctx, subj, data)
		return err
	})
	if err != nil {
		if wire.CodeOf(err) != "" {
			return wire.AdminResult{}, err
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return wire.AdminResult{}, wire.Errorf(wire.CodeUnavailable, "no state server answered on %s", subj)
		}
		return wire.AdminResult{}, fmt.Errorf("%s request on %s: %w", op, subj, err)
	}
	// Replies are decoded tolerantly, as store/client decodes the state operations': a newer server
	// may add fields (wire.Decode is the strict decoder of requests).
	var res wire.AdminResult
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		return res, fmt.Errorf("malformed %s reply: %v", op, err)
	}
	if res.RequestID != id {
		return res, fmt.Errorf("%s reply has request_id %d, sent %d", op, res.RequestID, id)
	}
	if !res.OK {
		if res.Error == nil || res.Error.Code == "" {
			return res, fmt.Errorf("%s reply is not ok and carries no error", op)
		}
		return res, res.Error
	}
	return res, nil
}

func (a *app) backupStep(ctx context.Context, cn *conn, step, backupID string, offset int64) (wire.AdminResult, error) {
	return a.adminCall(ctx, cn, wire.AdminBackup, func(id int64) any {
		return wire.BackupRequest{RequestID: id, Step: step, BackupID: backupID, Offset: offset}
	})
}

// backupSummary is what backup prints with --json.
type backupSummary struct {
	File     string `json:"file"`
	BackupID string `json:"backup_id"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
}

func (a *app) cmdBackup(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	pos, err := a.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return err
	}
	file := pos[0]
	dest, err := backupDestination(file)
	if err != nil {
		return err
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	open, err := a.backupStep(ctx, cn, "open", "", 0)
	if err != nil {
		return err
	}
	defer func() {
		// Always discard the server's copy; a failure here costs only its idle timeout.
		if _, cerr := a.backupStep(context.WithoutCancel(ctx), cn, "close", open.BackupID, 0); cerr != nil {
			fmt.Fprintf(a.stderr, "statectl: backup: closing backup %s on the server: %v\n", open.BackupID, cerr)
		}
	}()
	a.setLeftBehind(fmt.Sprintf("a temporary file .%s.tmp-* may be left beside %s, and the server discards backup %s only after its idle timeout",
		filepath.Base(dest), dest, open.BackupID))
	if err := a.download(ctx, cn, open, dest); err != nil {
		return err
	}
	if a.g.json {
		return writeJSON(a.stdout, backupSummary{File: file, BackupID: open.BackupID, Size: open.Size, SHA256: open.SHA256})
	}
	_, err = fmt.Fprintf(a.stdout, "backup %s: %d bytes, sha256 %s\n", file, open.Size, open.SHA256)
	return err
}

// backupDestination returns the path the backup is renamed to, refusing, before anything is
// downloaded, a FILE it could not or must not be renamed over: empty or "-" (usage), a directory, in
// a directory that does not exist, or an existing file that is not a regular file (a device, a FIFO,
// a socket: `backup /dev/stdout` run as root would replace the device's node). An existing regular
// file is replaced; a symbolic link is followed, and the regular file it points to is replaced (the
// link stays), as cp writes through one.
func backupDestination(file string) (string, error) {
	if file == "" {
		return "", usageErrorf("backup: FILE is empty")
	}
	if file == "-" {
		return "", usageErrorf("backup: FILE is -: the backup is written to a file (atomically, by a rename), not to stdout; name a file")
	}
	dest := file
	fi, err := os.Lstat(file)
	if err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if dest, err = filepath.EvalSymlinks(file); err != nil {
			return "", fmt.Errorf("backup: %s is a symbolic link that does not lead to a file: %v", file, err)
		}
		fi, err = os.Lstat(dest)
	}
	switch {
	case err == nil && fi.IsDir():
		return "", fmt.Errorf("backup: %s is a directory; name a file", file)
	case err == nil && !fi.Mode().IsRegular():
		return "", fmt.Errorf("backup: %s is %s, not a regular file: the backup would replace it; name a file", file, fileKind(fi.Mode()))
	}
	if fi, err := os.Stat(filepath.Dir(dest)); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("backup: the directory of %s does not exist", dest)
	}
	return dest, nil
}

// fileKind names the type of a file that is neither regular nor a directory.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// download reads the opened backup chunk by chunk into a temporary file beside file, checks its size
// and sha256, syncs it and renames it to file.
func (a *app) download(ctx context.Context, cn *conn, open wire.AdminResult, file string) (err error) {
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	var offset int64
	for {
		r, err := a.backupStep(ctx, cn, "read", open.BackupID, offset)
		if err != nil {
			return fmt.Errorf("backup read at %d: %w", offset, err)
		}
		if len(r.Data) == 0 && !r.EOF {
			return fmt.Errorf("backup read at %d of %d: no data and no eof", offset, open.Size)
		}
		if _, err := tmp.Write(r.Data); err != nil {
			return err
		}
		h.Write(r.Data)
		offset += int64(len(r.Data))
		if r.EOF {
			break
		}
	}
	if err := verifyDownload(open, offset, h); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // make the rename durable where the file system allows
		d.Close()
	}
	return nil
}

func verifyDownload(open wire.AdminResult, size int64, h hash.Hash) error {
	if size != open.Size {
		return fmt.Errorf("backup: received %d bytes, the server announced %d", size, open.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != open.SHA256 {
		return fmt.Errorf("backup: sha256 of the received bytes is %s, the server announced %s", sum, open.SHA256)
	}
	return nil
}

func (a *app) cmdAudit(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	pos, err := a.parse(cmd, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if pos[0] != "verify" {
		return usageErrorf("audit: unknown subcommand %q (audit verify)", pos[0])
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	res, err := a.adminCall(ctx, cn, wire.AdminAuditVerify, func(id int64) any { return wire.AuditVerifyRequest{RequestID: id} })
	if err != nil {
		return err
	}
	rep := res.Audit
	if rep == nil {
		return errors.New("audit_verify reply carries no report")
	}
	if a.g.json {
		err = writeJSON(a.stdout, rep)
	} else {
		_, err = fmt.Fprintln(a.stdout, rep.Text)
	}
	if err != nil {
		return err
	}
	if rep.Problem != "" || rep.BrokenSeq != 0 {
		return &cliError{code: exitFailure, label: "AUDIT_BROKEN", answered: a.g.json, err: fmt.Errorf("the audit chain is broken at seq %d: %s", rep.BrokenSeq, rep.Problem)}
	}
	return nil
}
