package wire

import "encoding/binary"

// scanJSON validates that b is exactly one JSON value (RFC 8259 grammar, like json.Valid) without
// allocating, and reports whether it is already compact: no whitespace outside strings.
func scanJSON(b []byte) (valid, compact bool) {
	s := scanner{b: b, compact: true}
	s.space()
	if !s.value(0) {
		return false, false
	}
	s.space()
	return s.pos == len(b), s.compact
}

type scanner struct {
	b       []byte
	pos     int
	compact bool
}

// maxScanDepth bounds nesting as encoding/json bounds its own: at most this many objects and arrays
// nested in one another (json.Valid refuses one more).
const maxScanDepth = 10000

func (s *scanner) space() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\r', '\n':
			s.pos++
			s.compact = false
		default:
			return
		}
	}
}

// value reads one value whose containers, if it is one, are nested in depth others.
func (s *scanner) value(depth int) bool {
	if s.pos >= len(s.b) {
		return false
	}
	switch c := s.b[s.pos]; {
	case (c == '{' || c == '[') && depth >= maxScanDepth:
		return false // one container too many, empty or not
	case c == '{':
		if s.open('}') {
			return true
		}
		for {
			s.space()
			if s.pos >= len(s.b) || s.b[s.pos] != '"' || !s.str() {
				return false
			}
			s.space()
			if s.pos >= len(s.b) || s.b[s.pos] != ':' {
				return false
			}
			s.pos++
			s.space()
			if !s.value(depth + 1) {
				return false
			}
			if done, ok := s.next('}'); done || !ok {
				return ok
			}
		}
	case c == '[':
		if s.open(']') {
			return true
		}
		for {
			s.space()
			if !s.value(depth + 1) {
				return false
			}
			if done, ok := s.next(']'); done || !ok {
				return ok
			}
		}
	case c == '"':
		return s.str()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.num()
	}
	return false
}

// open consumes a container's opening byte and reports whether the container ends at once (end).
func (s *scanner) open(end byte) bool {
	s.pos++
	s.space()
	if s.pos < len(s.b) && s.b[s.pos] == end {
		s.pos++
		return true
	}
	return false
}

// next consumes what follows an element of a container: its end (done) or a comma; ok is false for
// anything else.
func (s *scanner) next(end byte) (done, ok bool) {
	s.space()
	if s.pos >= len(s.b) {
		return false, false
	}
	switch s.b[s.pos] {
	case end:
		s.pos++
		return true, true
	case ',':
		s.pos++
		return false, true
	}
	return false, false
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.pos < len(w) || string(s.b[s.pos:s.pos+len(w)]) != w {
		return false
	}
	s.pos += len(w)
	return true
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// str validates a string: escapes as JSON allows them, no control characters. Invalid UTF-8 is
// accepted, as json.Valid accepts it.
func (s *scanner) str() bool {
	s.pos++ // opening quote
	for s.pos < len(s.b) {
		s.pos = PlainRun(s.b, s.pos)
		if s.pos >= len(s.b) {
			return false
		}
		c := s.b[s.pos]
		switch {
		case c == '"':
			s.pos++
			return true
		case c == '\\':
			if s.pos+1 >= len(s.b) {
				return false
			}
			switch s.b[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.b) || !isHex(s.b[s.pos+2]) || !isHex(s.b[s.pos+3]) || !isHex(s.b[s.pos+4]) || !isHex(s.b[s.pos+5]) {
					return false
				}
				s.pos += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			s.pos++
		}
	}
	return false
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

func (s *scanner) num() bool {
	if s.b[s.pos] == '-' {
		s.pos++
	}
	if s.pos < len(s.b) && s.b[s.pos] == '0' {
		s.pos++
	} else if s.digits() == 0 {
		return false
	}
	if s.pos < len(s.b) && s.b[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return false
		}
	}
	if s.pos < len(s.b) && (s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.b) && (s.b[s.pos] == '+' || s.b[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// Word-at-a-time byte tests (each true byte of x sets the high bit of its byte in the result).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainASCII8 reports whether the eight bytes of x are all plain ASCII string bytes: none below 0x20,
// none a quote or a backslash, none 0x80 or above. (The "has a zero byte" test: (v-ones)&^v&highs is
// non-zero exactly when some byte of v is zero.)
func plainASCII8(x uint64) bool {
	below := (x - ones*0x20) &^ x // some byte < 0x20, given none >= 0x80
	quote := x ^ ones*'"'         // zero where a byte is '"'
	bslash := x ^ ones*'\\'       // zero where a byte is '\\'
	return (x|below|((quote-ones)&^quote)|((bslash-ones)&^bslash))&highs == 0
}

// PlainRun returns the index of the first byte of b at or after pos that is not a plain ASCII byte of
// a JSON string (a quote, a backslash, a control character or a byte of 0x80 or above), or len(b). It
// tests eight bytes at a time: the text of documents is mostly such runs.
func PlainRun(b []byte, pos int) int {
	for pos+8 <= len(b) && plainASCII8(binary.LittleEndian.Uint64(b[pos:])) {
		pos += 8
	}
	for pos < len(b) {
		if c := b[pos]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return pos
		}
		pos++
	}
	return pos
}
