package wire

import (
	"strconv"
	"unicode/utf8"
)

// AppendEntry appends e's JSON encoding, as json.Marshal gives it field for field, without
// re-validating the document: Document must already be compact JSON (the store keeps it so). The
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
