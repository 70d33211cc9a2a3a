package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/keeppeek/coordination/store/wire"
)

// mismatch turns a JSON Schema validation error into a SCHEMA_INVALID error listing the first few
// mismatches, each with its path.
func mismatch(id string, err error) error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return wire.Errorf(wire.CodeSchemaInvalid, "document does not match %s", id)
	}
	var msgs []string
	collect(ve, &msgs)
	slices.Sort(msgs)
	msgs = slices.Compact(msgs)
	if len(msgs) == 0 {
		msgs = []string{"validation failed"}
	}
	more := ""
	if len(msgs) > maxReported {
		more = fmt.Sprintf("; and %d more", len(msgs)-maxReported)
		msgs = msgs[:maxReported]
	}
	msg := fmt.Sprintf("document does not match %s: %s%s", id, strings.Join(msgs, "; "), more)
	return wire.Errorf(wire.CodeSchemaInvalid, "%s", truncate(msg, maxErrorMessageBytes))
}

// collect appends a message for each leaf mismatch under ve.
func collect(ve *jsonschema.ValidationError, msgs *[]string) {
	if _, ok := ve.ErrorKind.(*kind.PropertyNames); !ok && len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collect(c, msgs)
		}
		return
	}
	loc := ve.InstanceLocation
	if _, ok := ve.ErrorKind.(*kind.PropertyNames); ok {
		// jsonschema v6.0.3 shares (and later overwrites) the instance location of a propertyNames
		// error; the schema location of the propertyNames keyword gives the object's path instead.
		loc = instancePath(ve.SchemaURL)
	}
	*msgs = append(*msgs, location(loc)+": "+describe(ve))
}

// instancePath derives the instance path of a keyword from its schema location: the property names
// that follow each "properties" token of the fragment ("urn:x#/properties/parameters/propertyNames"
// gives ["parameters"]). It serves schemas that nest plain "properties" only, as ours do.
func instancePath(schemaURL string) []string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	toks := strings.Split(strings.TrimPrefix(frag, "/"), "/")
	var path []string
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == "properties" {
			tok := strings.ReplaceAll(strings.ReplaceAll(toks[i+1], "~1", "/"), "~0", "~")
			path = append(path, tok)
			i++
		}
	}
	return path
}

// describe says, without repeating a rejected string value, what the leaf mismatch ve is.
func describe(ve *jsonschema.ValidationError) string {
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		if strings.HasSuffix(ve.SchemaURL, "#/then") && len(k.Missing) == 1 && k.Missing[0] == "recording_mode" {
			return `missing property "recording_mode", required when role is "publish"`
		}
		if len(k.Missing) == 1 {
			return "missing required property " + quoteName(k.Missing[0])
		}
		return "missing required properties " + quoteNames(k.Missing)
	case *kind.AdditionalProperties:
		if len(k.Properties) == 1 {
			return "property " + quoteName(k.Properties[0]) + " is not allowed"
		}
		return "properties " + quoteNames(k.Properties) + " are not allowed"
	case *kind.Type:
		return fmt.Sprintf("wrong type: got %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return "value must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "value must be " + display(k.Want)
	case *kind.Pattern:
		return "value does not match the pattern " + strconv.Quote(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("value has %d characters, at least %d are required", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("value has %d characters, at most %d are allowed", k.Got, k.Want)
	case *kind.Minimum:
		return fmt.Sprintf("value %sis less than the minimum %s", shortValue(k.Got), k.Want.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("value %sis greater than the maximum %s", shortValue(k.Got), k.Want.RatString())
	case *kind.Not:
		// The schemas use "not" only to exclude the dot segments of identifiers and keys.
		return `"." and ".." are not allowed as an identifier or a key segment`
	case *kind.PropertyNames:
		return "property name " + quoteName(k.Property) + " is not a valid service id (pattern \"^[a-z0-9][a-z0-9_-]{0,62}$\")"
	case *kind.FalseSchema:
		return "value is not allowed"
	default:
		if kw := ve.ErrorKind.KeywordPath(); len(kw) > 0 {
			return "value fails " + strconv.Quote(strings.Join(kw, "/"))
		}
		return "value is not valid"
	}
}

// shortValue renders a number of a document for a message, followed by a space, when it is short; ""
// otherwise (a number of hundreds of digits says nothing a reader needs, and the schema check sees a
// stand-in for the extreme ones: see standIn).
func shortValue(r *big.Rat) string {
	if r.Num().BitLen() > 64 || r.Denom().BitLen() > 64 {
		return ""
	}
	return r.RatString() + " "
}

// quoteNames quotes property names for a message, joined by ", ".
func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quoteName(n)
	}
	return strings.Join(q, ", ")
}

// display renders an enum or const value of a schema (never of a document) for a message.
func display(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// jsonType names the JSON type of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	default:
		return "null"
	}
}
