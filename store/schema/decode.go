package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keeppeek/coordination/store/wire"
)

// maxDepth bounds the nesting of a document, as encoding/json bounds its own decoding.
const maxDepth = 10000

// decode parses exactly one JSON value into map[string]any, []any, string, json.Number, bool or nil.
// Unlike json.Unmarshal it rejects duplicate property names: the store keeps the bytes it was given, so
// a value hidden behind a later duplicate would escape both the schema and the guard.
func decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, nil)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "document is not one JSON value: unexpected data after it")
	}
	return v, nil
}

// readValue reads the value that starts with the decoder's next token. path locates it.
func readValue(dec *json.Decoder, path []string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if len(path) >= maxDepth {
			return nil, wire.Errorf(wire.CodeSchemaInvalid, "document nests deeper than %d levels", maxDepth)
		}
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				ktok, err := dec.Token()
				if err != nil {
					return nil, syntaxError(err)
				}
				name, ok := ktok.(string)
				if !ok { // unreachable: the decoder only yields strings as property names
					return nil, wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: property name expected %s", location(path))
				}
				if _, dup := obj[name]; dup {
					return nil, wire.Errorf(wire.CodeSchemaInvalid, "duplicate property %s %s", quoteName(name), location(path))
				}
				v, err := readValue(dec, append(path, name))
				if err != nil {
					return nil, err
				}
				obj[name] = v
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, syntaxError(err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := readValue(dec, append(path, strconv.Itoa(len(arr))))
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, syntaxError(err)
			}
			return arr, nil
		}
		return nil, wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: unexpected %q %s", rune(t), location(path))
	default:
		return tok, nil
	}
}

func syntaxError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: unexpected end of input")
	}
	return wire.Errorf(wire.CodeSchemaInvalid, "document is not valid JSON: %v", err)
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
