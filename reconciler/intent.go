package reconciler

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/store/wire"
)

// Schema ids of the documents this package reads and writes (SPEC section 13).
const (
	MediaIntentSchema    = wire.SchemaMediaIntent
	ObservedStatusSchema = wire.SchemaObservedStatus
)

// Roles of a media intent.
const (
	RolePublish   = wire.RolePublish
	RoleSubscribe = wire.RoleSubscribe
)

// MaxStatusMessageBytes bounds ObservedStatus.Message (SPEC section 13).
const MaxStatusMessageBytes = wire.MaxStatusMessageBytes

// maxPriority bounds MediaIntent.Priority (SPEC section 13).
const maxPriority = 1000

// MediaIntent is a keeppeek.media-intent.v1 document (wire.MediaIntent, with the worker's checks):
// a desired publication or subscription of one media source, named by its stable source_id (never a
// transient session). It is an intent, not a binding: only the capabilities and the command results
// say whether it exists. Decode one with DecodeMediaIntent rather than json.Unmarshal, which refuses
// a priority spelled 5.0 or 5e0 that the store takes.
type MediaIntent wire.MediaIntent

// ValidationError says why a media intent cannot be acted on: a worker validation failure. The worker
// reports it in its observed status (InvalidStatus) and sends no command for the intent: above all, a
// publish intent without a valid recording_mode never becomes a StartPublication.
type ValidationError struct {
	// Field is the offending JSON field ("recording_mode", "source_id", ...), or "schema" or
	// "document" when the entry is not a media intent at all.
	Field string
	// Message says what is wrong with it.
	Message string
}

// Error returns "media intent: <field>: <message>".
func (e *ValidationError) Error() string {
	return "media intent: " + e.Field + ": " + e.Message
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// DecodeMediaIntent decodes the document of e, which must carry the schema keeppeek.media-intent.v1.
// Every error it returns is a *ValidationError: another schema (Field "schema"), a document that is
// not a JSON object (Field "document"), a field of the wrong type, or a missing "desired". It does
// not check the values: call Validate before acting on the intent.
func DecodeMediaIntent(e wire.Entry) (MediaIntent, error) {
	if e.Schema != MediaIntentSchema {
		return MediaIntent{}, invalid("schema", "is %q, want %q", e.Schema, MediaIntentSchema)
	}
	var doc struct {
		MediaIntent
		Desired  *bool           `json:"desired"`
		Priority json.RawMessage `json:"priority"` // an integer may be written 5.0 or 5e0: see wire.Integer
	}
	if err := json.Unmarshal(e.Document, &doc); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field := strings.TrimPrefix(te.Field, "MediaIntent.") // the path names the embedded struct
			return MediaIntent{}, invalid(field, "is a JSON %s, want %s", te.Value, jsonType(te.Type.String()))
		}
		return MediaIntent{}, invalid("document", "not a JSON object: %v", err)
	}
	if doc.Desired == nil {
		return MediaIntent{}, invalid("desired", "missing")
	}
	mi := doc.MediaIntent
	mi.Desired = *doc.Desired
	if len(doc.Priority) > 0 && string(doc.Priority) != "null" {
		n, ok := wire.Integer(doc.Priority)
		if !ok {
			return MediaIntent{}, invalid("priority", "is a JSON %s %s, want integer", rawType(doc.Priority), doc.Priority)
		}
		p := int(n)
		mi.Priority = &p
	}
	if err := checkParameters(mi.Parameters); err != nil {
		return MediaIntent{}, err
	}
	return mi, nil
}

// checkParameters requires every parameters entry to be a JSON object.
func checkParameters(ps map[string]json.RawMessage) *ValidationError {
	for service, params := range ps {
		if len(params) == 0 || params[0] != '{' {
			return invalid("parameters", "the entry of %q is a JSON %s, want object", service, rawType(params))
		}
	}
	return nil
}

// rawType names the JSON type of a raw value.
func rawType(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonType names the JSON type a Go type decodes from.
func jsonType(goType string) string {
	switch {
	case goType == "string":
		return "string"
	case goType == "bool":
		return "boolean"
	case goType == "int":
		return "integer"
	case strings.HasPrefix(goType, "map["):
		return "object"
	}
	return goType
}

// Validate checks the intent as a worker must before acting on it (SPEC section 13): role publish or
// subscribe, a source_id and optional stream_id, variant_id and output_profile following the
// identifier rule, media_kind video or audio, priority 0 to 1000, and a recording_mode of inherit,
// disabled or required, which a publish intent must have. The first violation is returned as a
// *ValidationError.
func (m MediaIntent) Validate() error {
	switch m.Role {
	case RolePublish, RoleSubscribe:
	case "":
		return invalid("role", "missing")
	default:
		return invalid("role", "%q is neither %q nor %q", m.Role, RolePublish, RoleSubscribe)
	}
	if m.SourceID == "" {
		return invalid("source_id", "missing")
	}
	if err := checkIdentifier("source_id", m.SourceID); err != nil {
		return err
	}
	switch m.MediaKind {
	case capabilities.MediaKindVideo, capabilities.MediaKindAudio:
	case "":
		return invalid("media_kind", "missing")
	default:
		return invalid("media_kind", "%q is neither %q nor %q", m.MediaKind, capabilities.MediaKindVideo, capabilities.MediaKindAudio)
	}
	for _, f := range []struct{ name, v string }{
		{"stream_id", m.StreamID}, {"variant_id", m.VariantID}, {"output_profile", m.OutputProfile},
	} {
		if f.v != "" {
			if err := checkIdentifier(f.name, f.v); err != nil {
				return err
			}
		}
	}
	if m.Priority != nil && (*m.Priority < 0 || *m.Priority > maxPriority) {
		return invalid("priority", "%d is outside 0 to %d", *m.Priority, maxPriority)
	}
	if err := checkParameters(m.Parameters); err != nil {
		return err
	}
	switch {
	case m.RecordingMode == "" && m.Role == RolePublish:
		return invalid("recording_mode", "missing; a publish intent must name one of %s",
			strings.Join(capabilities.RecordingModes(), ", "))
	case m.RecordingMode != "" && !capabilities.ValidRecordingMode(m.RecordingMode):
		return invalid("recording_mode", "%q is not one of %s", m.RecordingMode,
			strings.Join(capabilities.RecordingModes(), ", "))
	}
	return nil
}

func checkIdentifier(field, v string) *ValidationError {
	if !capabilities.ValidIdentifier(v) {
		return invalid(field, "%q is not an identifier ([A-Za-z0-9._-], 1 to %d bytes, not . or ..)",
			v, capabilities.MaxIdentifierBytes)
	}
	return nil
}

// ObservedState is the state of an ObservedStatus.
type ObservedState = wire.ObservedState

// The states of keeppeek.observed-status.v1.
const (
	StatePending = wire.StatePending
	StateActive  = wire.StateActive
	StateFailed  = wire.StateFailed
	StateStopped = wire.StateStopped
	// StateInvalid reports an intent that failed validation: nothing was or will be sent for it.
	StateInvalid = wire.StateInvalid
)

// ObservedStatus is a keeppeek.observed-status.v1 document (wire.ObservedStatus): what a worker
// observed for one intent, written under its own key, never over the intent. Its ObservedAtMs is the
// writing worker's clock, which may be seconds or minutes off another worker's or the state server's:
// which of two statuses is newer is told by their entries' revisions, not by it.
type ObservedStatus wire.ObservedStatus

// UnmarshalJSON decodes a keeppeek.observed-status.v1 document (an entry's Document) as
// wire.ObservedStatus does: observed_at_ms is read as the store's schema reads integers, so a status
// another writer spelled 1.7644512e12 decodes as the store took it.
func (s *ObservedStatus) UnmarshalJSON(b []byte) error {
	return (*wire.ObservedStatus)(s).UnmarshalJSON(b)
}

// Document returns s encoded as a keeppeek.observed-status.v1 document for a put. The message is
// made one valid UTF-8 line (invalid bytes become U+FFFD, line breaks spaces: the content guard
// rejects log-like strings), without the markers of a data URI or a PEM block (which it rejects too),
// and cut, on a rune boundary, to at most MaxStatusMessageBytes.
func (s ObservedStatus) Document() json.RawMessage {
	s.Message = statusMessage(s.Message)
	b, err := json.Marshal(wire.ObservedStatus(s))
	if err != nil { // strings and integers only: cannot happen
		panic(fmt.Sprintf("reconciler: encode observed status: %v", err))
	}
	return b
}

// lineBreaks turns every line break into one space (`\r\n` counts as one).
var lineBreaks = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

// pemMarker opens a PEM block, which the content guard refuses anywhere in a document.
const pemMarker = "-----BEGIN "

func statusMessage(m string) string {
	m = lineBreaks.Replace(strings.ToValidUTF8(m, "\uFFFD"))
	// The content guard also refuses a string that is a data URI or holds a PEM block: a message that
	// quotes one (an error text) keeps its words without the marker, so the status can be written.
	if rest, ok := strings.CutPrefix(m, "data:"); ok {
		m = "data " + rest
	}
	m = strings.ReplaceAll(m, pemMarker, "-----begin ")
	if len(m) <= MaxStatusMessageBytes {
		return m
	}
	n := MaxStatusMessageBytes
	for n > 0 && !utf8.RuneStart(m[n]) {
		n--
	}
	return m[:n]
}

// InvalidStatus is the observed status of an intent that failed decoding or validation (err, usually
// a *ValidationError) at time at: StateInvalid with err's text as the message (no message when err is
// nil). Document encodes it for the put.
func InvalidStatus(subjectKey string, err error, at time.Time) ObservedStatus {
	st := ObservedStatus{SubjectKey: subjectKey, State: StateInvalid, ObservedAtMs: at.UnixMilli()}
	if err != nil {
		st.Message = err.Error()
	}
	return st
}
