package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// MaxTTLMs is the longest accepted lease (24 h); longer ones are clamped to it.
const MaxTTLMs = 86_400_000

// MinTTLMs is the shortest accepted lease (1 s).
const MinTTLMs = 1000

// Get returns the live entry at (namespace, key). A missing or expired key is NOT_FOUND.
func (s *Store) Get(ctx context.Context, p policy.Principal, req wire.GetRequest) (wire.Entry, error) {
	if err := s.serving(); err != nil {
		return wire.Entry{}, err
	}
	if err := req.Validate(); err != nil {
		return wire.Entry{}, err
	}
	if err := policy.CheckRead(p, req.Namespace); err != nil {
		return wire.Entry{}, err
	}
	now := s.nowMs()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sp := s.spaces[req.Namespace]; sp != nil {
		if e := sp.get(req.Key); e != nil && live(e, now) {
			return *e, nil
		}
	}
	return wire.Entry{}, wire.Errorf(wire.CodeNotFound, "%s not found in %s", req.Key, req.Namespace)
}

// ListResult is the ok reply of List.
type ListResult struct {
	Entries []wire.Entry
	// NextAfterKey is set only when more entries follow; pass it as after_key for the next page.
	NextAfterKey string
	// Revision is the namespace's revision, 0 if it was never written.
	Revision uint64
}

// List returns live entries of a namespace in bytewise key order, one page at a time.
func (s *Store) List(ctx context.Context, p policy.Principal, req wire.ListRequest) (ListResult, error) {
	if err := s.serving(); err != nil {
		return ListResult{}, err
	}
	if err := req.Validate(); err != nil {
		return ListResult{}, err
	}
	if err := policy.CheckRead(p, req.Namespace); err != nil {
		return ListResult{}, err
	}
	limit := req.EffectiveLimit()
	now := s.nowMs()
	out := ListResult{Entries: []wire.Entry{}}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.spaces[req.Namespace]
	if sp == nil {
		return out, nil
	}
	out.Revision = sp.revision
	sp.ascendPrefix(req.KeyPrefix, req.AfterKey, func(e *wire.Entry) bool {
		if !live(e, now) {
			return true
		}
		if len(out.Entries) == limit {
			out.NextAfterKey = out.Entries[limit-1].Key
			return false
		}
		out.Entries = append(out.Entries, *e)
		return true
	})
	return out, nil
}

// Put replaces the entry at (namespace, key) with the request's document, as p. It answers with the
// entry as stored (revision, owner, lease). Checks run in SPEC order: shape, policy, TTL, size, schema,
// guard, revision, quotas, commit.
func (s *Store) Put(ctx context.Context, p policy.Principal, req wire.PutRequest) (wire.Entry, error) {
	if err := s.serving(); err != nil {
		return wire.Entry{}, err
	}
	doc, err := req.ValidateCompact()
	if err != nil {
		return wire.Entry{}, err
	}
	if err := policy.CheckWrite(p, req.Namespace); err != nil {
		return wire.Entry{}, err
	}
	return s.put(ctx, nil, p.ID, req, doc)
}

// PutSystem writes an entry of the system namespace on the server's own behalf (worker status from
// heartbeats). Nobody else can write system: Put refuses it for every principal. owner is the
// principal the entry is kept for. A put that would create a worker-status key of owner
// (wire.WorkersPrefix) while owner already has max_workers_per_principal live ones fails
// QUOTA_EXCEEDED, so no principal fills system and keeps other principals' workers out of it.
func (s *Store) PutSystem(ctx context.Context, owner string, req wire.PutRequest) (wire.Entry, error) {
	if err := s.serving(); err != nil {
		return wire.Entry{}, err
	}
	doc, err := req.ValidateCompact()
	if err != nil {
		return wire.Entry{}, err
	}
	if req.Namespace != string(wire.KindSystem) {
		return wire.Entry{}, wire.Errorf(wire.CodeInvalidArgument, "PutSystem writes the system namespace only")
	}
	if !wire.ValidPrincipalID(owner) {
		return wire.Entry{}, wire.Errorf(wire.CodeInvalidArgument, "invalid owner %q", owner)
	}
	m := &mutation{}
	if prefix := wire.WorkersPrefix(owner); strings.HasPrefix(req.Key, prefix) {
		m.capPrefix, m.capMax, m.capBound = prefix, s.opts.Bounds.MaxWorkersPerPrincipal, "max_workers_per_principal"
	}
	return s.put(ctx, m, owner, req, doc)
}

// put runs checks 3 to 6 of a validated request whose compact document is doc, as m (nil: a new one).
func (s *Store) put(ctx context.Context, m *mutation, owner string, req wire.PutRequest, doc []byte) (wire.Entry, error) {
	if m == nil {
		m = &mutation{}
	}
	m.kind, m.principal, m.ns, m.key, m.schema = mutPut, owner, req.Namespace, req.Key, req.Schema
	m.expected, m.guard = req.ExpectedRevision, req.Guard
	if req.TTLMs != nil && *req.TTLMs > 0 {
		ttl := *req.TTLMs
		if _, ok := s.opts.Settings[req.Namespace]; ok {
			return wire.Entry{}, wire.Errorf(wire.CodeTTLInvalid, "%s is settings-backed: its entries take no TTL", req.Namespace)
		}
		if ttl < MinTTLMs {
			return wire.Entry{}, wire.Errorf(wire.CodeTTLInvalid, "ttl_ms %d is under 1000", ttl)
		}
		m.ttlMs = min(ttl, MaxTTLMs)
	}
	if limit := s.Bounds().MaxDocumentBytes; int64(len(doc)) > limit {
		return wire.Entry{}, wire.Errorf(wire.CodeTooLarge, "document is %d bytes (max_document_bytes %d)", len(doc), limit)
	}
	// Hashed here, in parallel, not in the serial commit: the audit record's digest, and the key under
	// which the schema registry remembers documents that passed.
	sum := sha256.Sum256(doc)
	if err := s.schemas.ValidateSum(req.Schema, req.Namespace, doc, sum); err != nil {
		return wire.Entry{}, err
	}
	m.doc, m.digest = doc, hex.EncodeToString(sum[:])
	r := s.submit(ctx, m)
	if r.err != nil {
		return wire.Entry{}, r.err
	}
	return *r.entry, nil
}

// Delete removes the entry at (namespace, key) and returns the namespace revision of the delete.
func (s *Store) Delete(ctx context.Context, p policy.Principal, req wire.DeleteRequest) (uint64, error) {
	if err := s.serving(); err != nil {
		return 0, err
	}
	if err := req.Validate(); err != nil {
		return 0, err
	}
	if err := policy.CheckWrite(p, req.Namespace); err != nil {
		return 0, err
	}
	r := s.submit(ctx, &mutation{kind: mutDelete, principal: p.ID, ns: req.Namespace, key: req.Key,
		expected: req.ExpectedRevision, guard: req.Guard})
	return r.revision, r.err
}

// TouchSystem pushes the lease deadline of a system entry to now plus its own ttl_ms, without a new
// revision or a watch update (a heartbeat keepalive, like an etcd lease keepalive). The new deadline
// is committed; Get shows it.
func (s *Store) TouchSystem(ctx context.Context, key string) (wire.Entry, error) {
	if err := s.serving(); err != nil {
		return wire.Entry{}, err
	}
	if !wire.ValidKey(key) {
		return wire.Entry{}, wire.Errorf(wire.CodeInvalidArgument, "invalid key %q", key)
	}
	r := s.submit(ctx, &mutation{kind: mutTouch, ns: string(wire.KindSystem), key: key})
	if r.err != nil {
		return wire.Entry{}, r.err
	}
	return *r.entry, nil
}
