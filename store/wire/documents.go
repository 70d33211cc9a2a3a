package wire

import (
	"encoding/json"
	"reflect"
)

// The documents of the registered schemas (SPEC section 13), for the packages that write and read
// them: store/schema validates them, the SDK packages build and decode them with these types.

// Roles of a media intent.
const (
	RolePublish   = "publish"
	RoleSubscribe = "subscribe"
)

// MediaIntent is a keeppeek.media-intent.v1 document: a desired publication or subscription of one
// media source, named by its stable source_id (never a transient session). Role, Desired, SourceID and
// MediaKind are required; RecordingMode too when Role is publish. Priority is a pointer so that an
// explicit 0 is kept; each Parameters value is one JSON object, keyed by a service id. json.Unmarshal
// refuses a priority spelled 5.0 or 5e0, which the store takes: a reader that may meet one decodes
// priority as a json.RawMessage and reads it with Integer. (Unlike the other document types,
// MediaIntent has no UnmarshalJSON doing that: its readers embed it in structs of their own, which the
// method would take over.)
type MediaIntent struct {
	Role          string                     `json:"role"`
	Desired       bool                       `json:"desired"`
	SourceID      string                     `json:"source_id"`
	MediaKind     string                     `json:"media_kind"`
	StreamID      string                     `json:"stream_id,omitempty"`
	VariantID     string                     `json:"variant_id,omitempty"`
	OutputProfile string                     `json:"output_profile,omitempty"`
	Priority      *int                       `json:"priority,omitempty"`
	RecordingMode string                     `json:"recording_mode,omitempty"`
	Parameters    map[string]json.RawMessage `json:"parameters,omitempty"`
}

// ObservedState is the state of an ObservedStatus.
type ObservedState string

// The states of keeppeek.observed-status.v1.
const (
	StatePending ObservedState = "pending"
	StateActive  ObservedState = "active"
	StateFailed  ObservedState = "failed"
	StateStopped ObservedState = "stopped"
	StateInvalid ObservedState = "invalid"
)

// MaxStatusMessageBytes bounds ObservedStatus.Message.
const MaxStatusMessageBytes = 256

// ObservedStatus is a keeppeek.observed-status.v1 document: what a worker observed for one intent,
// written under the worker's own key, never over the intent.
type ObservedStatus struct {
	SubjectKey     string        `json:"subject_key"`
	State          ObservedState `json:"state"`
	ObservedAtMs   int64         `json:"observed_at_ms"`
	Message        string        `json:"message,omitempty"`
	PublicationID  string        `json:"publication_id,omitempty"`
	SubscriptionID string        `json:"subscription_id,omitempty"`
	VariantID      string        `json:"variant_id,omitempty"`
	ErrorCode      string        `json:"error_code,omitempty"`
	Holder         string        `json:"holder,omitempty"`
}

// LeaseDocument is a keeppeek.lease.v1 document.
type LeaseDocument struct {
	Holder      string `json:"holder"`
	ClaimedAtMs int64  `json:"claimed_at_ms"`
	RenewedAtMs int64  `json:"renewed_at_ms,omitempty"`
	Purpose     string `json:"purpose,omitempty"`
}

// UnmarshalJSON decodes a lease document as json.Unmarshal does, but reads its integers as the store's
// schema reads them (see Integer): 1.7644512e12 is the integer it stands for, not an error.
func (d *LeaseDocument) UnmarshalJSON(b []byte) error {
	type plain LeaseDocument // without this method
	var aux struct {
		*plain
		ClaimedAtMs json.RawMessage `json:"claimed_at_ms"`
		RenewedAtMs json.RawMessage `json:"renewed_at_ms"`
	}
	aux.plain = (*plain)(d)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return setIntegers("LeaseDocument", []integerField{{"claimed_at_ms", aux.ClaimedAtMs, &d.ClaimedAtMs},
		{"renewed_at_ms", aux.RenewedAtMs, &d.RenewedAtMs}})
}

// UnmarshalJSON decodes an observed status as json.Unmarshal does, but reads observed_at_ms as the
// store's schema reads integers (see Integer).
func (s *ObservedStatus) UnmarshalJSON(b []byte) error {
	type plain ObservedStatus // without this method
	var aux struct {
		*plain
		ObservedAtMs json.RawMessage `json:"observed_at_ms"`
	}
	aux.plain = (*plain)(s)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return setIntegers("ObservedStatus", []integerField{{"observed_at_ms", aux.ObservedAtMs, &s.ObservedAtMs}})
}

// integerField is an integer property of a document: its name, the raw value read (nil or null when
// absent) and where its value goes.
type integerField struct {
	name string
	raw  json.RawMessage
	dst  *int64
}

// setIntegers sets each field that was present and not null to its integer, as Integer reads it; a
// value that is not one is the *json.UnmarshalTypeError json.Unmarshal gives for an int64 field.
// (MediaIntent has none: its users embed it in structs of their own, which a method would take over.)
func setIntegers(typ string, fields []integerField) error {
	for _, f := range fields {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		n, ok := Integer(f.raw)
		if !ok {
			return &json.UnmarshalTypeError{Value: "number " + string(f.raw), Type: reflect.TypeFor[int64](), Struct: typ, Field: f.name}
		}
		*f.dst = n
	}
	return nil
}

// Preference is a keeppeek.preference.v1 document.
type Preference struct {
	Kind           string `json:"kind"`
	PreferredGroup string `json:"preferred_group,omitempty"`
	Layout         string `json:"layout,omitempty"`
	AudioDevice    string `json:"audio_device,omitempty"`
}
