package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// Values of MediaIntent fields (SPEC section 13).
const (
	RolePublish   = "publish"
	RoleSubscribe = "subscribe"

	MediaKindVideo = "video"
	MediaKindAudio = "audio"

	RecordingInherit  = "inherit"
	RecordingDisabled = "disabled"
	RecordingRequired = "required"
)

// MediaIntent is the document of a keeppeek.media-intent.v1 entry (wire.MediaIntent): a desired
// publication or subscription of one stable media source. Optional fields are omitted when zero
// (Priority when nil, so that an explicit 0 is kept: Priority: new(0)). Another coordinator may own
// another service's Parameters entry: PutIntent keeps the entries it is not given, and an entry whose
// value is nil (or JSON null) means "remove this service's entry".
type MediaIntent = wire.MediaIntent

// PublishIntent returns a desired publish intent of one source with the recording mode a publish
// intent requires.
func PublishIntent(sourceID, mediaKind, recordingMode string) MediaIntent {
	return MediaIntent{Role: RolePublish, Desired: true, SourceID: sourceID, MediaKind: mediaKind, RecordingMode: recordingMode}
}

// SubscribeIntent returns a desired subscribe intent of one source.
func SubscribeIntent(sourceID, mediaKind string) MediaIntent {
	return MediaIntent{Role: RoleSubscribe, Desired: true, SourceID: sourceID, MediaKind: mediaKind}
}

// ValidateIntent checks, locally, that in may be written in namespace: a valid namespace
// (INVALID_ARGUMENT otherwise), not system (PERMISSION_DENIED: nobody writes it), of a kind that
// holds intents (service/<id> or user/<id>), and a document that matches keeppeek.media-intent.v1 and
// passes the content guard (SCHEMA_INVALID otherwise, the registry's *wire.Error). It answers as a
// write would, in the server's order, but cannot know the principal's admin right nor the server's
// max_document_bytes: a write the namespace policy refuses it (service/<id> by a non-admin, say) is
// still PERMISSION_DENIED by the server, and a document over the server's bound is TOO_LARGE there
// (before its schema is looked at), while here it is SCHEMA_INVALID if it also breaks the schema and
// passes otherwise. Parameters entries that are nil are left out, as a write leaves them out.
func (c *Coordinator) ValidateIntent(namespace string, in MediaIntent) error {
	return validateIntent(c.reg, namespace, in)
}

// CheckIntent checks in, before anything is sent or even connected, as PutIntent checks it at
// namespace/key: the namespace and the key, then ValidateIntent's rules, with a schema registry
// compiled once per process. It is for a program that refuses a bad intent as bad usage before it
// connects (a command line); the errors are PutIntent's.
func CheckIntent(namespace, key string, in MediaIntent) error {
	if err := checkTarget(namespace, key); err != nil {
		return err
	}
	reg, err := defaultRegistry()
	if err != nil {
		return err
	}
	in.Parameters = withoutNulls(in.Parameters)
	return validateIntent(reg, namespace, in)
}

// defaultRegistry is CheckIntent's registry, compiled at its first call.
var defaultRegistry = sync.OnceValues(schema.New)

// validateIntent is ValidateIntent with reg.
func validateIntent(reg *schema.Registry, namespace string, in MediaIntent) error {
	if !wire.ValidNamespace(namespace) {
		return wire.Errorf(wire.CodeInvalidArgument, "invalid namespace %q", namespace)
	}
	if err := checkWritable(namespace); err != nil {
		return err
	}
	doc, err := encodeIntent(&in)
	if err != nil {
		return err
	}
	return reg.Validate(schema.MediaIntentV1, namespace, doc)
}

// PutIntent writes in as the intent at namespace/key: it creates the entry when the key is missing
// and otherwise replaces the whole document, with one merge: parameters entries of services that in
// does not name stay as stored (another coordinator may own them), while the entries in names are
// taken from in (a nil one removes that service's entry). Every other field is exactly in's: a field
// in leaves unset is absent afterwards.
//
// in is validated locally first, as ValidateIntent checks it; a bad intent never reaches the server,
// and the error is the registry's *wire.Error with code SCHEMA_INVALID (errors.Is(err,
// wire.ErrSchemaInvalid)); an invalid namespace or key is INVALID_ARGUMENT, the system namespace
// PERMISSION_DENIED, a namespace of a kind that holds no intents SCHEMA_INVALID. The write
// is a compare-and-set on the revision read (create-only when missing); on CONFLICT it rereads,
// merges again and retries, up to client.MaxUpdateAttempts rounds; any other error ends it. A key
// that holds an entry of another schema is not replaced (ErrWrongSchema). The intent carries no
// lease: a stored intent that had a TTL loses it. Writing a document equal to the stored one (same
// principal, no lease) writes nothing and returns the stored entry.
func (c *Coordinator) PutIntent(ctx context.Context, namespace, key string, in MediaIntent) (wire.Entry, error) {
	if err := checkTarget(namespace, key); err != nil {
		return wire.Entry{}, err
	}
	base := in
	base.Parameters = withoutNulls(in.Parameters)
	if err := c.ValidateIntent(namespace, base); err != nil {
		return wire.Entry{}, err
	}
	return c.write(ctx, namespace, key, schema.MediaIntentV1, func(cur *wire.Entry) ([]byte, error) {
		next := base
		next.Parameters = maps.Clone(base.Parameters)
		if cur != nil {
			old, err := decodeIntent(cur)
			if err != nil {
				return nil, err
			}
			for svc, p := range old.Parameters {
				if _, named := in.Parameters[svc]; named {
					continue
				}
				if next.Parameters == nil {
					next.Parameters = make(map[string]json.RawMessage, len(old.Parameters))
				}
				next.Parameters[svc] = p
			}
		}
		return encodeIntent(&next)
	})
}

// UpdateIntent is the reread-merge-retry write of the intent at namespace/key with a typed merge.
// Each round reads the entry and calls fn with its intent (nil when the key is missing; fn owns the
// value it gets and may return it modified). fn returns the whole new intent, or nil for "no change"
// (UpdateIntent then returns the current entry, or the zero Entry when the key is missing, and
// writes nothing). Each candidate is validated locally before it is sent; a SCHEMA_INVALID candidate
// ends UpdateIntent without a write. The put is a compare-and-set on the revision read
// (create-only when missing); on CONFLICT the round starts again from the read, so fn may run several
// times and must merge only what it is given. Any other error, including one from fn, ends
// UpdateIntent. A key that holds another schema is ErrWrongSchema. The intent carries no lease. A nil
// fn is an error, and nothing is read or written.
func (c *Coordinator) UpdateIntent(ctx context.Context, namespace, key string, fn func(cur *MediaIntent) (*MediaIntent, error)) (wire.Entry, error) {
	if err := checkTarget(namespace, key); err != nil {
		return wire.Entry{}, err
	}
	if fn == nil {
		return wire.Entry{}, errors.New("coordinator: UpdateIntent with a nil function")
	}
	return c.write(ctx, namespace, key, schema.MediaIntentV1, func(cur *wire.Entry) ([]byte, error) {
		var have *MediaIntent
		if cur != nil {
			d, err := decodeIntent(cur)
			if err != nil {
				return nil, err
			}
			have = &d
		}
		next, err := fn(have)
		if err != nil || next == nil {
			return nil, err
		}
		return encodeIntent(next)
	})
}

// SetDesired sets the desired flag of the intent at namespace/key and keeps every other field of
// the document as stored, with UpdateIntent (so a concurrent change of another field is not lost).
// The write, as every UpdateIntent write, carries no lease: an intent stored with a TTL that SetDesired
// changes no longer expires. A missing intent is wire.ErrNotFound; an intent that already has the
// flag is not written again (whoever wrote it, however its JSON is spelled, with its lease if it has
// one) and its entry is returned as stored.
func (c *Coordinator) SetDesired(ctx context.Context, namespace, key string, desired bool) (wire.Entry, error) {
	return c.UpdateIntent(ctx, namespace, key, func(cur *MediaIntent) (*MediaIntent, error) {
		if cur == nil {
			return nil, wire.Errorf(wire.CodeNotFound, "no intent at %s:%s", namespace, key)
		}
		if cur.Desired == desired {
			// Rewriting it would change nothing SetDesired is asked for, yet take the entry's
			// owner, drop its lease and wake every watcher.
			return nil, nil
		}
		cur.Desired = desired
		return cur, nil
	})
}

// DeleteIntent deletes the intent at namespace/key and returns the namespace revision of the delete.
// With expectedRevision N > 0 it deletes only the entry of revision N (CONFLICT, carrying the current
// revision, otherwise). With 0 it deletes whatever intent is stored, whatever its revision: it reads
// the entry and deletes that revision, and if the intent changed in between it reads again (up to
// client.MaxUpdateAttempts rounds). Either way it deletes only a media intent: a key that holds
// another schema is ErrWrongSchema, and a missing key is wire.ErrNotFound.
func (c *Coordinator) DeleteIntent(ctx context.Context, namespace, key string, expectedRevision uint64) (uint64, error) {
	if err := checkTarget(namespace, key); err != nil {
		return 0, err
	}
	if expectedRevision > wire.MaxSafeInteger {
		return 0, wire.Errorf(wire.CodeInvalidArgument, "expected revision %d is above 2^53-1", expectedRevision)
	}
	var lastErr error
	for range client.MaxUpdateAttempts {
		cur, err := c.client.Get(ctx, namespace, key)
		if err != nil {
			return 0, err
		}
		if cur.Schema != schema.MediaIntentV1 {
			return 0, wrongSchema(&cur, schema.MediaIntentV1)
		}
		expected := int64(expectedRevision)
		if expected == 0 {
			expected = int64(cur.Revision)
		}
		rev, err := c.client.Delete(ctx, wire.DeleteRequest{Namespace: namespace, Key: key, ExpectedRevision: &expected})
		if err == nil {
			return rev, nil
		}
		if expectedRevision != 0 || !errors.Is(err, wire.ErrConflict) {
			return 0, err
		}
		lastErr = err
	}
	return 0, lastErr
}

// encodeIntent returns the document of in, without nil parameters entries. A parameters value that
// is not JSON is SCHEMA_INVALID.
func encodeIntent(in *MediaIntent) ([]byte, error) {
	v := *in
	v.Parameters = withoutNulls(in.Parameters)
	for svc, p := range v.Parameters {
		if !json.Valid(p) {
			return nil, wire.Errorf(wire.CodeSchemaInvalid, "keeppeek.media-intent.v1: parameters.%s is not valid JSON", svc)
		}
	}
	doc, err := json.Marshal(&v)
	if err != nil {
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "keeppeek.media-intent.v1: %v", err)
	}
	return doc, nil
}

// decodeIntent decodes a stored intent strictly: a property this type does not know would be lost
// by the rewrite, so it is an error rather than silently dropped. An integer is read as the store's
// schema reads it, whatever its JSON spelling (5, 5.0, 5e0): see wire.Integer.
func decodeIntent(e *wire.Entry) (MediaIntent, error) {
	var doc struct {
		MediaIntent
		Priority json.RawMessage `json:"priority"`
	}
	dec := json.NewDecoder(bytes.NewReader(e.Document))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return MediaIntent{}, wire.Errorf(wire.CodeSchemaInvalid, "stored intent %s does not decode as keeppeek.media-intent.v1: %v", e.String(), err)
	}
	in := doc.MediaIntent
	if len(doc.Priority) > 0 && string(doc.Priority) != "null" {
		n, ok := wire.Integer(doc.Priority)
		if !ok {
			return MediaIntent{}, wire.Errorf(wire.CodeSchemaInvalid, "stored intent %s does not decode as keeppeek.media-intent.v1: priority %s is not an integer", e.String(), doc.Priority)
		}
		p := int(n)
		in.Priority = &p
	}
	return in, nil
}

// withoutNulls returns a copy of p without nil or JSON null values; nil when nothing is left.
func withoutNulls(p map[string]json.RawMessage) map[string]json.RawMessage {
	var out map[string]json.RawMessage
	for k, v := range p {
		if isNull(v) {
			continue
		}
		if out == nil {
			out = make(map[string]json.RawMessage, len(p))
		}
		out[k] = v
	}
	return out
}

func isNull(v json.RawMessage) bool {
	t := bytes.TrimSpace(v)
	return len(t) == 0 || string(t) == "null"
}
