package schema

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/keeppeek/coordination/store/wire"
)

// maxDepth bounds the nesting of a document, as encoding/json bounds its own decoding.
const maxDepth = 10000

// decode parses exactly one JSON value into map[string]any, []any, string, json.Number, bool or nil.
// Unlike json.Unmarshal it rejects duplicate property names: the store keeps the bytes it was given, so
// a value hidden behind a later duplicate would escape both the schema and the guard. It is a single
// pass over the bytes (the store validates every write, so this is on the hot path). The strings of the
// result (plain ones: no escapes) share data's memory, so data must not change while the result is in
// use; callers use the result only to check data, and messages copy what they quote.
func decode(data []byte) (any, error) {
	return decodeWith(data, false)
}

// decodeForSchema is decode for the JSON Schema check: a number whose exact value would be costly to
// compute (see standIn) is replaced by a short one that the schemas judge alike.
func decodeForSchema(data []byte) (any, error) {
	return decodeWith(data, true)
}

func decodeWith(data []byte, standIns bool) (any, error) {
	p := &parser{data: data, standIns: standIns}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "document is not one JSON value: unexpected data after it")
	}
	return v, nil
}

// parser is the state of one decode. path is the stack of property names and array indexes leading to
// the value being read, kept only for messages: it is pushed and popped, never copied, so reading a
// document allocates nothing for it.
type parser struct {
	data     []byte
	pos      int
	path     []pathStep
	standIns bool // numbers costly to judge exactly are replaced (decodeForSchema)
}

// pathStep is one step of a parser path: a property name, or an array index when name is "" and
// index >= 0.
type pathStep struct {
	name  string
	index int
}

// location renders the parser's current path for a message.
func (p *parser) location() string {
	path := make([]string, len(p.path))
	for i, st := range p.path {
		if st.index >= 0 {
			path[i] = strconv.Itoa(st.index)
		} else {
			path[i] = st.name
		}
	}
	return location(path)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\r', '\n':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) syntax(format string, args ...any) error {
	if p.pos >= len(p.data) {
		return wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: unexpected end of input")
	}
	return wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: "+format+" at offset %d", append(args, p.pos)...)
}

// value reads the value at pos.
func (p *parser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.syntax("value expected")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.syntax("unexpected character %q", rune(c))
	}
}

func (p *parser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.syntax("invalid literal")
	}
	p.pos += len(word)
	return nil
}

func (p *parser) object() (any, error) {
	if len(p.path) >= maxDepth {
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "document nests deeper than %d levels", maxDepth)
	}
	p.pos++ // {
	obj := map[string]any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.syntax("property name expected")
		}
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[name]; dup {
			return nil, wire.Errorf(wire.CodeSchemaInvalid, "duplicate property %s %s", quoteName(name), p.location())
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.syntax("':' expected")
		}
		p.pos++
		p.skipSpace()
		p.path = append(p.path, pathStep{name: name, index: -1})
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		obj[name] = v
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.syntax("'}' expected")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return obj, nil
		default:
			return nil, p.syntax("',' or '}' expected")
		}
	}
}

func (p *parser) array() (any, error) {
	if len(p.path) >= maxDepth {
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "document nests deeper than %d levels", maxDepth)
	}
	p.pos++ // [
	arr := []any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return arr, nil
	}
	for {
		p.skipSpace()
		p.path = append(p.path, pathStep{index: len(arr)})
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		arr = append(arr, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.syntax("']' expected")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return arr, nil
		default:
			return nil, p.syntax("',' or ']' expected")
		}
	}
}

// plainByte[c] is true for the bytes a string holds as they are: not the quote, not the backslash, not
// a control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string. Plain strings (no escapes, valid UTF-8) are sliced directly; others are decoded
// by encoding/json, so escapes and invalid UTF-8 are treated exactly as json.Unmarshal treats them.
func (p *parser) str() (string, error) {
	start := p.pos
	p.pos++ // opening quote
	plain := true
	var high byte // OR of the bytes: only a string with a byte >= 0x80 needs a UTF-8 check
	for p.pos < len(p.data) {
		p.pos = wire.PlainRun(p.data, p.pos)
		if p.pos >= len(p.data) {
			break
		}
		c := p.data[p.pos]
		if plainByte[c] {
			high |= c
			p.pos++
			continue
		}
		switch {
		case c == '"':
			p.pos++
			raw := p.data[start:p.pos]
			if plain && (high < utf8.RuneSelf || utf8.Valid(raw)) {
				if len(raw) == 2 {
					return "", nil
				}
				// The string shares data's memory (see decode): no copy of the document's text.
				return unsafe.String(&raw[1], len(raw)-2), nil
			}
			var out string
			if err := json.Unmarshal(raw, &out); err != nil {
				return "", wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: %v", err)
			}
			return out, nil
		case c == '\\':
			plain = false
			p.pos += 2
		default:
			return "", p.syntax("control character in string")
		}
	}
	return "", p.syntax("unterminated string")
}

// number reads a JSON number (the grammar exactly) as a json.Number.
func (p *parser) number() (any, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.syntax("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.syntax("invalid number")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.syntax("invalid number")
		}
	}
	num := unsafe.String(&p.data[start], p.pos-start)
	if p.standIns {
		if s, ok := standIn(num); ok {
			return json.Number(s), nil
		}
	}
	return json.Number(num), nil
}

// numberDigits bounds the numbers the JSON Schema check sees exactly: at most this many bytes, and an
// exponent of at most this many in magnitude.
const numberDigits = 400

// standIn returns, for a JSON number num whose exact value is costly to compute, a short number that
// every check of the registered schemas judges as it judges num, and true; for any other number, false.
//
// The JSON Schema library judges "integer", "minimum" and "maximum" on exact rationals: 1e1000000, a
// nine-byte number, becomes a million-digit integer, and its message a million-digit string, megabytes
// and a third of a second of CPU for a put of a few dozen bytes. The stand-in keeps what those checks can
// see: the sign, whether the value is an integer, and its order against every integer under 10^400 in
// magnitude (the schemas' bounds are integers of at most 2^53). It is the value itself when that fits
// in 400 digits either side of the point; a value of 10^400 or more becomes 1e401 (or 1e401 + 0.5 if
// it has a fraction); one with a longer fraction becomes its integer part and a half. The schemas
// compare no number by enum, const or multipleOf, which would need the exact value.
func standIn(num string) (string, bool) {
	mant, expText := num, ""
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		mant, expText = num[:i], num[i+1:]
	}
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	expNeg := strings.HasPrefix(expText, "-")
	expText = strings.TrimLeft(expText, "+-")
	expText = strings.TrimLeft(expText, "0")
	costly := len(num) > numberDigits || len(expText) > 3
	if !costly && len(expText) == 3 {
		e, _ := strconv.Atoi(expText)
		costly = e > numberDigits
	}
	if !costly {
		return "", false
	}
	exp := int64(0)
	if len(expText) > 12 { // beyond any position a document's digits can reach: saturate
		exp = 1e12
	} else if expText != "" {
		exp, _ = strconv.ParseInt(expText, 10, 64)
	}
	if expNeg {
		exp = -exp
	}
	intPart, fracPart, _ := strings.Cut(mant, ".")
	// The value is 0.digits × 10^point: point is where the decimal point falls among the digits.
	digits := intPart + fracPart
	point := int64(len(intPart)) + exp
	lead := len(digits) - len(strings.TrimLeft(digits, "0"))
	digits, point = strings.TrimRight(digits[lead:], "0"), point-int64(lead)
	if digits == "" {
		return "0", true
	}
	sign := ""
	if neg {
		sign = "-"
	}
	isInt := point >= int64(len(digits))
	switch {
	case point > numberDigits:
		if isInt {
			return sign + "1e" + strconv.Itoa(numberDigits+1), true
		}
		return sign + "1" + strings.Repeat("0", numberDigits+1) + ".5", true
	case point < -numberDigits:
		return sign + "0.5", true
	}
	whole := "0"
	switch {
	case isInt:
		whole = digits + strings.Repeat("0", int(point)-len(digits))
	case point > 0:
		whole = digits[:point]
	}
	if isInt {
		return sign + whole, true
	}
	frac := digits
	if point > 0 {
		frac = digits[point:]
	} else {
		frac = strings.Repeat("0", int(-point)) + digits
	}
	if len(frac) > numberDigits {
		frac = "5"
	}
	return sign + whole + "." + frac, true
}

// maxTokenBytes bounds how much of a property name a message repeats.
const maxTokenBytes = 64

// location renders an instance path for a message: "at the top level" or `at "/a/b"` (a JSON pointer).
func location(path []string) string {
	if len(path) == 0 {
		return "at the top level"
	}
	var sb strings.Builder
	for _, tok := range path {
		sb.WriteByte('/')
		if forbiddenString(tok) != "" {
			sb.WriteString(withheldName) // not repeated: see quoteName
			continue
		}
		tok = strings.ReplaceAll(tok, "~", "~0")
		tok = strings.ReplaceAll(tok, "/", "~1")
		sb.WriteString(truncate(tok, maxTokenBytes))
	}
	return "at " + strconv.Quote(sb.String())
}

// withheldName stands in a message for a property name the content guard refuses as a string.
const withheldName = "(withheld name)"

// quoteName quotes a property name for a message, shortened when long. A name the content guard
// refuses as a string (a PEM block, a data URI, an encoded blob, an SDP, a log) is not repeated, not
// even in part, whichever check reports it first (an unknown property, a parameters key that is not a
// service id, a duplicate): messages never echo content the store refuses to hold, and the schema
// check and the decoder run before the guard would have withheld it.
func quoteName(name string) string {
	if why := forbiddenString(name); why != "" {
		return "(a name that " + why + ")"
	}
	return strconv.Quote(truncate(name, maxTokenBytes))
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
