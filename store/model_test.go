package store

// A model-based test of the engine: a compact reference model of SPEC sections 4 to 8 (revisions,
// put/delete with expected_revision and guard, TTL at a clock the test holds, watches with snapshot
// and ordered updates, acks, close reasons, small quotas) is driven with the real engine (bbolt on disk)
// through the same seeded random sequences of operations from several principals, with reopens at
// random points and rounds of concurrent writers whose answers must fit one serial order. After every
// step the answers, every namespace's full List and every watch's messages must agree with the model.
//
// A failure prints its seed; MODEL_SEED=<seed> runs that seed alone, MODEL_STEPS=<n> sets the steps.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// ---- the model ----

// modelBounds are small, so that every quota and watch bound is reached within a few steps. The ack
// deadline is the longest allowed: the test never waits for it (it runs on real time).
func modelBounds() wire.Bounds {
	b := wire.DefaultBounds()
	b.MaxDocumentBytes = 120
	b.MaxEntriesPerNamespace = 4
	b.MaxNamespaces = 4
	b.MaxTotalValueBytes = 700
	b.MaxSnapshotEntries = 3
	b.MaxSnapshotBytes = 800
	b.MaxWatches = 6
	b.MaxWatchesPerPrincipal = 3
	b.MaxPendingUpdates = 3
	b.AckDeadlineMs = wire.MaxAckDeadlineMs
	return b
}

var (
	mNamespaces   = []string{"user/alice", "user/bob", "service/svc", "service/cfg", "group/g", "system"}
	mSettingsNS   = "service/cfg" // settings-backed: its entries live in a TOML file, and take no TTL
	mBadNS        = []string{"foo/x", "user/", "system/x", "user/Alice"}
	mKeys         = []string{"a", "a/b", "a/c", "b", "lease", "x/y"}
	mBadKeys      = []string{"a//b", "/a", "a/", "a/../b", ""}
	mPrefixes     = []string{"", "a", "a/", "b", "x/", "l", "zz"}
	mBadPrefixes  = []string{"/", "a//", "a b"}
	mPrincipals   = []policy.Principal{admin, alice, bob, {ID: "alice", Admin: true}}
	mWatchIDs     = []string{"w1", "w2", "w3", "w4"}
	mSchemaLease  = "keeppeek.lease.v1"
	mSchemaPref   = "keeppeek.preference.v1"
	mSchemaNoSuch = "keeppeek.nosuch.v1"
)

type mSpace struct {
	rev     uint64
	entries map[string]wire.Entry
}

// mMsg is a message a watch is expected to receive: an update (kind PUT, DELETE, EXPIRE) or its close.
type mMsg struct {
	seq    uint64
	rev    uint64
	kind   wire.UpdateKind
	key    string
	entry  *wire.Entry
	reason wire.CloseReason
}

type mWatch struct {
	p          policy.Principal
	id         string
	ns, prefix string
	seq, acked uint64
	live       bool
	msgs       []mMsg
	rec        *mRecorder // the engine side of this watch
}

type model struct {
	b       wire.Bounds
	now     int64
	closed  bool   // Close has begun: every operation answers UNAVAILABLE
	commits uint64 // committed changes (puts, deletes, expiries): the audit log's length
	// principals is the table of the last ReloadPrincipals (nil before one): a watch registers only
	// if the principal it names there may read its namespace.
	principals map[string]policy.Principal
	spaces     map[string]*mSpace
	watches    []*mWatch // every watch registered since the store was opened, in registration order
}

func newModel(b wire.Bounds, now int64) *model {
	return &model{b: b, now: now, spaces: map[string]*mSpace{}}
}

func (m *model) clone() *model {
	c := &model{b: m.b, now: m.now, closed: m.closed, commits: m.commits, principals: m.principals,
		spaces: make(map[string]*mSpace, len(m.spaces))}
	for ns, sp := range m.spaces {
		c.spaces[ns] = &mSpace{rev: sp.rev, entries: mCloneEntries(sp.entries)}
	}
	for _, w := range m.watches {
		wc := *w
		wc.msgs = slices.Clone(w.msgs)
		c.watches = append(c.watches, &wc)
	}
	return c
}

func mCloneEntries(in map[string]wire.Entry) map[string]wire.Entry {
	out := make(map[string]wire.Entry, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func (m *model) space(ns string) *mSpace {
	sp := m.spaces[ns]
	if sp == nil {
		sp = &mSpace{entries: map[string]wire.Entry{}}
		m.spaces[ns] = sp
	}
	return sp
}

func (m *model) liveNamespaces() int64 {
	var n int64
	for _, sp := range m.spaces {
		if len(sp.entries) > 0 {
			n++
		}
	}
	return n
}

func (m *model) totalBytes() int64 {
	var n int64
	for _, sp := range m.spaces {
		for _, e := range sp.entries {
			n += int64(len(e.Document))
		}
	}
	return n
}

// emit sends one committed change to every live watch of ns whose prefix matches; a watch that
// already has max_pending_updates unacknowledged updates is closed with OVERFLOW instead (SPEC 7.6).
func (m *model) emit(ns, key string, kind wire.UpdateKind, rev uint64, e *wire.Entry) {
	for _, w := range m.watches {
		if !w.live || w.ns != ns || !strings.HasPrefix(key, w.prefix) {
			continue
		}
		if int64(w.seq-w.acked) >= m.b.MaxPendingUpdates {
			w.close(wire.CloseOverflow)
			continue
		}
		w.seq++
		w.msgs = append(w.msgs, mMsg{seq: w.seq, rev: rev, kind: kind, key: key, entry: e})
	}
}

func (w *mWatch) close(reason wire.CloseReason) {
	w.live = false
	w.msgs = append(w.msgs, mMsg{kind: wire.UpdateClosed, reason: reason})
}

// expireDue deletes every entry whose deadline is at or before now (expiry is inclusive), one
// revision and one EXPIRE each, in deadline order (then namespace, then key: ties in any order are
// allowed by SPEC, the engine's is this one).
func (m *model) expireDue() {
	type due struct {
		at      int64
		ns, key string
	}
	var ds []due
	for ns, sp := range m.spaces {
		for k, e := range sp.entries {
			if e.ExpiresAtMs != 0 && e.ExpiresAtMs <= m.now {
				ds = append(ds, due{e.ExpiresAtMs, ns, k})
			}
		}
	}
	sort.Slice(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.at != b.at {
			return a.at < b.at
		}
		if a.ns != b.ns {
			return a.ns < b.ns
		}
		return a.key < b.key
	})
	for _, d := range ds {
		sp := m.spaces[d.ns]
		delete(sp.entries, d.key)
		sp.rev++
		m.commits++
		m.emit(d.ns, d.key, wire.UpdateExpire, sp.rev, nil)
	}
}

// shutdown is Close: every live watch gets one SHUTDOWN close; the next store starts with none.
func (m *model) shutdown() {
	for _, w := range m.watches {
		if w.live {
			w.close(wire.CloseShutdown)
		}
	}
}

func mValidNS(ns string) bool    { return slices.Contains(mNamespaces, ns) }
func mValidKey(k string) bool    { return slices.Contains(mKeys, k) }
func mValidPrefix(p string) bool { return slices.Contains(mPrefixes, p) }

func mCanRead(p policy.Principal, ns string) bool {
	if id, ok := strings.CutPrefix(ns, "user/"); ok {
		return p.Admin || p.ID == id
	}
	return p.Admin
}

func mCanWrite(p policy.Principal, ns string) bool {
	if ns == "system" {
		return false
	}
	return mCanRead(p, ns)
}

// mSchemaFits is section 13's "where" column for the schemas the test writes.
func mSchemaFits(schema, ns string) bool {
	switch schema {
	case mSchemaLease:
		return strings.HasPrefix(ns, "service/")
	case mSchemaPref:
		return strings.HasPrefix(ns, "user/") || strings.HasPrefix(ns, "group/")
	}
	return false
}

// mAnswer is what an operation answered, in the same shape for model and engine.
type mAnswer struct {
	code  wire.Code
	cur   *uint64 // current_revision of CONFLICT and GUARD_FAILED
	entry *wire.Entry
	rev   uint64
	list  *ListResult
	ws    *wire.WatchState
}

func mErr(code wire.Code) mAnswer { return mAnswer{code: code} }

func mRevErr(code wire.Code, cur uint64) mAnswer { return mAnswer{code: code, cur: &cur} }

func mEngineAnswer(err error) mAnswer {
	if err == nil {
		return mAnswer{}
	}
	we, ok := err.(*wire.Error)
	if !ok {
		return mAnswer{code: wire.Code("NOT A *wire.Error: " + err.Error())}
	}
	return mAnswer{code: we.Code, cur: we.CurrentRevision}
}

// mop is one operation, as both sides run it.
type mop struct {
	kind  string // get put delete list watch unwatch ack; close; expire (the model's only)
	p     policy.Principal
	get   wire.GetRequest
	put   wire.PutRequest
	del   wire.DeleteRequest
	list  wire.ListRequest
	watch wire.WatchRequest
	unw   wire.UnwatchRequest
	ack   wire.AckRequest
	// docFor is the schema the put's document was made for ("" if none), docOK whether it is valid
	// for it: the model's knowledge of section 13 for the documents the generator makes.
	docFor string
	docOK  bool
	rec    *mRecorder
	table  map[string]policy.Principal // reload
}

func (o mop) String() string {
	var req any
	switch o.kind {
	case "get":
		req = o.get
	case "put":
		b, _ := json.Marshal(o.put)
		return fmt.Sprintf("%s put %s", o.p.ID, b)
	case "delete":
		req = o.del
	case "list":
		req = o.list
	case "watch":
		req = o.watch
	case "unwatch":
		req = o.unw
	case "ack":
		b, _ := json.Marshal(o.ack)
		return fmt.Sprintf("%s ack %s", o.p.ID, b)
	case "close", "expire":
		return o.kind
	case "reload":
		return fmt.Sprintf("reload principals %v", o.table)
	}
	b, _ := json.Marshal(req)
	return fmt.Sprintf("%s %s %s", o.p.ID, o.kind, b)
}

func (m *model) apply(o mop) mAnswer {
	switch o.kind {
	case "expire": // the committer's, at any moment once due (not an operation of a caller)
		m.expireDue()
		return mAnswer{}
	case "close":
		m.closed = true
		m.shutdown()
		return mAnswer{}
	case "reload":
		m.reload(o.table)
		return mAnswer{}
	}
	if m.closed {
		return mErr(wire.CodeUnavailable) // check 0 of SPEC 5
	}
	switch o.kind {
	case "get":
		return m.doGet(o.p, o.get)
	case "put":
		return m.doPut(o)
	case "delete":
		return m.doDelete(o.p, o.del)
	case "list":
		return m.doList(o.p, o.list)
	case "watch":
		return m.doWatch(o.p, o.watch, o.rec)
	case "unwatch":
		return m.doUnwatch(o.p, o.unw)
	case "ack":
		return m.doAck(o.p, o.ack)
	}
	panic("unknown op " + o.kind)
}

// reload is ReloadPrincipals: every watch whose principal is gone or may no longer read its
// namespace is closed with UNAUTHORIZED (SPEC 2 and 7.6).
func (m *model) reload(table map[string]policy.Principal) {
	m.principals = table
	for _, w := range m.watches {
		if !w.live {
			continue
		}
		if cur, ok := table[w.p.ID]; !ok || !mCanRead(cur, w.ns) {
			w.close(wire.CloseUnauthorized)
		}
	}
}

func (m *model) liveEntry(ns, key string) (wire.Entry, bool) {
	sp := m.spaces[ns]
	if sp == nil {
		return wire.Entry{}, false
	}
	e, ok := sp.entries[key]
	if !ok || (e.ExpiresAtMs != 0 && e.ExpiresAtMs <= m.now) {
		return wire.Entry{}, false
	}
	return e, true
}

func (m *model) doGet(p policy.Principal, r wire.GetRequest) mAnswer {
	if !mValidNS(r.Namespace) || !mValidKey(r.Key) {
		return mErr(wire.CodeInvalidArgument)
	}
	if !mCanRead(p, r.Namespace) {
		return mErr(wire.CodePermissionDenied)
	}
	e, ok := m.liveEntry(r.Namespace, r.Key)
	if !ok {
		return mErr(wire.CodeNotFound)
	}
	return mAnswer{entry: &e}
}

func mGuardShapeOK(g *wire.Guard, key string) bool {
	return g == nil || (mValidKey(g.Key) && g.Key != key && g.Revision >= 1)
}

// checkGuard is check 4's first half: the guard key's live entry must have the guard's revision.
func (m *model) checkGuard(ns string, g *wire.Guard) (mAnswer, bool) {
	if g == nil {
		return mAnswer{}, true
	}
	e, ok := m.liveEntry(ns, g.Key)
	if !ok {
		return mRevErr(wire.CodeGuardFailed, 0), false
	}
	if e.Revision != uint64(g.Revision) {
		return mRevErr(wire.CodeGuardFailed, e.Revision), false
	}
	return mAnswer{}, true
}

func (m *model) doPut(o mop) mAnswer {
	r := o.put
	// (1) shape
	doc, compactErr := mCompactObject(r.Document)
	if !mValidNS(r.Namespace) || !mValidKey(r.Key) || r.Schema == "" || compactErr != nil ||
		(r.ExpectedRevision != nil && *r.ExpectedRevision < 0) || (r.TTLMs != nil && *r.TTLMs < 0) ||
		!mGuardShapeOK(r.Guard, r.Key) {
		return mErr(wire.CodeInvalidArgument)
	}
	// (2) policy
	if !mCanWrite(o.p, r.Namespace) {
		return mErr(wire.CodePermissionDenied)
	}
	// (3) TTL, size, schema
	var ttl int64
	if r.TTLMs != nil && *r.TTLMs > 0 {
		if *r.TTLMs < 1000 || r.Namespace == mSettingsNS {
			return mErr(wire.CodeTTLInvalid)
		}
		ttl = min(*r.TTLMs, 86_400_000)
	}
	if int64(len(doc)) > m.b.MaxDocumentBytes {
		return mErr(wire.CodeTooLarge)
	}
	if !(o.docOK && o.docFor == r.Schema && mSchemaFits(r.Schema, r.Namespace)) {
		return mErr(wire.CodeSchemaInvalid)
	}
	// (4) state: guard, then expected_revision
	if a, ok := m.checkGuard(r.Namespace, r.Guard); !ok {
		return a
	}
	cur, exists := m.liveEntry(r.Namespace, r.Key)
	if r.ExpectedRevision != nil {
		exp := uint64(*r.ExpectedRevision)
		switch {
		case exp == 0 && exists:
			return mRevErr(wire.CodeConflict, cur.Revision)
		case exp > 0 && !exists:
			return mRevErr(wire.CodeConflict, 0)
		case exp > 0 && cur.Revision != exp:
			return mRevErr(wire.CodeConflict, cur.Revision)
		}
	}
	// (5) quotas
	sp := m.spaces[r.Namespace]
	count := 0
	if sp != nil {
		count = len(sp.entries)
	}
	var prevSize int64
	if exists {
		prevSize = int64(len(cur.Document))
	} else {
		if int64(count+1) > m.b.MaxEntriesPerNamespace {
			return mErr(wire.CodeQuotaExceeded)
		}
		if count == 0 && m.liveNamespaces()+1 > m.b.MaxNamespaces {
			return mErr(wire.CodeQuotaExceeded)
		}
	}
	if m.totalBytes()-prevSize+int64(len(doc)) > m.b.MaxTotalValueBytes {
		return mErr(wire.CodeQuotaExceeded)
	}
	// commit
	sp = m.space(r.Namespace)
	sp.rev++
	e := wire.Entry{Namespace: r.Namespace, Key: r.Key, Schema: r.Schema, Owner: o.p.ID, Revision: sp.rev,
		CreatedAtMs: m.now, UpdatedAtMs: m.now, Document: doc}
	if exists {
		e.CreatedAtMs = cur.CreatedAtMs
	}
	if ttl > 0 {
		e.TTLMs, e.ExpiresAtMs = ttl, m.now+ttl
	}
	sp.entries[r.Key] = e
	m.commits++
	m.emit(r.Namespace, r.Key, wire.UpdatePut, sp.rev, &e)
	return mAnswer{entry: &e}
}

func mCompactObject(raw json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	if buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, fmt.Errorf("not an object")
	}
	return buf.Bytes(), nil
}

func (m *model) doDelete(p policy.Principal, r wire.DeleteRequest) mAnswer {
	if !mValidNS(r.Namespace) || !mValidKey(r.Key) || (r.ExpectedRevision != nil && *r.ExpectedRevision <= 0) ||
		!mGuardShapeOK(r.Guard, r.Key) {
		return mErr(wire.CodeInvalidArgument)
	}
	if !mCanWrite(p, r.Namespace) {
		return mErr(wire.CodePermissionDenied)
	}
	if a, ok := m.checkGuard(r.Namespace, r.Guard); !ok {
		return a
	}
	cur, exists := m.liveEntry(r.Namespace, r.Key)
	if !exists {
		return mErr(wire.CodeNotFound)
	}
	if r.ExpectedRevision != nil && uint64(*r.ExpectedRevision) != cur.Revision {
		return mRevErr(wire.CodeConflict, cur.Revision)
	}
	sp := m.spaces[r.Namespace]
	delete(sp.entries, r.Key)
	sp.rev++
	m.commits++
	m.emit(r.Namespace, r.Key, wire.UpdateDelete, sp.rev, nil)
	return mAnswer{rev: sp.rev}
}

// liveKeys are the live keys of ns starting with prefix, in bytewise order.
func (m *model) liveKeys(ns, prefix string) []string {
	var out []string
	if sp := m.spaces[ns]; sp != nil {
		for k := range sp.entries {
			if _, ok := m.liveEntry(ns, k); ok && strings.HasPrefix(k, prefix) {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (m *model) doList(p policy.Principal, r wire.ListRequest) mAnswer {
	if !mValidNS(r.Namespace) || !mValidPrefix(r.KeyPrefix) || (r.AfterKey != "" && !mValidKey(r.AfterKey)) ||
		r.Limit < 0 || r.Limit > 256 {
		return mErr(wire.CodeInvalidArgument)
	}
	if !mCanRead(p, r.Namespace) {
		return mErr(wire.CodePermissionDenied)
	}
	limit := int(r.Limit)
	if limit == 0 {
		limit = 100
	}
	out := ListResult{Entries: []wire.Entry{}}
	if sp := m.spaces[r.Namespace]; sp != nil {
		out.Revision = sp.rev
	}
	for _, k := range m.liveKeys(r.Namespace, r.KeyPrefix) {
		if r.AfterKey != "" && k <= r.AfterKey {
			continue
		}
		if len(out.Entries) == limit {
			out.NextAfterKey = out.Entries[limit-1].Key
			break
		}
		out.Entries = append(out.Entries, m.spaces[r.Namespace].entries[k])
	}
	return mAnswer{list: &out}
}

func (m *model) liveWatch(p policy.Principal, id string) *mWatch {
	for _, w := range m.watches {
		if w.live && w.p.ID == p.ID && w.id == id {
			return w
		}
	}
	return nil
}

func (m *model) doWatch(p policy.Principal, r wire.WatchRequest, rec *mRecorder) mAnswer {
	if !slices.Contains(mWatchIDs, r.WatchID) || !mValidNS(r.Namespace) || !mValidPrefix(r.KeyPrefix) {
		return mErr(wire.CodeInvalidArgument)
	}
	if !mCanRead(p, r.Namespace) {
		return mErr(wire.CodePermissionDenied)
	}
	if m.principals != nil {
		if cur, ok := m.principals[p.ID]; !ok || !mCanRead(cur, r.Namespace) {
			return mErr(wire.CodePermissionDenied)
		}
	}
	if m.liveWatch(p, r.WatchID) != nil {
		return mErr(wire.CodeWatchExists)
	}
	var all, mine int64
	for _, w := range m.watches {
		if w.live {
			all++
			if w.p.ID == p.ID {
				mine++
			}
		}
	}
	if all >= m.b.MaxWatches || mine >= m.b.MaxWatchesPerPrincipal {
		return mErr(wire.CodeResourceExhausted)
	}
	ws := &wire.WatchState{WatchID: r.WatchID, Namespace: r.Namespace, KeyPrefix: r.KeyPrefix, Entries: []wire.Entry{}}
	if sp := m.spaces[r.Namespace]; sp != nil {
		ws.SnapshotRevision = sp.rev
	}
	for _, k := range m.liveKeys(r.Namespace, r.KeyPrefix) {
		ws.Entries = append(ws.Entries, m.spaces[r.Namespace].entries[k])
	}
	if int64(len(ws.Entries)) > m.b.MaxSnapshotEntries {
		return mErr(wire.CodeWatchTooBroad)
	}
	// max_snapshot_bytes is of the encoded reply (SPEC 7.2): the StateStoreResult carrying the watch.
	enc, err := json.Marshal(wire.Result{RequestID: r.RequestID, OK: true, Watch: ws})
	if err != nil {
		panic(err)
	}
	if int64(len(enc)) > m.b.MaxSnapshotBytes {
		return mErr(wire.CodeWatchTooBroad)
	}
	m.watches = append(m.watches, &mWatch{p: p, id: r.WatchID, ns: r.Namespace, prefix: r.KeyPrefix, live: true, rec: rec})
	return mAnswer{ws: ws}
}

func (m *model) doUnwatch(p policy.Principal, r wire.UnwatchRequest) mAnswer {
	if !slices.Contains(mWatchIDs, r.WatchID) {
		return mErr(wire.CodeInvalidArgument)
	}
	w := m.liveWatch(p, r.WatchID)
	if w == nil {
		return mErr(wire.CodeNotFound)
	}
	w.live = false // no close message (SPEC 7.6 lists the server's closes; unwatch is the client's)
	return mAnswer{}
}

func (m *model) doAck(p policy.Principal, r wire.AckRequest) mAnswer {
	if !slices.Contains(mWatchIDs, r.WatchID) || r.AppliedSequence == nil || *r.AppliedSequence < 0 {
		return mErr(wire.CodeInvalidArgument)
	}
	w := m.liveWatch(p, r.WatchID)
	if w == nil {
		return mErr(wire.CodeNotFound)
	}
	seq := uint64(*r.AppliedSequence)
	if seq < w.acked || seq > w.seq {
		return mErr(wire.CodeInvalidArgument)
	}
	w.acked = seq
	return mAnswer{}
}

// ---- comparing ----

func mSameEntries(a, b []wire.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func mPtrRev(p *uint64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatUint(*p, 10)
}

func mEntryString(e *wire.Entry) string {
	if e == nil {
		return "<nil>"
	}
	b, _ := json.Marshal(e)
	return string(b)
}

// mDiffAnswer is "" when the engine's answer got is the model's want.
func mDiffAnswer(want, got mAnswer) string {
	if want.code != got.code || mPtrRev(want.cur) != mPtrRev(got.cur) {
		return fmt.Sprintf("error: want %q cur=%s, got %q cur=%s", want.code, mPtrRev(want.cur), got.code, mPtrRev(got.cur))
	}
	if want.code != "" {
		return ""
	}
	if (want.entry == nil) != (got.entry == nil) || (want.entry != nil && !reflect.DeepEqual(*want.entry, *got.entry)) {
		return fmt.Sprintf("entry: want %s, got %s", mEntryString(want.entry), mEntryString(got.entry))
	}
	if want.rev != got.rev {
		return fmt.Sprintf("revision: want %d, got %d", want.rev, got.rev)
	}
	if (want.list == nil) != (got.list == nil) {
		return "list: one side has none"
	}
	if want.list != nil {
		w, g := want.list, got.list
		if w.Revision != g.Revision || w.NextAfterKey != g.NextAfterKey || !mSameEntries(w.Entries, g.Entries) {
			wb, _ := json.Marshal(w)
			gb, _ := json.Marshal(g)
			return fmt.Sprintf("list: want %s, got %s", wb, gb)
		}
	}
	if (want.ws == nil) != (got.ws == nil) {
		return "watch: one side has none"
	}
	if want.ws != nil {
		w, g := want.ws, got.ws
		if w.WatchID != g.WatchID || w.Namespace != g.Namespace || w.KeyPrefix != g.KeyPrefix ||
			w.SnapshotRevision != g.SnapshotRevision || !mSameEntries(w.Entries, g.Entries) {
			wb, _ := json.Marshal(w)
			gb, _ := json.Marshal(g)
			return fmt.Sprintf("watch: want %s, got %s", wb, gb)
		}
	}
	return ""
}

// mRecorder is a watch's sink: it keeps every message, in order, and never blocks.
type mRecorder struct {
	mu   sync.Mutex
	msgs []Message
}

func (r *mRecorder) sink(m Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
}

func (r *mRecorder) snapshot() []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func mMsgString(m Message) string {
	if m.Closed != nil {
		return fmt.Sprintf("CLOSED %s (%s)", m.Closed.Reason, m.Closed.WatchID)
	}
	return fmt.Sprintf("seq %d rev %d %s %s %s", m.Sequence, m.Event.Revision, m.Event.Kind, m.Event.Key, mEntryString(m.Event.Entry))
}

func (x mMsg) String() string {
	if x.kind == wire.UpdateClosed {
		return "CLOSED " + string(x.reason)
	}
	return fmt.Sprintf("seq %d rev %d %s %s %s", x.seq, x.rev, x.kind, x.key, mEntryString(x.entry))
}

func mSameMsg(id string, want mMsg, got Message) bool {
	if got.WatchID != id {
		return false
	}
	if want.kind == wire.UpdateClosed {
		c := got.Closed
		return got.Event == nil && c != nil && c.WatchID == id && c.Kind == wire.UpdateClosed && c.Reason == want.reason
	}
	ev := got.Event
	if got.Closed != nil || ev == nil || got.Sequence != want.seq || ev.Revision != want.rev || ev.Kind != want.kind || ev.Key != want.key {
		return false
	}
	if (want.entry == nil) != (ev.Entry == nil) {
		return false
	}
	return want.entry == nil || reflect.DeepEqual(*want.entry, *ev.Entry)
}

// mDiffWatch compares what w's recorder holds with the model's messages; with prefixOnly, the
// model may lag the recorder (used while a serial order is being searched).
func mDiffWatch(w *mWatch, prefixOnly bool) string {
	got := w.rec.snapshot()
	n := min(len(got), len(w.msgs))
	for i := 0; i < n; i++ {
		if !mSameMsg(w.id, w.msgs[i], got[i]) {
			return fmt.Sprintf("watch %s/%s message %d: want %v, got %s", w.p.ID, w.id, i, w.msgs[i], mMsgString(got[i]))
		}
	}
	switch {
	case len(w.msgs) > len(got):
		return fmt.Sprintf("watch %s/%s: want message %d %v, got none", w.p.ID, w.id, len(got), w.msgs[len(got)])
	case len(got) > len(w.msgs) && !prefixOnly:
		return fmt.Sprintf("watch %s/%s: unexpected message %d %s", w.p.ID, w.id, len(w.msgs), mMsgString(got[len(w.msgs)]))
	}
	return ""
}

// ---- the engine side ----

func mRunEngine(ctx context.Context, s *Store, o mop) mAnswer {
	switch o.kind {
	case "get":
		e, err := s.Get(ctx, o.p, o.get)
		a := mEngineAnswer(err)
		if err == nil {
			a.entry = &e
		}
		return a
	case "put":
		e, err := s.Put(ctx, o.p, o.put)
		a := mEngineAnswer(err)
		if err == nil {
			a.entry = &e
		}
		return a
	case "delete":
		rev, err := s.Delete(ctx, o.p, o.del)
		a := mEngineAnswer(err)
		if err == nil {
			a.rev = rev
		} else if rev != 0 {
			a.code += " (with a revision)"
		}
		return a
	case "list":
		lr, err := s.List(ctx, o.p, o.list)
		a := mEngineAnswer(err)
		if err == nil {
			a.list = &lr
		}
		return a
	case "watch":
		ws, err := s.Watch(ctx, o.p, o.watch, o.rec.sink)
		a := mEngineAnswer(err)
		if err == nil {
			a.ws = ws
		}
		return a
	case "unwatch":
		return mEngineAnswer(s.Unwatch(ctx, o.p, o.unw))
	case "ack":
		return mEngineAnswer(s.Ack(ctx, o.p, o.ack))
	case "close":
		return mEngineAnswer(s.Close())
	case "reload":
		s.ReloadPrincipals(func(id string) (policy.Principal, bool) {
			p, ok := o.table[id]
			return p, ok
		})
		return mAnswer{}
	}
	panic("unknown op " + o.kind)
}

// ---- the generator ----

type mGen struct {
	r     *rand.Rand
	reqID int64
}

func (g *mGen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g *mGen) chance(pct int) bool { return g.r.IntN(100) < pct }

func (g *mGen) principal() policy.Principal { return mPrincipals[g.r.IntN(len(mPrincipals))] }

func (g *mGen) ns() string {
	switch n := g.r.IntN(100); {
	case n < 3:
		return g.pick(mBadNS)
	case n < 8:
		return "system"
	case n < 33:
		return "user/alice"
	case n < 53:
		return "user/bob"
	case n < 70:
		return "service/svc"
	case n < 80:
		return mSettingsNS
	}
	return "group/g"
}

func (g *mGen) key() string {
	if g.chance(2) {
		return g.pick(mBadKeys)
	}
	return g.pick(mKeys)
}

func (g *mGen) nextID() int64 {
	g.reqID++
	return g.reqID
}

// revisionFor is an expected or guard revision: mostly the key's current one, sometimes near it.
func (g *mGen) revisionFor(m *model, ns, key string) int64 {
	e, ok := m.liveEntry(ns, key)
	switch {
	case ok && g.chance(65):
		return int64(e.Revision)
	case g.chance(10):
		return 0
	}
	var top int64 = 1
	if sp := m.spaces[ns]; sp != nil {
		top = int64(sp.rev) + 2
	}
	return 1 + g.r.Int64N(top)
}

func (g *mGen) guard(m *model, ns, key string) *wire.Guard {
	if !g.chance(20) {
		return nil
	}
	if g.chance(8) {
		return &wire.Guard{Key: key, Revision: 1} // the written key itself: INVALID_ARGUMENT
	}
	gk := g.pick(mKeys)
	rev := g.revisionFor(m, ns, gk)
	if rev == 0 && !g.chance(20) {
		rev = 1
	}
	return &wire.Guard{Key: gk, Revision: rev}
}

// document makes a document for schema, mostly, or for the other one; valid or not.
func (g *mGen) document(schema string) (doc json.RawMessage, docFor string, ok bool) {
	pad := strings.Repeat("ab cd ", g.r.IntN(12))
	if g.chance(15) {
		pad = strings.Repeat("ab cd ", g.r.IntN(20)) // over max_document_bytes, often
	}
	switch g.r.IntN(50) {
	case 0:
		return json.RawMessage(`[1,2]`), "", false
	case 1:
		return json.RawMessage(`null`), "", false
	}
	if (schema == mSchemaLease) != g.chance(4) {
		docFor = mSchemaLease
		switch {
		case g.chance(4):
			doc = json.RawMessage(fmt.Sprintf(`{"holder":"w1","purpose":%q}`, pad)) // no claimed_at_ms
		case g.chance(3):
			doc = json.RawMessage(`{"holder":"w1","claimed_at_ms":1,"token":"x"}`) // extra, forbidden
		default:
			ok = true
			doc = json.RawMessage(fmt.Sprintf(`{"holder":"w%d","claimed_at_ms":%d,"purpose":%q}`, g.r.IntN(9), g.r.IntN(1000), pad))
		}
	} else {
		docFor = mSchemaPref
		switch {
		case g.chance(5):
			doc = json.RawMessage(fmt.Sprintf(`{"layout":%q}`, pad)) // no kind
		default:
			ok = true
			doc = json.RawMessage(fmt.Sprintf(`{"kind":"k%d","layout":%q}`, g.r.IntN(9), pad))
		}
	}
	if g.chance(15) {
		// Not compact: the stored document is its compact form, whose length is its size.
		doc = json.RawMessage(strings.Replace(string(doc), `":`, `" : `, 1) + "\n")
	}
	return doc, docFor, ok
}

func (g *mGen) schemaFor(ns string) string {
	switch {
	case g.chance(2):
		return ""
	case g.chance(2):
		return mSchemaNoSuch
	case g.chance(3):
		return g.pick([]string{mSchemaLease, mSchemaPref})
	case strings.HasPrefix(ns, "service/"):
		return mSchemaLease
	}
	return mSchemaPref
}

// writerFor is a principal that may write ns, mostly, so that most writes pass policy.
func (g *mGen) writerFor(ns string) policy.Principal {
	if g.chance(6) {
		return g.principal()
	}
	if id, ok := strings.CutPrefix(ns, "user/"); ok && g.chance(50) {
		return policy.Principal{ID: id}
	}
	return admin
}

func (g *mGen) readerFor(ns string) policy.Principal { return g.writerFor(ns) }

func (g *mGen) put(m *model, ns, key string) mop {
	p := g.writerFor(ns)
	schema := g.schemaFor(ns)
	doc, docFor, ok := g.document(schema)
	r := wire.PutRequest{RequestID: g.nextID(), Namespace: ns, Key: key, Schema: schema, Document: doc}
	if g.chance(45) {
		r.ExpectedRevision = i64(g.revisionFor(m, ns, key))
		if g.chance(2) {
			r.ExpectedRevision = i64(-1)
		}
	}
	if g.chance(35) {
		ttls := []int64{0, 1000, 1500, 2500, 4000, 100_000_000, 0, 1000, 1500, 2500, 500, -1}
		r.TTLMs = i64(ttls[g.r.IntN(len(ttls))])
	}
	r.Guard = g.guard(m, ns, key)
	return mop{kind: "put", p: p, put: r, docFor: docFor, docOK: ok}
}

func (g *mGen) del(m *model, ns, key string) mop {
	r := wire.DeleteRequest{RequestID: g.nextID(), Namespace: ns, Key: key}
	if g.chance(40) {
		r.ExpectedRevision = i64(g.revisionFor(m, ns, key))
	}
	r.Guard = g.guard(m, ns, key)
	return mop{kind: "delete", p: g.writerFor(ns), del: r}
}

func (g *mGen) watchOp(ns string) mop {
	prefix := ""
	if g.chance(60) {
		prefix = g.pick(mPrefixes)
	}
	if g.chance(3) {
		prefix = g.pick(mBadPrefixes)
	}
	id := g.pick(mWatchIDs)
	if g.chance(2) {
		id = "bad.id"
	}
	return mop{kind: "watch", p: g.readerFor(ns), watch: wire.WatchRequest{RequestID: g.nextID(), WatchID: id, Namespace: ns, KeyPrefix: prefix},
		rec: &mRecorder{}}
}

// ackOp acknowledges a sequence of one of the principal's watches: mostly one it may, sometimes
// one below an earlier ack or above the highest sent.
func (g *mGen) ackOp(m *model) mop {
	var live []*mWatch
	for _, w := range m.watches {
		if w.live {
			live = append(live, w)
		}
	}
	if len(live) == 0 || g.chance(10) {
		return mop{kind: "ack", p: g.principal(), ack: wire.AckRequest{RequestID: g.nextID(), WatchID: g.pick(mWatchIDs), AppliedSequence: i64(g.r.Int64N(3))}}
	}
	w := live[g.r.IntN(len(live))]
	var seq int64
	switch {
	case g.chance(10):
		seq = int64(w.seq) + 1
	case g.chance(10) && w.acked > 0:
		seq = int64(w.acked) - 1
	case g.chance(3):
		seq = -1
	default:
		seq = int64(w.acked) + g.r.Int64N(int64(w.seq-w.acked)+1)
	}
	return mop{kind: "ack", p: w.p, ack: wire.AckRequest{RequestID: g.nextID(), WatchID: w.id, AppliedSequence: &seq}}
}

func (g *mGen) unwatchOp(m *model) mop {
	var live []*mWatch
	for _, w := range m.watches {
		if w.live {
			live = append(live, w)
		}
	}
	if len(live) == 0 || g.chance(15) {
		return mop{kind: "unwatch", p: g.principal(), unw: wire.UnwatchRequest{RequestID: g.nextID(), WatchID: g.pick(mWatchIDs)}}
	}
	w := live[g.r.IntN(len(live))]
	return mop{kind: "unwatch", p: w.p, unw: wire.UnwatchRequest{RequestID: g.nextID(), WatchID: w.id}}
}

func (g *mGen) listOp(ns string) mop {
	r := wire.ListRequest{RequestID: g.nextID(), Namespace: ns}
	if g.chance(40) {
		r.KeyPrefix = g.pick(mPrefixes)
	}
	if g.chance(30) {
		r.AfterKey = g.pick(mKeys)
	}
	if g.chance(50) {
		r.Limit = g.r.Int64N(4)
	}
	if g.chance(3) {
		r.Limit = 257
	}
	return mop{kind: "list", p: g.readerFor(ns), list: r}
}

// reloadOp is a new principals table: alice an admin or not, bob present or removed.
func (g *mGen) reloadOp() mop {
	table := map[string]policy.Principal{admin.ID: admin, alice.ID: {ID: alice.ID, Admin: g.chance(40)}}
	if g.chance(70) {
		table[bob.ID] = bob
	}
	return mop{kind: "reload", table: table}
}

// op is one random operation against the model's current state.
func (g *mGen) op(m *model) mop {
	ns, key := g.ns(), g.key()
	if g.chance(2) {
		return g.reloadOp()
	}
	switch n := g.r.IntN(100); {
	case n < 47:
		return g.put(m, ns, key)
	case n < 61:
		return g.del(m, ns, key)
	case n < 69:
		return mop{kind: "get", p: g.readerFor(ns), get: wire.GetRequest{RequestID: g.nextID(), Namespace: ns, Key: key}}
	case n < 75:
		return g.listOp(ns)
	case n < 88:
		return g.watchOp(ns)
	case n < 92:
		return g.unwatchOp(m)
	default:
		return g.ackOp(m)
	}
}

// syncOp is an operation that may follow a clock advance before the harness syncs: one whose
// outcome does not depend on whether the due leases have been committed yet. A put or delete that
// reaches the commit comes after every due expiry, and one refused before does not depend on them; a
// get never shows an entry past its deadline; a watch snapshot of a namespace holding due leases comes
// after them (SPEC 6). A watch of another namespace may come before them, and whether it is admitted
// depends on the watches their EXPIRE closes with OVERFLOW: it is not one.
func (g *mGen) syncOp(m *model, dueNS map[string]bool) mop {
	for {
		o := g.op(m)
		if o.kind == "put" || o.kind == "delete" || o.kind == "get" || (o.kind == "watch" && dueNS[o.watch.Namespace]) {
			return o
		}
	}
}

// dueNamespaces are the namespaces holding an entry whose deadline has passed.
func (m *model) dueNamespaces() map[string]bool {
	out := map[string]bool{}
	for ns, sp := range m.spaces {
		for _, e := range sp.entries {
			if e.ExpiresAtMs != 0 && e.ExpiresAtMs <= m.now {
				out[ns] = true
			}
		}
	}
	return out
}

// ---- the harness ----

type mClock struct{ ms atomic.Int64 }

func (c *mClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

type mRun struct {
	t     *testing.T
	seed  uint64
	path  string
	opts  Options
	clk   *mClock
	s     *Store
	m     *model
	g     *mGen
	epoch string
	log   []string
	seen  map[string]int // outcomes reached (op kind and answer, watch message kinds), for coverage
}

func (h *mRun) fatalf(format string, args ...any) {
	h.t.Helper()
	tail := h.log
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	var engineWatches, modelWatches []string
	if h.s != nil {
		for _, r := range h.s.LiveWatches() {
			engineWatches = append(engineWatches, r.Principal+"/"+r.WatchID)
		}
	}
	for _, w := range h.m.watches {
		if w.live {
			modelWatches = append(modelWatches, w.p.ID+"/"+w.id)
		}
	}
	slices.Sort(engineWatches)
	slices.Sort(modelWatches)
	var recs []string
	for _, w := range h.m.watches {
		got := w.rec.snapshot()
		var last []string
		for _, m := range got[max(0, len(got)-3):] {
			last = append(last, mMsgString(m))
		}
		recs = append(recs, fmt.Sprintf("%s/%s live=%v model %d msgs, engine %d, last %v", w.p.ID, w.id, w.live, len(w.msgs), len(got), last))
	}
	if h.s != nil {
		recs = append(recs, fmt.Sprintf("engine unavailable: %v", h.s.Unavailable()))
	}
	h.t.Logf("watches:\n  %s", strings.Join(recs, "\n  "))
	h.t.Fatalf("seed %d (rerun: MODEL_SEED=%d go test ./store -run TestModelEngine): %s\nlive watches: engine %v, model %v\nlast steps:\n  %s",
		h.seed, h.seed, fmt.Sprintf(format, args...), engineWatches, modelWatches, strings.Join(tail, "\n  "))
}

func (h *mRun) logf(format string, args ...any) {
	h.log = append(h.log, fmt.Sprintf(format, args...))
}

// step runs o on both sides and compares the answers.
func (h *mRun) step(ctx context.Context, o mop) {
	h.t.Helper()
	want := h.m.apply(o)
	got := mRunEngine(ctx, h.s, o)
	h.logf("%v -> %s", o, mAnswerString(got))
	h.seen[o.kind+" "+outcome(got)]++
	if d := mDiffAnswer(want, got); d != "" {
		h.fatalf("%v: %s", o, d)
	}
}

// outcome is an answer's code, or "ok".
func outcome(a mAnswer) string {
	if a.code == "" {
		return "ok"
	}
	return strings.TrimPrefix(string(a.code), "STATE_STORE_ERROR_CODE_")
}

func mAnswerString(a mAnswer) string {
	if a.code != "" {
		return fmt.Sprintf("%s cur=%s", strings.TrimPrefix(string(a.code), "STATE_STORE_ERROR_CODE_"), mPtrRev(a.cur))
	}
	switch {
	case a.entry != nil:
		return fmt.Sprintf("ok rev %d", a.entry.Revision)
	case a.list != nil:
		return fmt.Sprintf("ok %d entries rev %d next %q", len(a.list.Entries), a.list.Revision, a.list.NextAfterKey)
	case a.ws != nil:
		return fmt.Sprintf("ok snapshot rev %d, %d entries", a.ws.SnapshotRevision, len(a.ws.Entries))
	case a.rev != 0:
		return fmt.Sprintf("ok rev %d", a.rev)
	}
	return "ok"
}

// barrier runs a commit with no change: every lease already due is expired before it answers.
func (h *mRun) barrier(ctx context.Context) {
	h.t.Helper()
	if r := h.s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
		h.fatalf("barrier: %v", r.err)
	}
}

// check compares every namespace's full List and every watch's messages with the model.
func (h *mRun) check(ctx context.Context) {
	h.t.Helper()
	for _, ns := range mNamespaces {
		got, err := h.s.List(ctx, admin, wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
		want := h.m.doList(admin, wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
		if d := mDiffAnswer(want, mAnswer{list: &got, code: wire.CodeOf(err)}); d != "" {
			h.fatalf("full list of %s: %s", ns, d)
		}
	}
	for _, w := range h.m.watches {
		if d := mDiffWatch(w, false); d != "" {
			h.fatalf("%s", d)
		}
	}
	// The same watches are live on both sides.
	var engineWatches, modelWatches []string
	for _, r := range h.s.LiveWatches() {
		engineWatches = append(engineWatches, r.Principal+"/"+r.WatchID)
	}
	for _, w := range h.m.watches {
		if w.live {
			modelWatches = append(modelWatches, w.p.ID+"/"+w.id)
		}
	}
	slices.Sort(engineWatches)
	slices.Sort(modelWatches)
	if !slices.Equal(engineWatches, modelWatches) {
		h.fatalf("live watches differ")
	}
	// The counters behind quotas and metrics agree with what is stored.
	st := h.s.Stats()
	if st.TotalBytes != h.m.totalBytes() || st.LiveNamespaces != h.m.liveNamespaces() {
		h.fatalf("stats: total bytes %d, live namespaces %d; want %d, %d", st.TotalBytes, st.LiveNamespaces, h.m.totalBytes(), h.m.liveNamespaces())
	}
	for _, ns := range st.PerNamespace {
		sp := h.m.spaces[ns.Namespace]
		var rev uint64
		var n int
		var nb int64
		if sp != nil {
			rev, n = sp.rev, len(sp.entries)
			for _, e := range sp.entries {
				nb += int64(len(e.Document))
			}
		}
		if ns.Revision != rev || ns.Entries != n || ns.Bytes != nb {
			h.fatalf("stats of %s: %+v, want revision %d, %d entries, %d bytes", ns.Namespace, ns, rev, n, nb)
		}
	}
}

// tallyWatches counts the messages the model's watches were sent, by kind and close reason.
func (h *mRun) tallyWatches() {
	for _, w := range h.m.watches {
		for _, x := range w.msgs {
			h.seen["message "+string(x.kind)+" "+string(x.reason)]++
		}
	}
}

func (h *mRun) open() {
	h.t.Helper()
	s, err := Open(h.path, h.opts)
	if err != nil {
		h.fatalf("Open: %v", err)
	}
	if r := s.Unavailable(); r != nil {
		s.Close()
		h.fatalf("store unavailable: %v", r)
	}
	if h.epoch != "" && s.Info().Epoch != h.epoch {
		s.Close()
		h.fatalf("epoch %q after a reopen, was %q (SPEC 9: a restart keeps the epoch)", s.Info().Epoch, h.epoch)
	}
	h.epoch = s.Info().Epoch
	h.s = s
}

func (h *mRun) reopen() {
	h.t.Helper()
	if err := h.s.Close(); err != nil {
		h.fatalf("Close: %v", err)
	}
	if !h.m.closed {
		h.m.closed = true
		h.m.shutdown()
	}
	// Every message of the closed store is in by now; the next store's watches start afresh.
	for _, w := range h.m.watches {
		if d := mDiffWatch(w, false); d != "" {
			h.fatalf("at close: %s", d)
		}
	}
	h.tallyWatches()
	h.m.watches = nil
	if h.g.chance(30) {
		// Time passes while the store is down: the restart purge (SPEC 6) expires what fell due.
		d := 500 + h.g.r.Int64N(4000)
		h.clk.ms.Add(d)
		h.m.now += d
		h.logf("advance %d ms while closed (now %d)", d, h.m.now)
	}
	h.m.expireDue()
	h.m.closed = false
	h.m.principals = nil // a new Store has had no ReloadPrincipals
	h.open()
	h.logf("reopen")
	// Every committed change, the restart purge's included, has its audit record (SPEC 10).
	rep, err := h.s.VerifyAudit()
	if err != nil || !rep.OK() || rep.HeadSeq != h.m.commits {
		h.fatalf("audit after reopen: %+v %v, want an intact chain of %d records", rep, err, h.m.commits)
	}
}

// advance moves the clock forward. Either a round of concurrent writers follows, in which the due
// expiries are one more operation to place in the serial order, or the model expires them at once and
// the engine is synced with it: by one operation that commits after them or does not see them, or a
// reopen, then a barrier, so that nothing is left due when the next step observes the store. (The
// engine's own timer may expire them at any moment in between: it runs on the store's clock, which
// only this function moves.)
func (h *mRun) advance(ctx context.Context) {
	h.t.Helper()
	d := []int64{1, 400, 999, 1000, 1500, 2500, 5000}[h.g.r.IntN(7)]
	h.clk.ms.Add(d)
	h.m.now += d
	h.logf("advance %d ms (now %d)", d, h.m.now)
	if h.g.chance(30) {
		// Writers at once while leases are due: the expiries fit in the serial order somewhere, but
		// before any put, delete or snapshot of their namespace (SPEC 6).
		h.concurrent(ctx, true)
		return
	}
	dueNS := h.m.dueNamespaces()
	h.m.expireDue()
	switch h.g.r.IntN(6) {
	case 0:
		h.reopen()
	case 1, 2, 3, 4:
		h.step(ctx, h.g.syncOp(h.m, dueNS))
	}
	h.barrier(ctx)
}

// mCop is one operation of a concurrent round with what the engine answered, and when (a logical
// clock: invocation and response).
type mCop struct {
	o          mop
	got        mAnswer
	start, end int64
}

// concurrent runs a round of writers at once, each a short sequence of operations on a few hot keys,
// then searches for a serial order of the round's operations (each writer's in its own order, and
// one that ended before another began first) in which the model gives every answer the engine gave
// and sends every watch exactly what it received.
func (h *mRun) concurrent(ctx context.Context, withExpiry bool) {
	h.t.Helper()
	g := h.g
	ns := g.pick([]string{"user/alice", "service/svc", "group/g", mSettingsNS})
	hot := []string{g.pick(mKeys), g.pick(mKeys)}
	writers := 2 + g.r.IntN(2)
	hist := make([][]mCop, writers)
	for w := range hist {
		n := 1 + g.r.IntN(3)
		for range n {
			var o mop
			switch k := hot[g.r.IntN(len(hot))]; {
			case g.chance(50):
				o = g.put(h.m, ns, k)
				if g.chance(60) { // racing compare-and-set: the same expected revision for all
					o.put.ExpectedRevision = i64(g.revisionFor(h.m, ns, k))
				}
			case g.chance(35):
				o = g.del(h.m, ns, k)
			case g.chance(40):
				o = g.watchOp(ns)
			case g.chance(50):
				o = g.ackOp(h.m)
			case g.chance(15):
				o = g.reloadOp()
			case g.chance(25):
				o = g.unwatchOp(h.m)
			case g.chance(30):
				o = g.listOp(ns)
			default:
				o = mop{kind: "get", p: g.readerFor(ns), get: wire.GetRequest{RequestID: g.nextID(), Namespace: ns, Key: k}}
			}
			hist[w] = append(hist[w], mCop{o: o})
		}
	}
	closing := g.chance(12)
	if closing {
		// Close while the writers run: what it answered before is durable, what it refused changed
		// nothing, and every watch gets its SHUTDOWN after its last update. Close is not one instant:
		// it refuses new calls, then finishes the commits in flight (SPEC 14), whose updates still
		// reach the watches, and only then closes them; a principals reload in between rightly closes
		// a watch that lost its permission with UNAUTHORIZED. So a closing round reloads nothing.
		for w := range hist {
			hist[w] = slices.DeleteFunc(hist[w], func(c mCop) bool { return c.o.kind == "reload" })
		}
		w := g.r.IntN(len(hist))
		i := g.r.IntN(len(hist[w]) + 1)
		hist[w] = slices.Insert(hist[w], i, mCop{o: mop{kind: "close"}})
	}
	var clock atomic.Int64
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for w := range hist {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			for i := range hist[w] {
				c := &hist[w][i]
				c.start = clock.Add(1)
				c.got = mRunEngine(ctx, h.s, c.o)
				c.end = clock.Add(1)
			}
		}()
	}
	close(startGate)
	wg.Wait()
	if !closing {
		h.barrier(ctx) // an expiry not yet run comes now, and last in the order
	}
	if withExpiry {
		hist = append(hist, []mCop{{o: mop{kind: "expire"}, start: 0, end: math.MaxInt64}})
	}
	var lines []string
	for w, ops := range hist {
		for _, c := range ops {
			lines = append(lines, fmt.Sprintf("writer %d [%d,%d] %v -> %s", w, c.start, c.end, c.o, mAnswerString(c.got)))
		}
	}
	h.logf("concurrent round:\n    %s", strings.Join(lines, "\n    "))
	if m := mLinearize(h.m, hist); m != nil {
		for _, ops := range hist {
			for _, c := range ops {
				h.seen["round "+c.o.kind+" "+outcome(c.got)]++
			}
		}
		h.m = m
		if closing {
			h.reopen()
		}
		return
	}
	h.fatalf("no serial order of the concurrent round fits the engine's answers and watch messages")
}

func mLinearize(start *model, hist [][]mCop) *model {
	idx := make([]int, len(hist))
	var dfs func(m *model) *model
	dfs = func(m *model) *model {
		for _, w := range m.watches {
			if mDiffWatch(w, true) != "" {
				return nil
			}
		}
		done := true
		for g := range hist {
			if idx[g] < len(hist[g]) {
				done = false
			}
		}
		if done {
			for _, w := range m.watches {
				if mDiffWatch(w, false) != "" {
					return nil
				}
			}
			return m
		}
		for g := range hist {
			if idx[g] == len(hist[g]) {
				continue
			}
			c := hist[g][idx[g]]
			minimal := true
			for h := range hist {
				if h != g && idx[h] < len(hist[h]) && hist[h][idx[h]].end < c.start {
					minimal = false // that one answered before c was asked: it comes first
				}
			}
			if !minimal {
				continue
			}
			mc := m.clone()
			if mDiffAnswer(mc.apply(c.o), c.got) != "" {
				continue
			}
			idx[g]++
			if r := dfs(mc); r != nil {
				return r
			}
			idx[g]--
		}
		return nil
	}
	return dfs(start)
}

func mEnvInt(name string, def uint64) uint64 {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil {
			return n
		}
	}
	return def
}

// TestModelEngine drives the engine and the reference model with the same random operations and
// compares everything they answer and send.
func TestModelEngine(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	steps := mEnvInt("MODEL_STEPS", 600)
	if testing.Short() {
		seeds, steps = seeds[:2], min(steps, 120)
	}
	if s := os.Getenv("MODEL_SEED"); s != "" {
		seeds = []uint64{mEnvInt("MODEL_SEED", 1)}
	}
	seen := map[string]int{}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runModel(t, seed, int(steps), seen) })
	}
	if t.Failed() || testing.Short() || len(seeds) == 1 {
		return
	}
	// The generator must keep reaching the rules it is there to check (with every seed of the
	// full run: a shorter one need not reach them all).
	for _, want := range []string{
		"put ok", "put CONFLICT", "put GUARD_FAILED", "put QUOTA_EXCEEDED", "put TOO_LARGE", "put SCHEMA_INVALID",
		"put TTL_INVALID", "put PERMISSION_DENIED", "put INVALID_ARGUMENT", "delete ok", "delete NOT_FOUND",
		"delete CONFLICT", "delete GUARD_FAILED", "get ok", "get NOT_FOUND", "list ok", "watch ok",
		"watch WATCH_EXISTS", "watch RESOURCE_EXHAUSTED", "watch WATCH_TOO_BROAD", "ack ok", "ack INVALID_ARGUMENT",
		"unwatch ok", "round put ok", "round put CONFLICT", "round watch ok",
		"message PUT ", "message DELETE ", "message EXPIRE ", "message CLOSED OVERFLOW", "message CLOSED SHUTDOWN",
	} {
		if seen[want] == 0 {
			t.Errorf("no step reached %q", want)
		}
	}
	keys := slices.Sorted(maps.Keys(seen))
	for _, k := range keys {
		t.Logf("%6d %s", seen[k], k)
	}
}

func runModel(t *testing.T, seed uint64, steps int, seen map[string]int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := &mClock{}
	clk.ms.Store(1_764_451_200_000)
	opts := DefaultOptions()
	opts.Bounds = modelBounds()
	opts.Clock = clk.now
	// Commits of one mutation each, of two, or of as many as are queued; an audit log pruned often
	// or rarely.
	opts.MaxBatch = []int{1, 2, 1024}[seed%3]
	opts.AuditRetention = []int{3, DefaultAuditRetention}[seed/3%2]
	dir := t.TempDir()
	cfg := filepath.Join(dir, "stated.toml")
	if err := os.WriteFile(cfg, []byte("[state_store.settings.\""+mSettingsNS+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.Settings = map[string]SettingsBackend{mSettingsNS: TOMLSettings(cfg, mSettingsNS)}
	h := &mRun{t: t, seed: seed, path: filepath.Join(dir, "state-store.db"), opts: opts, clk: clk,
		m: newModel(opts.Bounds, clk.ms.Load()), g: &mGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, seen: seen}
	h.open()
	defer func() { h.s.Close() }()
	defer h.tallyWatches()
	for i := 0; i < steps; i++ {
		switch n := h.g.r.IntN(100); {
		case n < 8:
			h.advance(ctx)
		case n < 9:
			h.reopen()
		case n < 15:
			h.concurrent(ctx, false)
		default:
			h.step(ctx, h.g.op(h.m))
		}
		h.check(ctx)
	}
}
