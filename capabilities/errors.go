package capabilities

import (
	"errors"
	"fmt"
)

// Code is a media command error code, carried in full on the wire.
type Code string

// The media command error codes. The SPEC (section 12) names the first five; the last two are this
// project's and the simulator's for what it leaves open.
const (
	// CodeRecordingModeInvalid: start_publication with a missing or unknown recording_mode, or one the
	// source's publication capability does not allow.
	CodeRecordingModeInvalid Code = "PUBLICATION_ERROR_CODE_RECORDING_MODE_INVALID"
	// CodePublicationConflict: start_publication of a variant another publisher owns (or the source's
	// own variant).
	CodePublicationConflict Code = "PUBLICATION_ERROR_CODE_CONFLICT"
	// CodeSourceUnavailable: the session_id is not the source's current one, the source is offline,
	// or it has no such stream to publish from. Subscribe uses it too for a stale or unknown session.
	CodeSourceUnavailable Code = "PUBLICATION_ERROR_CODE_SOURCE_UNAVAILABLE"
	// CodeVariantNotReady: subscribe to a variant that is absent or not READY.
	CodeVariantNotReady Code = "SUBSCRIPTION_ERROR_CODE_VARIANT_NOT_READY"
	// CodeSubscriptionNotFound: unsubscribe of a subscription the principal does not hold.
	CodeSubscriptionNotFound Code = "SUBSCRIPTION_ERROR_CODE_NOT_FOUND"
	// CodePublicationNotFound: stop_publication of a publication the principal does not hold.
	CodePublicationNotFound Code = "PUBLICATION_ERROR_CODE_NOT_FOUND"
	// CodeInvalidArgument: a request that does not decode, lacks a required field, carries an unknown
	// field or an identifier that breaks the identifier rule.
	CodeInvalidArgument Code = "MEDIA_ERROR_CODE_INVALID_ARGUMENT"
)

// Error is the error object of a failed media command reply: {"code": ..., "message": ...}.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is reports whether target is a *Error with the same code, so errors.Is(err, ErrPublicationConflict)
// matches any conflict whatever its message. A nil *Error target carries no code and matches nothing.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// Sentinels for errors.Is; they compare by code only.
var (
	ErrRecordingModeInvalid = &Error{Code: CodeRecordingModeInvalid}
	ErrPublicationConflict  = &Error{Code: CodePublicationConflict}
	ErrSourceUnavailable    = &Error{Code: CodeSourceUnavailable}
	ErrVariantNotReady      = &Error{Code: CodeVariantNotReady}
	ErrSubscriptionNotFound = &Error{Code: CodeSubscriptionNotFound}
	ErrPublicationNotFound  = &Error{Code: CodePublicationNotFound}
	ErrInvalidArgument      = &Error{Code: CodeInvalidArgument}
)

// Errorf returns a *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err, or "" when err is not a *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ErrVariantFailed matches (errors.Is) every *VariantFailedError.
var ErrVariantFailed = errors.New("capabilities: variant failed")

// VariantFailedError is returned by WaitVariant and WaitReady when the awaited variant is FAILED.
type VariantFailedError struct {
	SourceID, StreamID string
	// Variant is the failed variant as the capabilities show it.
	Variant Variant
}

// Error implements error.
func (e *VariantFailedError) Error() string {
	return fmt.Sprintf("capabilities: variant %s/%s/%s is FAILED (publisher %q)", e.SourceID, e.StreamID, e.Variant.VariantID, e.Variant.Publisher)
}

// Is makes errors.Is(err, ErrVariantFailed) true.
func (e *VariantFailedError) Is(target error) bool { return target == ErrVariantFailed }

// ErrTrackerStopped is returned by a Tracker's waits once it is stopped or its NATS connection closed
// for good (then wrapping nats.ErrConnectionClosed), and by Start after Stop.
var ErrTrackerStopped = errors.New("capabilities: tracker stopped")
