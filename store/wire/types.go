package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// Op names a state operation; it is the last token of its request subject.
type Op string

// The operations of SPEC section 5.
const (
	OpGet     Op = "get"
	OpPut     Op = "put"
	OpDelete  Op = "delete"
	OpList    Op = "list"
	OpWatch   Op = "watch"
	OpUnwatch Op = "unwatch"
	OpAck     Op = "ack"
	OpInfo    Op = "info"
)

// Ops lists every operation.
var Ops = []Op{OpGet, OpPut, OpDelete, OpList, OpWatch, OpUnwatch, OpAck, OpInfo}

// FeatureStateStore is advertised by info only while the store is served.
const FeatureStateStore = "keeppeek.state-store.v1"

// Entry is a StateEntry (SPEC section 3). Document is the compact JSON encoding of one object.
type Entry struct {
	Namespace   string          `json:"namespace"`
	Key         string          `json:"key"`
	Schema      string          `json:"schema"`
	Owner       string          `json:"owner"`
	Revision    uint64          `json:"revision"`
	CreatedAtMs int64           `json:"created_at_ms"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	TTLMs       int64           `json:"ttl_ms,omitempty"`
	ExpiresAtMs int64           `json:"expires_at_ms,omitempty"`
	Document    json.RawMessage `json:"document"`
}

// Guard is the fencing guard of put and delete: the write commits only if Key's live entry has
// revision Revision.
type Guard struct {
	Key      string `json:"key"`
	Revision int64  `json:"revision"`
}

// UnmarshalJSON reads a guard as Decode reads the request around it: an object whose names are
// exactly key and revision, each at most once (encoding/json would match `KEY` or `Revision`, and let
// a repeated name override the first, so the write would be fenced on a key the caller did not mean),
// with nothing after it. Decode's strictness ends at the top level otherwise; the guard is the one
// object nested in a request.
func (g *Guard) UnmarshalJSON(data []byte) error {
	if string(bytes.Trim(data, " \t\r\n")) == "null" {
		return nil // as encoding/json treats null: nothing to set
	}
	trimmed, err := requestObject(data, g)
	if err == nil {
		type plain Guard // without this method
		err = strictJSON(trimmed, (*plain)(g))
	}
	var we *Error
	if errors.As(err, &we) {
		return errors.New("guard: " + strings.TrimPrefix(we.Message, "malformed request: "))
	}
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	return nil
}

// GetRequest reads one entry.
type GetRequest struct {
	RequestID int64  `json:"request_id"`
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// PutRequest replaces one entry. Nil pointers are absent fields.
type PutRequest struct {
	RequestID        int64           `json:"request_id"`
	Namespace        string          `json:"namespace"`
	Key              string          `json:"key"`
	Schema           string          `json:"schema"`
	Document         json.RawMessage `json:"document"`
	ExpectedRevision *int64          `json:"expected_revision,omitempty"`
	TTLMs            *int64          `json:"ttl_ms,omitempty"`
	Guard            *Guard          `json:"guard,omitempty"`
}

// DeleteRequest removes one entry.
type DeleteRequest struct {
	RequestID        int64  `json:"request_id"`
	Namespace        string `json:"namespace"`
	Key              string `json:"key"`
	ExpectedRevision *int64 `json:"expected_revision,omitempty"`
	Guard            *Guard `json:"guard,omitempty"`
}

// ListRequest pages through the live entries of a namespace in bytewise key order.
type ListRequest struct {
	RequestID int64  `json:"request_id"`
	Namespace string `json:"namespace"`
	KeyPrefix string `json:"key_prefix,omitempty"`
	AfterKey  string `json:"after_key,omitempty"`
	Limit     int64  `json:"limit,omitempty"`
}

// WatchRequest captures a snapshot and registers a watch.
type WatchRequest struct {
	RequestID int64  `json:"request_id"`
	WatchID   string `json:"watch_id"`
	Namespace string `json:"namespace"`
	KeyPrefix string `json:"key_prefix,omitempty"`
}

// UnwatchRequest removes a watch.
type UnwatchRequest struct {
	RequestID int64  `json:"request_id"`
	WatchID   string `json:"watch_id"`
}

// AckRequest acknowledges the highest contiguously applied watch sequence.
type AckRequest struct {
	RequestID       int64  `json:"request_id"`
	WatchID         string `json:"watch_id"`
	AppliedSequence *int64 `json:"applied_sequence"`
}

// InfoRequest asks for server information.
type InfoRequest struct {
	RequestID int64 `json:"request_id"`
}

// DefaultListLimit and MaxListLimit bound list pages.
const (
	DefaultListLimit = 100
	MaxListLimit     = 256
)

// WatchState is the ok reply of watch: the atomic snapshot.
type WatchState struct {
	WatchID          string  `json:"watch_id"`
	Namespace        string  `json:"namespace"`
	KeyPrefix        string  `json:"key_prefix"`
	SnapshotRevision uint64  `json:"snapshot_revision"`
	Entries          []Entry `json:"entries"`
}

// Info is the ok reply of info.
type Info struct {
	ServerID string   `json:"server_id"`
	Version  string   `json:"version"`
	Epoch    string   `json:"epoch"`
	Features []string `json:"features"`
	Bounds   Bounds   `json:"bounds"`
}

// Result is a StateStoreResult, the reply to every request. Only the fields of the op are set.
type Result struct {
	RequestID       int64       `json:"request_id"`
	OK              bool        `json:"ok"`
	Error           *Error      `json:"error,omitempty"`
	Entry           *Entry      `json:"entry,omitempty"`
	Revision        *uint64     `json:"revision,omitempty"`
	Entries         []Entry     `json:"entries,omitzero"`
	NextAfterKey    string      `json:"next_after_key,omitempty"`
	Watch           *WatchState `json:"watch,omitempty"`
	WatchID         string      `json:"watch_id,omitempty"`
	AppliedSequence *uint64     `json:"applied_sequence,omitempty"`
	ServerID        string      `json:"server_id,omitempty"`
	Version         string      `json:"version,omitempty"`
	Epoch           string      `json:"epoch,omitempty"`
	Features        []string    `json:"features,omitzero"`
	Bounds          *Bounds     `json:"bounds,omitempty"`
}

// ErrorResult returns the failed reply for err; an error that is not a *Error becomes STORAGE.
func ErrorResult(requestID int64, err error) Result {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeStorage, Message: err.Error()}
	}
	return Result{RequestID: requestID, OK: false, Error: e}
}

// UpdateKind is the kind of a watch message.
type UpdateKind string

// Watch message kinds.
const (
	UpdatePut    UpdateKind = "PUT"
	UpdateDelete UpdateKind = "DELETE"
	UpdateExpire UpdateKind = "EXPIRE"
	UpdateClosed UpdateKind = "CLOSED"
)

// CloseReason says why the server closed a watch (SPEC section 7.6).
type CloseReason string

// Close reasons, bare on the wire.
const (
	CloseOverflow       CloseReason = "OVERFLOW"
	CloseAckTimeout     CloseReason = "ACK_TIMEOUT"
	CloseUnauthorized   CloseReason = "UNAUTHORIZED"
	CloseSnapshotFailed CloseReason = "SNAPSHOT_FAILED"
	CloseRestored       CloseReason = "RESTORED"
	CloseShutdown       CloseReason = "SHUTDOWN"
)

// WatchUpdate is a StateStoreWatchUpdate. Entry is set for PUT only.
type WatchUpdate struct {
	WatchID       string     `json:"watch_id"`
	WatchSequence uint64     `json:"watch_sequence"`
	Revision      uint64     `json:"revision"`
	Kind          UpdateKind `json:"kind"`
	Key           string     `json:"key"`
	Entry         *Entry     `json:"entry,omitempty"`
}

// WatchClosed is a StateStoreWatchClosed message; Kind is always CLOSED.
type WatchClosed struct {
	WatchID string      `json:"watch_id"`
	Kind    UpdateKind  `json:"kind"`
	Reason  CloseReason `json:"reason"`
	Message string      `json:"message"`
}

// WatchMessage is either message that travels on a watch's delivery subject. Decode it, then look at
// Kind: CLOSED carries Reason and Message, the others are updates.
type WatchMessage struct {
	WatchID       string      `json:"watch_id"`
	WatchSequence uint64      `json:"watch_sequence,omitempty"`
	Revision      uint64      `json:"revision,omitempty"`
	Kind          UpdateKind  `json:"kind"`
	Key           string      `json:"key,omitempty"`
	Entry         *Entry      `json:"entry,omitempty"`
	Reason        CloseReason `json:"reason,omitempty"`
	Message       string      `json:"message,omitempty"`
}

// Decode strictly decodes one JSON object into v, a pointer to a struct of this package: a body that is
// not an object, a field name that is not spelled exactly as the contract spells it (names are
// case-sensitive), a duplicate field, an unknown field, trailing data and type mismatches are all
// INVALID_ARGUMENT. A PutRequest's Document shares data's memory (PutRequest.ValidateCompact returns
// a copy); every other field is a copy.
func Decode(data []byte, v any) error {
	trimmed, err := requestObject(data, v)
	if err != nil {
		return err
	}
	switch r := v.(type) {
	case *PutRequest:
		err = decodePut(trimmed, r)
	case *AckRequest:
		err = decodeAck(trimmed, r)
	default:
		err = strictJSON(trimmed, v)
	}
	if err != nil {
		return Errorf(CodeInvalidArgument, "malformed request: %v", err)
	}
	return nil
}

// requestObject returns data less surrounding whitespace when it is an object whose member names are
// exactly json tags of the struct v points to, each once.
func requestObject(data []byte, v any) ([]byte, error) {
	trimmed := bytes.Trim(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, Errorf(CodeInvalidArgument, "malformed request: not a JSON object")
	}
	return trimmed, checkFieldNames(trimmed, reflect.TypeOf(v).Elem())
}

// strictJSON decodes exactly one JSON value into v with encoding/json, refusing unknown fields.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

var fieldNameCache sync.Map // reflect.Type -> map[string]uint64, each name's bit

// checkFieldNames rejects top-level names that are not exactly a json tag of t, and duplicates.
func checkFieldNames(obj []byte, t reflect.Type) error {
	var names map[string]uint64
	if c, ok := fieldNameCache.Load(t); ok {
		names = c.(map[string]uint64)
	} else {
		names = map[string]uint64{}
		if t.Kind() == reflect.Struct {
			for i := range t.NumField() {
				if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
					if len(names) == 64 {
						panic("wire: request type " + t.String() + " has more than 64 fields")
					}
					names[name] = 1 << len(names)
				}
			}
		}
		fieldNameCache.Store(t, names)
	}
	var seen uint64
	pos := skipSpace(obj, 1) // after '{'
	if pos < len(obj) && obj[pos] == '}' {
		return nil
	}
	for {
		if pos >= len(obj) || obj[pos] != '"' {
			return Errorf(CodeInvalidArgument, "malformed request: property name expected")
		}
		end := pos + 1
		for end < len(obj) && obj[end] != '"' && obj[end] != '\\' {
			end++
		}
		if end >= len(obj) || obj[end] != '"' {
			// An escaped or unterminated name is never one of ours.
			return Errorf(CodeInvalidArgument, "unknown field %.64q", obj[pos:min(end+1, len(obj))])
		}
		name := obj[pos+1 : end]
		bit := names[string(name)]
		if bit == 0 {
			return Errorf(CodeInvalidArgument, "unknown field %q", name)
		}
		if seen&bit != 0 {
			return Errorf(CodeInvalidArgument, "duplicate field %q", name)
		}
		seen |= bit
		pos = skipSpace(obj, end+1)
		if pos >= len(obj) || obj[pos] != ':' {
			return Errorf(CodeInvalidArgument, "malformed request: ':' expected")
		}
		var err error
		if pos, err = skipValue(obj, skipSpace(obj, pos+1)); err != nil {
			return err
		}
		pos = skipSpace(obj, pos)
		if pos >= len(obj) {
			return Errorf(CodeInvalidArgument, "malformed request: unexpected end")
		}
		switch obj[pos] {
		case ',':
			pos = skipSpace(obj, pos+1)
		case '}':
			return nil
		default:
			return Errorf(CodeInvalidArgument, "malformed request: ',' or '}' expected")
		}
	}
}

func skipSpace(b []byte, pos int) int {
	for pos < len(b) && (b[pos] == ' ' || b[pos] == '\t' || b[pos] == '\r' || b[pos] == '\n') {
		pos++
	}
	return pos
}

// skipValue returns the position after the JSON value at pos. It finds the value's end (strings,
// nesting) without validating its grammar: the strict decode that follows does that.
func skipValue(b []byte, pos int) (int, error) {
	depth := 0
	for pos < len(b) {
		switch c := b[pos]; c {
		case '"':
			pos++
			for {
				pos = PlainRun(b, pos)
				if pos >= len(b) {
					return pos, Errorf(CodeInvalidArgument, "malformed request: unterminated string")
				}
				if b[pos] == '"' {
					break
				}
				if b[pos] == '\\' {
					pos++
				}
				pos++
			}
			pos++
		case '{', '[':
			depth++
			pos++
		case '}', ']':
			if depth == 0 {
				return pos, nil
			}
			depth--
			pos++
		case ',':
			if depth == 0 {
				return pos, nil
			}
			pos++
		default:
			pos++
		}
		if depth == 0 && pos < len(b) {
			// a scalar or a closed container at the top: stop at the next delimiter
			if c := b[pos]; c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				return pos, nil
			}
		}
	}
	return pos, Errorf(CodeInvalidArgument, "malformed request: unexpected end")
}

// RequestIDOf extracts request_id from a request that may be invalid, for the error reply; 0 when the
// body is not a JSON object, has no request_id spelled exactly so (names are case-sensitive and
// unescaped, as Decode reads them: `request\u005fid` is an unknown field) or has it twice, or the id is
// not an integer from 0 to 2^53-1.
func RequestIDOf(data []byte) int64 {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	var id int64
	found := false
	for dec.More() {
		start := dec.InputOffset()
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return 0
		}
		// The bytes read for the name are a separator, spaces and the quoted name: a backslash among
		// them is an escape in the name.
		if bytes.IndexByte(data[start:dec.InputOffset()], '\\') >= 0 {
			name = ""
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0
		}
		if name != "request_id" {
			continue
		}
		if found || json.Unmarshal(v, &id) != nil {
			return 0
		}
		found = true
	}
	if _, err := dec.Token(); err != nil { // the object's end
		return 0
	}
	if _, err := dec.Token(); err != io.EOF { // and nothing after it
		return 0
	}
	if id < 0 || id > MaxSafeInteger {
		return 0
	}
	return id
}

// CompactDocument checks that raw is one JSON object and returns its compact encoding, whose length is
// the document's size. It always returns a new slice: the store keeps it, whatever the caller does
// with raw afterwards.
func CompactDocument(raw json.RawMessage) ([]byte, error) {
	trimmed := bytes.Trim(raw, " \t\r\n") // JSON whitespace only
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, Errorf(CodeInvalidArgument, "document is required")
	}
	if trimmed[0] != '{' {
		return nil, Errorf(CodeInvalidArgument, "document must be a JSON object")
	}
	valid, compact := scanJSON(trimmed)
	if valid && compact {
		return bytes.Clone(trimmed), nil
	}
	var buf bytes.Buffer
	buf.Grow(len(trimmed))
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, Errorf(CodeInvalidArgument, "document is not valid JSON: %v", err)
	}
	return buf.Bytes(), nil
}

func checkRequestID(id int64) error {
	if id < 0 || id > MaxSafeInteger {
		return Errorf(CodeInvalidArgument, "request_id must be between 0 and 2^53-1")
	}
	return nil
}

func checkNamespaceKey(ns, key string) error {
	if ns == "" {
		return Errorf(CodeInvalidArgument, "namespace is required")
	}
	if !ValidNamespace(ns) {
		return Errorf(CodeInvalidArgument, "invalid namespace %q", ns)
	}
	if key == "" {
		return Errorf(CodeInvalidArgument, "key is required")
	}
	if !ValidKey(key) {
		return Errorf(CodeInvalidArgument, "invalid key %q", key)
	}
	return nil
}

func checkExpected(exp *int64) error {
	if exp != nil && (*exp < 0 || *exp > MaxSafeInteger) {
		return Errorf(CodeInvalidArgument, "expected_revision must be between 0 and 2^53-1")
	}
	return nil
}

func checkGuard(g *Guard, key string) error {
	if g == nil {
		return nil
	}
	if g.Key == "" || !ValidKey(g.Key) {
		return Errorf(CodeInvalidArgument, "guard key %q is not a valid key", g.Key)
	}
	if g.Key == key {
		return Errorf(CodeInvalidArgument, "guard key must differ from the written key")
	}
	if g.Revision < 1 || g.Revision > MaxSafeInteger {
		return Errorf(CodeInvalidArgument, "guard revision %d is not a revision: 1 to 2^53-1", g.Revision)
	}
	return nil
}

// Validate checks shape and identifiers (check 1 of SPEC section 5).
func (r *GetRequest) Validate() error {
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	return checkNamespaceKey(r.Namespace, r.Key)
}

// Validate checks shape and identifiers. It does not check TTL bounds other than the sign, size or
// schema: those are later checks.
func (r *PutRequest) Validate() error {
	_, err := r.ValidateCompact()
	return err
}

// ValidateCompact is Validate that also returns the document's compact encoding, so a caller that
// needs it compacts the document once.
func (r *PutRequest) ValidateCompact() ([]byte, error) {
	if err := checkRequestID(r.RequestID); err != nil {
		return nil, err
	}
	if err := checkNamespaceKey(r.Namespace, r.Key); err != nil {
		return nil, err
	}
	if r.Schema == "" {
		return nil, Errorf(CodeInvalidArgument, "schema is required")
	}
	doc, err := CompactDocument(r.Document)
	if err != nil {
		return nil, err
	}
	// JSON exchanged between systems is UTF-8 (RFC 8259, section 8.1). encoding/json lets other bytes
	// through inside strings, and the store hands documents out as it got them: a client whose JSON
	// decoder is strict (Python's json.loads, say) could then read no snapshot or update that carries
	// the document, for every watcher of its namespace.
	if !utf8.Valid(doc) {
		return nil, Errorf(CodeInvalidArgument, "document is not valid UTF-8")
	}
	if err := checkExpected(r.ExpectedRevision); err != nil {
		return nil, err
	}
	if r.TTLMs != nil && (*r.TTLMs < 0 || *r.TTLMs > MaxSafeInteger) {
		return nil, Errorf(CodeInvalidArgument, "ttl_ms must be between 0 and 2^53-1")
	}
	return doc, checkGuard(r.Guard, r.Key)
}

// Validate checks shape and identifiers; expected_revision 0 on delete is INVALID_ARGUMENT.
func (r *DeleteRequest) Validate() error {
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	if err := checkNamespaceKey(r.Namespace, r.Key); err != nil {
		return err
	}
	if err := checkExpected(r.ExpectedRevision); err != nil {
		return err
	}
	if r.ExpectedRevision != nil && *r.ExpectedRevision == 0 {
		return Errorf(CodeInvalidArgument, "expected_revision 0 (create only) is meaningless on delete")
	}
	return checkGuard(r.Guard, r.Key)
}

// Validate checks shape and identifiers.
func (r *ListRequest) Validate() error {
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	if r.Namespace == "" {
		return Errorf(CodeInvalidArgument, "namespace is required")
	}
	if !ValidNamespace(r.Namespace) {
		return Errorf(CodeInvalidArgument, "invalid namespace %q", r.Namespace)
	}
	if !ValidKeyPrefix(r.KeyPrefix) {
		return Errorf(CodeInvalidArgument, "invalid key_prefix %q", r.KeyPrefix)
	}
	if r.AfterKey != "" && !ValidKey(r.AfterKey) {
		return Errorf(CodeInvalidArgument, "invalid after_key %q", r.AfterKey)
	}
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return Errorf(CodeInvalidArgument, "limit must be between 1 and %d", MaxListLimit)
	}
	return nil
}

// EffectiveLimit is Limit, or DefaultListLimit when it is 0.
func (r *ListRequest) EffectiveLimit() int {
	if r.Limit == 0 {
		return DefaultListLimit
	}
	return int(r.Limit)
}

// Validate checks shape and identifiers.
func (r *WatchRequest) Validate() error {
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	if !ValidWatchID(r.WatchID) {
		return Errorf(CodeInvalidArgument, "invalid watch_id %q", r.WatchID)
	}
	if r.Namespace == "" {
		return Errorf(CodeInvalidArgument, "namespace is required")
	}
	if !ValidNamespace(r.Namespace) {
		return Errorf(CodeInvalidArgument, "invalid namespace %q", r.Namespace)
	}
	if !ValidKeyPrefix(r.KeyPrefix) {
		return Errorf(CodeInvalidArgument, "invalid key_prefix %q", r.KeyPrefix)
	}
	return nil
}

// Validate checks shape and identifiers.
func (r *UnwatchRequest) Validate() error {
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	if !ValidWatchID(r.WatchID) {
		return Errorf(CodeInvalidArgument, "invalid watch_id %q", r.WatchID)
	}
	return nil
}

// Validate checks shape and identifiers; whether the sequence is acceptable is the watch's business.
func (r *AckRequest) Validate() error {
	if err := checkRequestID(r.RequestID); err != nil {
		return err
	}
	if !ValidWatchID(r.WatchID) {
		return Errorf(CodeInvalidArgument, "invalid watch_id %q", r.WatchID)
	}
	if r.AppliedSequence == nil {
		return Errorf(CodeInvalidArgument, "applied_sequence is required")
	}
	if *r.AppliedSequence < 0 || *r.AppliedSequence > MaxSafeInteger {
		return Errorf(CodeInvalidArgument, "applied_sequence must be between 0 and 2^53-1")
	}
	return nil
}

// Validate checks the request id.
func (r *InfoRequest) Validate() error { return checkRequestID(r.RequestID) }

// String renders an entry's identity for messages.
func (e *Entry) String() string {
	return fmt.Sprintf("%s:%s@%d", e.Namespace, e.Key, e.Revision)
}
