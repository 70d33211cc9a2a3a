package wire

import (
	"errors"
	"fmt"
)

// Code is a SPEC error code, carried in full on the wire (STATE_STORE_ERROR_CODE_CONFLICT).
type Code string

// The error codes of SPEC section 8.
const (
	CodeNotFound          Code = "STATE_STORE_ERROR_CODE_NOT_FOUND"
	CodeConflict          Code = "STATE_STORE_ERROR_CODE_CONFLICT"
	CodeGuardFailed       Code = "STATE_STORE_ERROR_CODE_GUARD_FAILED"
	CodeTTLInvalid        Code = "STATE_STORE_ERROR_CODE_TTL_INVALID"
	CodeInvalidArgument   Code = "STATE_STORE_ERROR_CODE_INVALID_ARGUMENT"
	CodePermissionDenied  Code = "STATE_STORE_ERROR_CODE_PERMISSION_DENIED"
	CodeSchemaInvalid     Code = "STATE_STORE_ERROR_CODE_SCHEMA_INVALID"
	CodeTooLarge          Code = "STATE_STORE_ERROR_CODE_TOO_LARGE"
	CodeQuotaExceeded     Code = "STATE_STORE_ERROR_CODE_QUOTA_EXCEEDED"
	CodeWatchTooBroad     Code = "STATE_STORE_ERROR_CODE_WATCH_TOO_BROAD"
	CodeWatchExists       Code = "STATE_STORE_ERROR_CODE_WATCH_EXISTS"
	CodeResourceExhausted Code = "STATE_STORE_ERROR_CODE_RESOURCE_EXHAUSTED"
	CodeStorage           Code = "STATE_STORE_ERROR_CODE_STORAGE"
	CodeUnavailable       Code = "STATE_STORE_ERROR_CODE_UNAVAILABLE"
)

// Codes lists every error code of the contract.
var Codes = []Code{CodeNotFound, CodeConflict, CodeGuardFailed, CodeTTLInvalid, CodeInvalidArgument,
	CodePermissionDenied, CodeSchemaInvalid, CodeTooLarge, CodeQuotaExceeded, CodeWatchTooBroad,
	CodeWatchExists, CodeResourceExhausted, CodeStorage, CodeUnavailable}

// Error is the error object of a failed StateStoreResult. CurrentRevision is set on CONFLICT and
// GUARD_FAILED only, and is then encoded even when it is 0.
type Error struct {
	Code            Code    `json:"code"`
	Message         string  `json:"message"`
	CurrentRevision *uint64 `json:"current_revision,omitempty"`
}

// Error implements error.
func (e *Error) Error() string {
	if e.CurrentRevision != nil {
		return fmt.Sprintf("%s: %s (current_revision %d)", e.Code, e.Message, *e.CurrentRevision)
	}
	if e.Message == "" {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is reports whether target is a *Error with the same code, so errors.Is(err, wire.ErrConflict) works
// for any conflict whatever its message. A nil *Error target carries no code and matches nothing.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// Sentinels for errors.Is; compare by code only.
var (
	ErrNotFound          = &Error{Code: CodeNotFound}
	ErrConflict          = &Error{Code: CodeConflict}
	ErrGuardFailed       = &Error{Code: CodeGuardFailed}
	ErrTTLInvalid        = &Error{Code: CodeTTLInvalid}
	ErrInvalidArgument   = &Error{Code: CodeInvalidArgument}
	ErrPermissionDenied  = &Error{Code: CodePermissionDenied}
	ErrSchemaInvalid     = &Error{Code: CodeSchemaInvalid}
	ErrTooLarge          = &Error{Code: CodeTooLarge}
	ErrQuotaExceeded     = &Error{Code: CodeQuotaExceeded}
	ErrWatchTooBroad     = &Error{Code: CodeWatchTooBroad}
	ErrWatchExists       = &Error{Code: CodeWatchExists}
	ErrResourceExhausted = &Error{Code: CodeResourceExhausted}
	ErrStorage           = &Error{Code: CodeStorage}
	ErrUnavailable       = &Error{Code: CodeUnavailable}
)

// Errorf returns a *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RevisionError returns a CONFLICT or GUARD_FAILED error carrying the current revision.
func RevisionError(code Code, current uint64, format string, args ...any) *Error {
	c := current
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), CurrentRevision: &c}
}

// CodeOf returns the SPEC code of err, or "" when err is not a *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
