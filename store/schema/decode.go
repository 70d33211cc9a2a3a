package schema

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keeppeek/coordination/store/wire"
)

// maxDepth bounds the nesting of a document, as encoding/json bounds its own decoding.
const maxDepth = 10000

// decode parses exactly one JSON value into map[string]any, []any, string, json.Number, bool or nil.
// Unlike json.Unmarshal it rejects duplicate property names: the store keeps the bytes it was given, so
// a value hidden behind a later duplicate would escape both the schema and the guard. It is a single
// pass over the bytes (the store validates every write, so this is on the hot path).
func decode(data []byte) (any, error) {
	p := &parser{data: data}
	p.skipSpace()
	v, err := p.value(nil)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "document is not one JSON value: unexpected data after it")
	}
	return v, nil
}

type parser struct {
	data []byte
	pos  int
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

// value reads the value at pos; path locates it for messages.
func (p *parser) value(path []string) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.syntax("value expected")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(path)
	case c == '[':
		return p.array(path)
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

func (p *parser) object(path []string) (any, error) {
	if len(path) >= maxDepth {
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
			return nil, wire.Errorf(wire.CodeSchemaInvalid, "duplicate property %s %s", quoteName(name), location(path))
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.syntax("':' expected")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(append(path, name))
		if err != nil {
			return nil, err
		}
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

func (p *parser) array(path []string) (any, error) {
	if len(path) >= maxDepth {
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
		v, err := p.value(append(path, strconv.Itoa(len(arr))))
		if err != nil {
			return nil, err
		}
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

// str reads a string. Plain strings (no escapes, valid UTF-8) are sliced directly; others are decoded
// by encoding/json, so escapes and invalid UTF-8 are treated exactly as json.Unmarshal treats them.
func (p *parser) str() (string, error) {
	start := p.pos
	p.pos++ // opening quote
	plain := true
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			raw := p.data[start:p.pos]
			if plain && utf8.Valid(raw) {
				return string(raw[1 : len(raw)-1]), nil
			}
			var out string
			if err := json.Unmarshal(raw, &out); err != nil {
				return "", wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: %v", err)
			}
			return out, nil
		case c == '\\':
			plain = false
			p.pos += 2
		case c < 0x20:
			return "", p.syntax("control character in string")
		default:
			p.pos++
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
	return json.Number(p.data[start:p.pos]), nil
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
		tok = strings.ReplaceAll(tok, "~", "~0")
		tok = strings.ReplaceAll(tok, "/", "~1")
		sb.WriteString(truncate(tok, maxTokenBytes))
	}
	return "at " + strconv.Quote(sb.String())
}

// quoteName quotes a property name for a message, shortened when long.
func quoteName(name string) string { return strconv.Quote(truncate(name, maxTokenBytes)) }

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
