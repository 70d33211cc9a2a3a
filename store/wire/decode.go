package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// DecodeResult decodes a StateStoreResult as a client reads it: tolerantly, the way json.Unmarshal
// decodes into a Result (unknown fields are skipped, null leaves a field as it is or a pointer nil,
// a repeated field decodes into what the earlier one set), except that field names must be spelled
// exactly (json.Unmarshal also matches them ignoring case). It reads the bytes once, so a reply with a
// large document costs one pass, where json.Unmarshal makes three. The result shares no memory with
// data.
func DecodeResult(data []byte, r *Result) error {
	return decodeTop(data, false, func(d *decoder, name string) error {
		switch name {
		case "request_id":
			return d.int64(&r.RequestID)
		case "ok":
			return d.bool(&r.OK)
		case "error":
			return d.errorPtr(&r.Error)
		case "entry":
			return d.entryPtr(&r.Entry)
		case "revision":
			return d.uint64Ptr(&r.Revision)
		case "entries":
			return d.entries(&r.Entries)
		case "next_after_key":
			return d.string(&r.NextAfterKey)
		case "watch":
			return d.watchState(&r.Watch)
		case "watch_id":
			return d.string(&r.WatchID)
		case "applied_sequence":
			return d.uint64Ptr(&r.AppliedSequence)
		case "server_id":
			return d.string(&r.ServerID)
		case "version":
			return d.string(&r.Version)
		case "epoch":
			return d.string(&r.Epoch)
		case "features":
			return d.fallback(&r.Features)
		case "bounds":
			return d.boundsPtr(&r.Bounds)
		}
		return d.skip()
	})
}

// DecodeWatchMessage decodes a message of a watch's delivery subject as DecodeResult decodes a reply,
// except that the message shares data's memory: its strings and its entry's document are views of
// data, not copies (a watch message is decoded once, from a buffer of its own, and an entry a cache
// keeps would otherwise hold a copy of most of it). data must not change afterwards. The document's
// capacity ends with it, so appending to it copies.
func DecodeWatchMessage(data []byte, m *WatchMessage) error {
	return decodeTop(data, true, func(d *decoder, name string) error {
		switch name {
		case "watch_id":
			return d.string(&m.WatchID)
		case "watch_sequence":
			return d.uint64(&m.WatchSequence)
		case "revision":
			return d.uint64(&m.Revision)
		case "kind":
			return d.string((*string)(&m.Kind))
		case "key":
			return d.string(&m.Key)
		case "entry":
			return d.entryPtr(&m.Entry)
		case "reason":
			return d.string((*string)(&m.Reason))
		case "message":
			return d.string(&m.Message)
		}
		return d.skip()
	})
}

// decoder reads one JSON text in one pass, for the one-pass decoders of replies, watch messages and
// the frequent requests; pos is the next byte to read. With share, plain strings and documents are
// views of b instead of copies.
type decoder struct {
	b     []byte
	pos   int
	share bool
}

// errSyntax is wrapped by every decoding error that is not a type mismatch.
var errSyntax = errors.New("invalid JSON")

func (d *decoder) syntax() error {
	return fmt.Errorf("%w at offset %d", errSyntax, d.pos)
}

func (d *decoder) space() { d.pos = skipSpace(d.b, d.pos) }

// decodeTop reads data, one JSON object (or null, which sets nothing), calling field for each member
// with the decoder at the member's value; field must read the value, and may compare name but not
// keep it (it is a view of data). With share, the decoded strings and documents are views of data too.
func decodeTop(data []byte, share bool, field func(d *decoder, name string) error) error {
	d := &decoder{b: data, share: share}
	d.space()
	if !d.null() {
		if err := d.object(field); err != nil {
			return err
		}
	}
	d.space()
	if d.pos != len(d.b) {
		return d.syntax()
	}
	return nil
}

// literal consumes w if it is next.
func (d *decoder) literal(w string) bool {
	if len(d.b)-d.pos >= len(w) && string(d.b[d.pos:d.pos+len(w)]) == w {
		d.pos += len(w)
		return true
	}
	return false
}

// null consumes a null literal if one is next.
func (d *decoder) null() bool { return d.literal("null") }

// object reads an object, calling field for each member.
func (d *decoder) object(field func(d *decoder, name string) error) error {
	if empty, err := d.open('{', '}', "object"); empty || err != nil {
		return err
	}
	for {
		d.space()
		if d.pos >= len(d.b) || d.b[d.pos] != '"' {
			return d.syntax()
		}
		name, err := d.name()
		if err != nil {
			return err
		}
		d.space()
		if d.pos >= len(d.b) || d.b[d.pos] != ':' {
			return d.syntax()
		}
		d.pos++
		d.space()
		if err := field(d, name); err != nil {
			return err
		}
		if more, err := d.separator('}'); !more {
			return err
		}
	}
}

// open reads the opening byte of an object or array (a mismatch with want, the type expected, when
// the value is something else) and reports whether the container is empty, its closing byte read.
// The scanner's steps do the reading.
func (d *decoder) open(opening, closing byte, want string) (empty bool, err error) {
	if d.pos >= len(d.b) || d.b[d.pos] != opening {
		return false, d.mismatch(want)
	}
	s := scanner{b: d.b, pos: d.pos}
	empty = s.open(closing)
	d.pos = s.pos
	return empty, nil
}

// separator reads what follows a member or an element: a comma (more follow) or closing.
func (d *decoder) separator(closing byte) (more bool, err error) {
	s := scanner{b: d.b, pos: d.pos}
	done, ok := s.next(closing)
	d.pos = s.pos
	if !ok {
		return false, d.syntax()
	}
	return !done, nil
}

// mismatch is the error for a value of the wrong type (or no value) where a want is expected. Like
// json.Unmarshal, a wrong type is an error; unlike it, decoding stops there.
func (d *decoder) mismatch(want string) error {
	s := scanner{b: d.b, pos: d.pos}
	if !s.value(0) {
		return d.syntax()
	}
	return fmt.Errorf("cannot decode %s at offset %d into %s", d.b[d.pos:s.pos], d.pos, want)
}

// raw reads one value and returns its bytes.
func (d *decoder) raw() ([]byte, error) { return d.rawAt(0) }

// rawAt is raw for a value nested in depth objects or arrays, which count against the scanner's
// nesting bound as encoding/json counts them.
func (d *decoder) rawAt(depth int) ([]byte, error) {
	s := scanner{b: d.b, pos: d.pos}
	if !s.value(depth) {
		return nil, d.syntax()
	}
	v := d.b[d.pos:s.pos]
	d.pos = s.pos
	return v, nil
}

func (d *decoder) skip() error {
	_, err := d.raw()
	return err
}

// fallback decodes one value into v with json.Unmarshal: for the fields that are rare or small and
// hold no member names (json.Unmarshal would match those ignoring case).
func (d *decoder) fallback(v any) error {
	raw, err := d.raw()
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// plain reads a plain ASCII string token (no escapes), the usual case, as a view of the input; false,
// with nothing read, for any other string.
func (d *decoder) plain() (string, bool) {
	end := PlainRun(d.b, d.pos+1)
	if end >= len(d.b) || d.b[end] != '"' {
		return "", false
	}
	var s string
	if n := end - d.pos - 1; n > 0 {
		s = unsafe.String(&d.b[d.pos+1], n)
	}
	d.pos = end + 1
	return s, true
}

// name reads a member name. A plain one is returned as a view of the input, without a copy: the
// field callbacks of object only compare it, and must not keep it.
func (d *decoder) name() (string, error) {
	if s, ok := d.plain(); ok {
		return s, nil
	}
	return d.str()
}

// str reads a string token. A plain one is copied (or with share, kept as a view); one with escapes
// or non-ASCII bytes is decoded by encoding/json, exactly as json.Unmarshal decodes it.
func (d *decoder) str() (string, error) {
	if s, ok := d.plain(); ok {
		if !d.share {
			s = strings.Clone(s)
		}
		return s, nil
	}
	raw, err := d.raw()
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

func (d *decoder) string(v *string) error {
	if d.null() {
		return nil
	}
	if d.pos >= len(d.b) || d.b[d.pos] != '"' {
		return d.mismatch("string")
	}
	s, err := d.str()
	if err != nil {
		return err
	}
	*v = s
	return nil
}

func (d *decoder) bool(v *bool) error {
	switch {
	case d.null():
	case d.literal("true"):
		*v = true
	case d.literal("false"):
		*v = false
	default:
		return d.mismatch("bool")
	}
	return nil
}

// number reads a number token, or reports that the value is not a number.
func (d *decoder) number() ([]byte, bool, error) {
	if d.pos >= len(d.b) || !(d.b[d.pos] == '-' || (d.b[d.pos] >= '0' && d.b[d.pos] <= '9')) {
		return nil, false, nil
	}
	s := scanner{b: d.b, pos: d.pos}
	if !s.num() {
		return nil, false, d.syntax()
	}
	tok := d.b[d.pos:s.pos]
	d.pos = s.pos
	return tok, true, nil
}

// integer reads a number (or null, which sets nothing) and hands its text to parse; want names the
// type for messages.
func (d *decoder) integer(want string, parse func(text string) error) error {
	if d.null() {
		return nil
	}
	tok, ok, err := d.number()
	if err != nil {
		return err
	}
	if !ok {
		return d.mismatch(want)
	}
	if err := parse(unsafe.String(&tok[0], len(tok))); err != nil {
		return fmt.Errorf("cannot decode number %s into %s", tok, want)
	}
	return nil
}

func (d *decoder) uint64(v *uint64) error {
	return d.integer("uint64", func(text string) error {
		n, err := strconv.ParseUint(text, 10, 64)
		if err == nil {
			*v = n
		}
		return err
	})
}

func (d *decoder) int64(v *int64) error {
	return d.integer("int64", func(text string) error {
		n, err := strconv.ParseInt(text, 10, 64)
		if err == nil {
			*v = n
		}
		return err
	})
}

// decodePtr decodes into *v as json.Unmarshal decodes into a pointer: null sets it nil, a value is
// decoded into what it points to, allocated when nil.
func decodePtr[T any](d *decoder, v **T, read func(*T) error) error {
	if d.null() {
		*v = nil
		return nil
	}
	p := *v
	if p == nil {
		p = new(T)
	}
	if err := read(p); err != nil {
		return err
	}
	*v = p
	return nil
}

func (d *decoder) uint64Ptr(v **uint64) error { return decodePtr(d, v, d.uint64) }

func (d *decoder) int64Ptr(v **int64) error { return decodePtr(d, v, d.int64) }

func (d *decoder) entryPtr(v **Entry) error { return decodePtr(d, v, d.entry) }

// document reads a document value into *v: copied, or with share a view of the input whose capacity
// ends with it.
func (d *decoder) document(v *json.RawMessage) error {
	raw, err := d.raw()
	if err != nil {
		return err
	}
	if d.share {
		*v = raw[:len(raw):len(raw)]
		return nil
	}
	*v = append((*v)[:0:0], raw...)
	return nil
}

// entry decodes an Entry object into e. Unless the decoder shares its input, the document is copied:
// an entry kept from a long list must not keep the whole reply alive.
func (d *decoder) entry(e *Entry) error {
	return d.object(func(d *decoder, name string) error {
		switch name {
		case "namespace":
			return d.string(&e.Namespace)
		case "key":
			return d.string(&e.Key)
		case "schema":
			return d.string(&e.Schema)
		case "owner":
			return d.string(&e.Owner)
		case "revision":
			return d.uint64(&e.Revision)
		case "created_at_ms":
			return d.int64(&e.CreatedAtMs)
		case "updated_at_ms":
			return d.int64(&e.UpdatedAtMs)
		case "ttl_ms":
			return d.int64(&e.TTLMs)
		case "expires_at_ms":
			return d.int64(&e.ExpiresAtMs)
		case "document":
			return d.document(&e.Document)
		}
		return d.skip()
	})
}

// entries decodes an array of entries into *v as json.Unmarshal does: elements already in the slice
// are decoded into, and the slice ends at the array's length; null sets it nil.
func (d *decoder) entries(v *[]Entry) error {
	if d.null() {
		*v = nil
		return nil
	}
	empty, err := d.open('[', ']', "[]Entry")
	if err != nil {
		return err
	}
	es := *v
	n := 0
	if empty {
		if es == nil {
			es = []Entry{}
		}
		*v = es[:0]
		return nil
	}
	for {
		d.space()
		if n == len(es) {
			es = append(es, Entry{})
		}
		if !d.null() {
			if err := d.entry(&es[n]); err != nil {
				return err
			}
		}
		n++
		more, err := d.separator(']')
		if err != nil {
			return err
		}
		if !more {
			*v = es[:n]
			return nil
		}
	}
}

// errorPtr decodes the error object of a reply, its names spelled exactly.
func (d *decoder) errorPtr(v **Error) error {
	return decodePtr(d, v, func(e *Error) error {
		return d.object(func(d *decoder, name string) error {
			switch name {
			case "code":
				return d.string((*string)(&e.Code))
			case "message":
				return d.string(&e.Message)
			case "current_revision":
				return d.uint64Ptr(&e.CurrentRevision)
			}
			return d.skip()
		})
	})
}

// boundsPtr decodes the bounds object of an info reply, its names spelled exactly.
func (d *decoder) boundsPtr(v **Bounds) error {
	return decodePtr(d, v, func(b *Bounds) error {
		return d.object(func(d *decoder, name string) error {
			var f *int64
			switch name {
			case "max_document_bytes":
				f = &b.MaxDocumentBytes
			case "max_entries_per_namespace":
				f = &b.MaxEntriesPerNamespace
			case "max_namespaces":
				f = &b.MaxNamespaces
			case "max_total_value_bytes":
				f = &b.MaxTotalValueBytes
			case "max_snapshot_entries":
				f = &b.MaxSnapshotEntries
			case "max_snapshot_bytes":
				f = &b.MaxSnapshotBytes
			case "max_watches":
				f = &b.MaxWatches
			case "max_watches_per_principal":
				f = &b.MaxWatchesPerPrincipal
			case "max_pending_updates":
				f = &b.MaxPendingUpdates
			case "ack_deadline_ms":
				f = &b.AckDeadlineMs
			case "max_workers_per_principal":
				f = &b.MaxWorkersPerPrincipal
			default:
				return d.skip()
			}
			return d.int64(f)
		})
	})
}

func (d *decoder) watchState(v **WatchState) error {
	return decodePtr(d, v, func(w *WatchState) error {
		return d.object(func(d *decoder, name string) error {
			switch name {
			case "watch_id":
				return d.string(&w.WatchID)
			case "namespace":
				return d.string(&w.Namespace)
			case "key_prefix":
				return d.string(&w.KeyPrefix)
			case "snapshot_revision":
				return d.uint64(&w.SnapshotRevision)
			case "entries":
				return d.entries(&w.Entries)
			}
			return d.skip()
		})
	})
}

// decodePut is Decode's reading of a put request, the largest and most frequent one, after
// checkFieldNames has accepted its names: as json.Decoder with DisallowUnknownFields reads it, in one
// pass.
func decodePut(data []byte, r *PutRequest) error {
	return decodeTop(data, false, func(d *decoder, name string) error {
		switch name {
		case "request_id":
			return d.int64(&r.RequestID)
		case "namespace":
			return d.string(&r.Namespace)
		case "key":
			return d.string(&r.Key)
		case "schema":
			return d.string(&r.Schema)
		case "document":
			// Not copied: whoever takes the document keeps its own compact copy (ValidateCompact),
			// and a second copy here would leave a kept document among freed ones of its size. It
			// is nested in the request, as encoding/json counts its depth.
			raw, err := d.rawAt(1)
			r.Document = raw
			return err
		case "expected_revision":
			return d.int64Ptr(&r.ExpectedRevision)
		case "ttl_ms":
			return d.int64Ptr(&r.TTLMs)
		case "guard":
			raw, err := d.rawAt(1)
			if err != nil {
				return err
			}
			return strictJSON(raw, &r.Guard)
		}
		return fmt.Errorf("unknown field %q", name)
	})
}

// decodeAck is Decode's reading of an ack request, as decodePut.
func decodeAck(data []byte, r *AckRequest) error {
	return decodeTop(data, false, func(d *decoder, name string) error {
		switch name {
		case "request_id":
			return d.int64(&r.RequestID)
		case "watch_id":
			return d.string(&r.WatchID)
		case "applied_sequence":
			return d.int64Ptr(&r.AppliedSequence)
		}
		return fmt.Errorf("unknown field %q", name)
	})
}
