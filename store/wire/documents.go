package wire

import "encoding/json"

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
// explicit 0 is kept; each Parameters value is one JSON object, keyed by a service id.
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

// Preference is a keeppeek.preference.v1 document.
type Preference struct {
	Kind           string `json:"kind"`
	PreferredGroup string `json:"preferred_group,omitempty"`
	Layout         string `json:"layout,omitempty"`
	AudioDevice    string `json:"audio_device,omitempty"`
}
