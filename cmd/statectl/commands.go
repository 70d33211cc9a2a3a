package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// maxDocumentInput bounds what put reads; the server's max_document_bytes is far lower.
const maxDocumentInput = 64 << 20

func (a *app) cmdGet(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	pos, err := a.parse(cmd, fs, args, 2, 2)
	if err != nil {
		return err
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	var e wire.Entry
	err = cn.state(ctx, func(ctx context.Context) (err error) { e, err = cn.c.Get(ctx, pos[0], pos[1]); return err })
	if err != nil {
		return err
	}
	if a.g.json {
		return writeJSON(a.stdout, e)
	}
	return writeEntry(a.stdout, e, true)
}

// writeFlags are the conditions of put and delete.
type writeFlags struct {
	expect optionalInt
	guard  optionalString
}

func (w *writeFlags) register(fs *flag.FlagSet) {
	fs.Var(&w.expect, "expect-revision", "")
	fs.Var(&w.guard, "guard", "")
}

func (w *writeFlags) guardValue() (*wire.Guard, error) {
	if !w.guard.set {
		return nil, nil
	}
	g, err := parseGuard(w.guard.v)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	return g, nil
}

func (a *app) cmdPut(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	var wf writeFlags
	wf.register(fs)
	var ttl optionalString
	fs.Var(&ttl, "ttl", "")
	pos, err := a.parse(cmd, fs, args, 3, 4)
	if err != nil {
		return err
	}
	req := wire.PutRequest{Namespace: pos[0], Key: pos[1], Schema: pos[2], ExpectedRevision: wf.expect.ptr()}
	if req.Guard, err = wf.guardValue(); err != nil {
		return err
	}
	if ttl.set {
		ms, err := parseTTL(ttl.v)
		if err != nil {
			return usageErrorf("%v", err)
		}
		if ms > 0 {
			req.TTLMs = &ms
		}
	}
	src := "-"
	if len(pos) == 4 {
		src = pos[3]
	}
	raw, err := a.readDocument(ctx, src)
	if err != nil {
		return err
	}
	if raw, err = documentText(raw); err != nil {
		return err
	}
	if req.Document, err = wire.CompactDocument(raw); err != nil {
		return err
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	var e wire.Entry
	err = cn.state(ctx, func(ctx context.Context) (err error) { e, err = cn.c.Put(ctx, req); return err })
	if err != nil {
		return err
	}
	if a.g.json {
		return writeJSON(a.stdout, e)
	}
	return writeEntry(a.stdout, e, false)
}

// readDocument reads the document from a file, or stdin for "-". ctx ends the wait: statectl catches
// Ctrl-C, and a read from a terminal (or a FIFO) nobody writes to would otherwise never end. The
// abandoned read goes on until its input ends or the process exits.
func (a *app) readDocument(ctx context.Context, src string) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := readAll(a.stdin, src)
		done <- read{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read the document: %w", ctx.Err())
	}
}

// utf8BOM is the UTF-8 encoding of U+FEFF, the byte order mark.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// documentText returns the JSON text of a document as read: without the one UTF-8 byte order mark
// it may start with. Windows editors (Notepad, PowerShell's Out-File) write one, and JSON has no
// place for it (RFC 8259 section 8.1 lets a parser ignore it), so refused it would read as "document
// must be a JSON object" of a file that is one. CRLF line ends and surrounding whitespace need no
// help: they are JSON whitespace. A UTF-16 or UTF-32 document (its BOM says so) and a BOM past the
// first are refused, naming what is wrong.
func documentText(b []byte) ([]byte, error) {
	switch {
	case bytes.HasPrefix(b, utf8BOM):
		b = b[len(utf8BOM):]
	case bytes.HasPrefix(b, []byte{0xFE, 0xFF}), bytes.HasPrefix(b, []byte{0xFF, 0xFE}), bytes.HasPrefix(b, []byte{0, 0, 0xFE, 0xFF}):
		return nil, wire.Errorf(wire.CodeInvalidArgument, "the document is UTF-16 or UTF-32 (it starts with that byte order mark): save it as UTF-8")
	}
	if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), utf8BOM) {
		return nil, wire.Errorf(wire.CodeInvalidArgument, "the document has a byte order mark (U+FEFF) where its JSON should start")
	}
	return b, nil
}

// readAll reads the document of src ("-": stdin), at most maxDocumentInput bytes.
func readAll(stdin io.Reader, src string) ([]byte, error) {
	r := stdin
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDocumentInput+1))
	if err != nil {
		return nil, fmt.Errorf("read the document: %w", err)
	}
	if len(b) > maxDocumentInput {
		return nil, fmt.Errorf("the document is over %d bytes", maxDocumentInput)
	}
	return b, nil
}

func (a *app) cmdDelete(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	var wf writeFlags
	wf.register(fs)
	pos, err := a.parse(cmd, fs, args, 2, 2)
	if err != nil {
		return err
	}
	if wf.expect.set && wf.expect.v == 0 {
		return usageErrorf("delete: --expect-revision 0 (create only) has no meaning for a delete: give the entry's revision")
	}
	req := wire.DeleteRequest{Namespace: pos[0], Key: pos[1], ExpectedRevision: wf.expect.ptr()}
	if req.Guard, err = wf.guardValue(); err != nil {
		return err
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	var rev uint64
	err = cn.state(ctx, func(ctx context.Context) (err error) { rev, err = cn.c.Delete(ctx, req); return err })
	if err != nil {
		return err
	}
	if a.g.json {
		// The delete's StateStoreResult (the client keeps its request_id to itself: 0 here).
		return writeJSON(a.stdout, wire.Result{OK: true, Revision: &rev})
	}
	_, err = fmt.Fprintf(a.stdout, "deleted %s %s at revision %d\n", req.Namespace, req.Key, rev)
	return err
}

func (a *app) cmdLs(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	limit := fs.Int64("limit", 0, "")
	pos, err := a.parse(cmd, fs, args, 1, 2)
	if err != nil {
		return err
	}
	if *limit < 0 || *limit > wire.MaxListLimit {
		return usageErrorf("--limit %d: a page holds 1 to %d entries (0: the server's default, %d)", *limit, wire.MaxListLimit, wire.DefaultListLimit)
	}
	req := wire.ListRequest{Namespace: pos[0], Limit: *limit}
	if len(pos) == 2 {
		req.KeyPrefix = pos[1]
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	// One StateStoreResult holding every page's entries and the last page's revision (request_id 0:
	// there were several requests).
	all := wire.Result{OK: true, Entries: []wire.Entry{}, Revision: new(uint64)}
	for {
		var page client.ListResult
		err := cn.state(ctx, func(ctx context.Context) (err error) { page, err = cn.c.List(ctx, req); return err })
		if err != nil {
			return err
		}
		all.Entries = append(all.Entries, page.Entries...)
		*all.Revision = page.Revision
		if page.NextAfterKey == "" {
			break
		}
		if page.NextAfterKey <= req.AfterKey {
			// Keys come in order, so the next page starts past this one: a server that says otherwise
			// would have statectl ask for the same page for ever.
			return fmt.Errorf("list of %s did not advance past %q (next_after_key %q)", req.Namespace, req.AfterKey, page.NextAfterKey)
		}
		req.AfterKey = page.NextAfterKey
	}
	if a.g.json {
		return writeJSON(a.stdout, all)
	}
	return writeEntryTable(a.stdout, all.Entries)
}

func (a *app) cmdInfo(ctx context.Context, cmd *command, args []string) error {
	fs := a.flagSet(cmd.name)
	if _, err := a.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	defer cn.close()
	var info wire.Info
	err = cn.state(ctx, func(ctx context.Context) (err error) { info, err = cn.c.Info(ctx); return err })
	if err != nil {
		return err
	}
	if a.g.json {
		return writeJSON(a.stdout, info)
	}
	return writeInfo(a.stdout, info)
}
