package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// AppendEntry appends e's JSON encoding, as json.Marshal gives it field for field, without
// re-validating the document: Document must already be compact JSON (the store keeps it so), and is
// copied as stored (json.Marshal would also HTML-escape <, > and & inside it: the same JSON value). The
// store encodes each committed entry once with it, for the database, the watch updates and the
// snapshot bounds.
func AppendEntry(b []byte, e *Entry) []byte {
	b = append(b, `{"namespace":`...)
	b = AppendString(b, e.Namespace)
	b = append(b, `,"key":`...)
	b = AppendString(b, e.Key)
	b = append(b, `,"schema":`...)
	b = AppendString(b, e.Schema)
	b = append(b, `,"owner":`...)
	b = AppendString(b, e.Owner)
	b = append(b, `,"revision":`...)
	b = strconv.AppendUint(b, e.Revision, 10)
	b = append(b, `,"created_at_ms":`...)
	b = strconv.AppendInt(b, e.CreatedAtMs, 10)
	b = append(b, `,"updated_at_ms":`...)
	b = strconv.AppendInt(b, e.UpdatedAtMs, 10)
	if e.TTLMs != 0 {
		b = append(b, `,"ttl_ms":`...)
		b = strconv.AppendInt(b, e.TTLMs, 10)
	}
	if e.ExpiresAtMs != 0 {
		b = append(b, `,"expires_at_ms":`...)
		b = strconv.AppendInt(b, e.ExpiresAtMs, 10)
	}
	b = append(b, `,"document":`...)
	if len(e.Document) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Document...)
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as encoding/json escapes it (HTML-safe, invalid
// UTF-8 replaced by U+FFFD).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendResult appends r's JSON encoding, as json.Marshal gives it, encoding entries with AppendEntry
// (their documents must already be compact JSON, as the store keeps them).
func AppendResult(b []byte, r *Result) []byte {
	b = append(b, `{"request_id":`...)
	b = strconv.AppendInt(b, r.RequestID, 10)
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, r.OK)
	if r.Error != nil {
		b = append(b, `,"error":`...)
		b = appendMarshal(b, r.Error)
	}
	if r.Entry != nil {
		b = append(b, `,"entry":`...)
		b = AppendEntry(b, r.Entry)
	}
	if r.Revision != nil {
		b = append(b, `,"revision":`...)
		b = strconv.AppendUint(b, *r.Revision, 10)
	}
	if r.Entries != nil {
		b = append(b, `,"entries":`...)
		b = appendEntries(b, r.Entries)
	}
	if r.NextAfterKey != "" {
		b = append(b, `,"next_after_key":`...)
		b = AppendString(b, r.NextAfterKey)
	}
	if w := r.Watch; w != nil {
		b = append(b, `,"watch":{"watch_id":`...)
		b = AppendString(b, w.WatchID)
		b = append(b, `,"namespace":`...)
		b = AppendString(b, w.Namespace)
		b = append(b, `,"key_prefix":`...)
		b = AppendString(b, w.KeyPrefix)
		b = append(b, `,"snapshot_revision":`...)
		b = strconv.AppendUint(b, w.SnapshotRevision, 10)
		b = append(b, `,"entries":`...)
		b = appendEntries(b, w.Entries)
		b = append(b, '}')
	}
	if r.WatchID != "" {
		b = append(b, `,"watch_id":`...)
		b = AppendString(b, r.WatchID)
	}
	if r.AppliedSequence != nil {
		b = append(b, `,"applied_sequence":`...)
		b = strconv.AppendUint(b, *r.AppliedSequence, 10)
	}
	for _, f := range []struct{ name, v string }{{"server_id", r.ServerID}, {"version", r.Version}, {"epoch", r.Epoch}} {
		if f.v != "" {
			b = append(b, `,"`...)
			b = append(b, f.name...)
			b = append(b, `":`...)
			b = AppendString(b, f.v)
		}
	}
	if r.Features != nil {
		b = append(b, `,"features":`...)
		b = appendMarshal(b, r.Features)
	}
	if r.Bounds != nil {
		b = append(b, `,"bounds":`...)
		b = appendMarshal(b, r.Bounds)
	}
	return append(b, '}')
}

func appendEntries(b []byte, es []Entry) []byte {
	if es == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendEntry(b, &es[i])
	}
	return append(b, ']')
}

// EncodeRequest returns req's JSON encoding, as json.Marshal gives it. A put and an ack, the frequent
// requests, are encoded by hand: the put's document is checked and copied in one pass (compacted
// when it is not compact) and, unlike json.Marshal, not HTML-escaped (the same JSON value).
func EncodeRequest(req any) ([]byte, error) {
	switch r := req.(type) {
	case *PutRequest:
		return appendPutRequest(make([]byte, 0, len(r.Document)+256), r)
	case *AckRequest:
		b := append(make([]byte, 0, 96), `{"request_id":`...)
		b = strconv.AppendInt(b, r.RequestID, 10)
		b = append(b, `,"watch_id":`...)
		b = AppendString(b, r.WatchID)
		b = append(b, `,"applied_sequence":`...)
		if r.AppliedSequence == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, *r.AppliedSequence, 10)
		}
		return append(b, '}'), nil
	}
	return json.Marshal(req)
}

func appendPutRequest(b []byte, r *PutRequest) ([]byte, error) {
	b = append(b, `{"request_id":`...)
	b = strconv.AppendInt(b, r.RequestID, 10)
	b = append(b, `,"namespace":`...)
	b = AppendString(b, r.Namespace)
	b = append(b, `,"key":`...)
	b = AppendString(b, r.Key)
	b = append(b, `,"schema":`...)
	b = AppendString(b, r.Schema)
	b = append(b, `,"document":`...)
	switch valid, compact := scanJSON(r.Document); {
	case r.Document == nil:
		b = append(b, "null"...)
	case !valid:
		return nil, fmt.Errorf("document is not valid JSON")
	case compact:
		b = append(b, r.Document...)
	default:
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, r.Document); err != nil {
			return nil, err
		}
		b = buf.Bytes()
	}
	if r.ExpectedRevision != nil {
		b = append(b, `,"expected_revision":`...)
		b = strconv.AppendInt(b, *r.ExpectedRevision, 10)
	}
	if r.TTLMs != nil {
		b = append(b, `,"ttl_ms":`...)
		b = strconv.AppendInt(b, *r.TTLMs, 10)
	}
	if g := r.Guard; g != nil {
		b = append(b, `,"guard":{"key":`...)
		b = AppendString(b, g.Key)
		b = append(b, `,"revision":`...)
		b = strconv.AppendInt(b, g.Revision, 10)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

func appendMarshal(b []byte, v any) []byte {
	j, _ := json.Marshal(v) // error objects, string lists and bounds always encode
	return append(b, j...)
}
