package client

import (
	"context"
	"errors"

	"github.com/keeppeek/coordination/store/wire"
)

// MaxUpdateAttempts bounds Update's read-merge-write rounds; after that many CONFLICTs it returns
// the last one.
const MaxUpdateAttempts = 16

// Update is the reread-merge-retry write of a shared document. Each round reads namespace/key (cur
// is nil when the key is missing), calls fn with it, and puts what fn returns with expected_revision
// set to cur's revision (0, create only, when it was missing), so the write lands only on the state fn
// saw. On CONFLICT the round starts again from the read, up to MaxUpdateAttempts rounds; any other
// error ends Update. It never writes blindly. An error that is no *wire.Error (no reply came) leaves
// the last put's outcome unknown: an Update called again then merges onto whatever the store holds,
// which may already include that put (a merge that is not idempotent, a counter, is then applied
// twice): read the key back to tell.
//
// fn must be a pure merge of cur (it may run several times) and returns the full put: Schema,
// Document, and optionally TTLMs and Guard. Namespace and Key may be left empty (they are filled in;
// other values are INVALID_ARGUMENT) and ExpectedRevision is always overwritten. fn returning
// (nil, nil) means "no change": Update returns cur (the zero Entry when the key is missing) and writes
// nothing. An error from fn ends Update with that error.
func (c *Client) Update(ctx context.Context, namespace, key string, fn func(cur *wire.Entry) (*wire.PutRequest, error)) (wire.Entry, error) {
	var lastErr error
	for attempt := 0; attempt < MaxUpdateAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return wire.Entry{}, err
		}
		var cur *wire.Entry
		e, err := c.Get(ctx, namespace, key)
		switch {
		case err == nil:
			cur = &e
		case errors.Is(err, wire.ErrNotFound):
		default:
			return wire.Entry{}, err
		}
		var arg *wire.Entry
		if cur != nil {
			cp := *cur
			arg = &cp
		}
		req, err := fn(arg)
		if err != nil {
			return wire.Entry{}, err
		}
		if req == nil {
			if cur == nil {
				return wire.Entry{}, nil
			}
			return *cur, nil
		}
		put := *req
		if put.Namespace == "" {
			put.Namespace = namespace
		}
		if put.Key == "" {
			put.Key = key
		}
		if put.Namespace != namespace || put.Key != key {
			return wire.Entry{}, wire.Errorf(wire.CodeInvalidArgument, "update of %s:%s returned a put of %s:%s", namespace, key, put.Namespace, put.Key)
		}
		var expected int64
		if cur != nil {
			expected = int64(cur.Revision)
		}
		put.ExpectedRevision = &expected
		stored, err := c.Put(ctx, put)
		if err == nil {
			return stored, nil
		}
		if !errors.Is(err, wire.ErrConflict) {
			return wire.Entry{}, err
		}
		lastErr = err
	}
	return wire.Entry{}, lastErr
}
