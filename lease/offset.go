package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/keeppeek/coordination/store/wire"
)

// offsetSchema is the schema of the resume offset entry. No registered schema is made for offsets;
// keeppeek.observed-status.v1 is the one allowed in service namespaces that can say "this job is
// running, and here is how far it got": subject_key is the lease key (the job's name), state is
// "active", observed_at_ms the time of the save, message the offset and holder the saving worker.
const offsetSchema = wire.SchemaObservedStatus

// offsetDocument is the keeppeek.observed-status.v1 document that carries an offset.
type offsetDocument = wire.ObservedStatus

// LoadOffset returns the resume offset saved under Options.OffsetKey, or "" when none was saved yet.
// Reading needs no lease; a new holder calls it first to resume where the previous one stopped.
func (l *Lease) LoadOffset(ctx context.Context) (string, error) {
	if l.o.OffsetKey == "" {
		return "", errors.New("lease: no OffsetKey configured")
	}
	e, err := l.c.Get(ctx, l.o.Namespace, l.o.OffsetKey)
	if errors.Is(err, wire.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("lease: load offset %s:%s: %w", l.o.Namespace, l.o.OffsetKey, err)
	}
	var d offsetDocument
	if e.Schema != offsetSchema || json.Unmarshal(e.Document, &d) != nil || d.SubjectKey != l.o.Key {
		return "", fmt.Errorf("lease: %s is not the offset of %s (schema %s)", e.String(), l.o.Key, e.Schema)
	}
	return d.Message, nil
}

// SaveOffset stores offset (at most 256 bytes of UTF-8; typically a decimal position) under
// Options.OffsetKey with a guarded Put, so only the current holder can move it: a former holder gets
// ErrNotHeld or the store's GUARD_FAILED (both match wire.ErrGuardFailed). An offset over 256 bytes
// (the document's limit) or not valid UTF-8 is refused (INVALID_ARGUMENT) without a write: a JSON
// document would carry invalid bytes as U+FFFD, and LoadOffset would hand the next holder another
// offset than the one saved. The store's content guard (SPEC section 13) may refuse others
// (SCHEMA_INVALID): more than 8 line breaks, a "data:" prefix, a PEM marker.
func (l *Lease) SaveOffset(ctx context.Context, offset string) error {
	if l.o.OffsetKey == "" {
		return errors.New("lease: no OffsetKey configured")
	}
	if len(offset) > maxOffsetBytes {
		return wire.Errorf(wire.CodeInvalidArgument, "lease: offset of %d bytes is over %d", len(offset), maxOffsetBytes)
	}
	if !utf8.ValidString(offset) {
		return wire.Errorf(wire.CodeInvalidArgument, "lease: offset %q is not valid UTF-8", offset)
	}
	doc, err := json.Marshal(offsetDocument{SubjectKey: l.o.Key, State: "active",
		ObservedAtMs: time.Now().UnixMilli(), Message: offset, Holder: l.o.Holder})
	if err != nil {
		return fmt.Errorf("lease: encode offset: %w", err)
	}
	_, err = l.Put(ctx, wire.PutRequest{Key: l.o.OffsetKey, Schema: offsetSchema, Document: doc})
	if err != nil {
		return fmt.Errorf("lease: save offset %s:%s: %w", l.o.Namespace, l.o.OffsetKey, err)
	}
	return nil
}
