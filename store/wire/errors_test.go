package wire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// sentinels pairs every code with its sentinel.
var sentinels = map[wire.Code]*wire.Error{
	wire.CodeNotFound:          wire.ErrNotFound,
	wire.CodeConflict:          wire.ErrConflict,
	wire.CodeGuardFailed:       wire.ErrGuardFailed,
	wire.CodeTTLInvalid:        wire.ErrTTLInvalid,
	wire.CodeInvalidArgument:   wire.ErrInvalidArgument,
	wire.CodePermissionDenied:  wire.ErrPermissionDenied,
	wire.CodeSchemaInvalid:     wire.ErrSchemaInvalid,
	wire.CodeTooLarge:          wire.ErrTooLarge,
	wire.CodeQuotaExceeded:     wire.ErrQuotaExceeded,
	wire.CodeWatchTooBroad:     wire.ErrWatchTooBroad,
	wire.CodeWatchExists:       wire.ErrWatchExists,
	wire.CodeResourceExhausted: wire.ErrResourceExhausted,
	wire.CodeStorage:           wire.ErrStorage,
	wire.CodeUnavailable:       wire.ErrUnavailable,
}

// TestCodesMatchSpec: the codes of SPEC section 8, spelled in full.
func TestCodesMatchSpec(t *testing.T) {
	spec := []string{
		"STATE_STORE_ERROR_CODE_NOT_FOUND",
		"STATE_STORE_ERROR_CODE_CONFLICT",
		"STATE_STORE_ERROR_CODE_GUARD_FAILED",
		"STATE_STORE_ERROR_CODE_TTL_INVALID",
		"STATE_STORE_ERROR_CODE_INVALID_ARGUMENT",
		"STATE_STORE_ERROR_CODE_PERMISSION_DENIED",
		"STATE_STORE_ERROR_CODE_SCHEMA_INVALID",
		"STATE_STORE_ERROR_CODE_TOO_LARGE",
		"STATE_STORE_ERROR_CODE_QUOTA_EXCEEDED",
		"STATE_STORE_ERROR_CODE_WATCH_TOO_BROAD",
		"STATE_STORE_ERROR_CODE_WATCH_EXISTS",
		"STATE_STORE_ERROR_CODE_RESOURCE_EXHAUSTED",
		"STATE_STORE_ERROR_CODE_STORAGE",
		"STATE_STORE_ERROR_CODE_UNAVAILABLE",
	}
	if len(wire.Codes) != len(spec) {
		t.Fatalf("wire.Codes has %d codes, SPEC %d", len(wire.Codes), len(spec))
	}
	seen := map[wire.Code]bool{}
	for i, c := range wire.Codes {
		if string(c) != spec[i] {
			t.Errorf("Codes[%d] = %s, want %s", i, c, spec[i])
		}
		if seen[c] {
			t.Errorf("duplicate code %s", c)
		}
		seen[c] = true
		if s := sentinels[c]; s == nil || s.Code != c {
			t.Errorf("no sentinel for %s", c)
		}
	}
}

func TestErrorsIsMatchesByCode(t *testing.T) {
	for i, c := range wire.Codes {
		errs := []error{
			wire.Errorf(c, "message %d", i),
			wire.Errorf(c, ""),
			&wire.Error{Code: c, Message: "other"},
			fmt.Errorf("wrapped: %w", wire.Errorf(c, "x")),
			fmt.Errorf("twice: %w", fmt.Errorf("once: %w", wire.Errorf(c, "x"))),
			errors.Join(io.EOF, wire.Errorf(c, "joined")),
			wire.RevisionError(c, 3, "rev"),
			sentinels[c],
		}
		for _, err := range errs {
			for _, other := range wire.Codes {
				want := other == c
				if got := errors.Is(err, sentinels[other]); got != want {
					t.Errorf("errors.Is(%v, Err<%s>) = %v, want %v", err, other, got, want)
				}
				if got := errors.Is(err, &wire.Error{Code: other, Message: "unrelated"}); got != want {
					t.Errorf("errors.Is(%v, &Error{%s, unrelated}) = %v, want %v", err, other, got, want)
				}
			}
			if got := wire.CodeOf(err); got != c {
				t.Errorf("CodeOf(%v) = %s, want %s", err, got, c)
			}
		}
	}
	if errors.Is(wire.ErrConflict, io.EOF) || errors.Is(io.EOF, wire.ErrConflict) {
		t.Error("a *wire.Error matches a foreign error")
	}
}

func TestCodeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want wire.Code
	}{
		{nil, ""},
		{io.EOF, ""},
		{errors.New("STATE_STORE_ERROR_CODE_CONFLICT"), ""},
		{wire.ErrNotFound, wire.CodeNotFound},
		{wire.Errorf(wire.CodeTooLarge, "big"), wire.CodeTooLarge},
		{fmt.Errorf("ctx: %w", wire.RevisionError(wire.CodeGuardFailed, 0, "g")), wire.CodeGuardFailed},
	} {
		if got := wire.CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestErrorString(t *testing.T) {
	for _, c := range []struct {
		err  *wire.Error
		want string
	}{
		{wire.ErrNotFound, "STATE_STORE_ERROR_CODE_NOT_FOUND"},
		{wire.Errorf(wire.CodeNotFound, "no %s", "k"), "STATE_STORE_ERROR_CODE_NOT_FOUND: no k"},
		{wire.RevisionError(wire.CodeConflict, 0, "exists"), "STATE_STORE_ERROR_CODE_CONFLICT: exists (current_revision 0)"},
		{wire.RevisionError(wire.CodeGuardFailed, 12, "lease %s", "a"), "STATE_STORE_ERROR_CODE_GUARD_FAILED: lease a (current_revision 12)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestRevisionErrorJSON(t *testing.T) {
	for _, c := range []struct {
		err  *wire.Error
		want string
	}{
		{wire.RevisionError(wire.CodeConflict, 0, "key exists"),
			`{"code":"STATE_STORE_ERROR_CODE_CONFLICT","message":"key exists","current_revision":0}`},
		{wire.RevisionError(wire.CodeGuardFailed, 0, "guard missing"),
			`{"code":"STATE_STORE_ERROR_CODE_GUARD_FAILED","message":"guard missing","current_revision":0}`},
		{wire.RevisionError(wire.CodeConflict, 121, "m"),
			`{"code":"STATE_STORE_ERROR_CODE_CONFLICT","message":"m","current_revision":121}`},
		{wire.RevisionError(wire.CodeConflict, 1<<53-1, "m"),
			`{"code":"STATE_STORE_ERROR_CODE_CONFLICT","message":"m","current_revision":9007199254740991}`},
		{wire.Errorf(wire.CodeNotFound, "gone"),
			`{"code":"STATE_STORE_ERROR_CODE_NOT_FOUND","message":"gone"}`},
		{wire.ErrInvalidArgument,
			`{"code":"STATE_STORE_ERROR_CODE_INVALID_ARGUMENT","message":""}`},
	} {
		b, err := json.Marshal(c.err)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("Marshal = %s, want %s", b, c.want)
		}
		var back wire.Error
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Code != c.err.Code || back.Message != c.err.Message ||
			(back.CurrentRevision == nil) != (c.err.CurrentRevision == nil) ||
			(back.CurrentRevision != nil && *back.CurrentRevision != *c.err.CurrentRevision) {
			t.Errorf("round trip of %s = %+v", b, back)
		}
	}
	// Every code built by Errorf omits current_revision.
	for _, c := range wire.Codes {
		b, _ := json.Marshal(wire.Errorf(c, "m"))
		if strings.Contains(string(b), "current_revision") {
			t.Errorf("Errorf(%s) encodes current_revision: %s", c, b)
		}
	}
}

// RevisionError keeps its own copy of the revision.
func TestRevisionErrorCopiesRevision(t *testing.T) {
	a := wire.RevisionError(wire.CodeConflict, 1, "a")
	b := wire.RevisionError(wire.CodeConflict, 2, "b")
	if *a.CurrentRevision != 1 || *b.CurrentRevision != 2 || a.CurrentRevision == b.CurrentRevision {
		t.Fatalf("revisions %d %d", *a.CurrentRevision, *b.CurrentRevision)
	}
}

func TestErrorResult(t *testing.T) {
	r := wire.ErrorResult(5, errors.New("disk full"))
	if r.RequestID != 5 || r.OK || r.Error == nil || r.Error.Code != wire.CodeStorage || r.Error.Message != "disk full" {
		t.Fatalf("ErrorResult(plain) = %+v (error %+v)", r, r.Error)
	}
	if !errors.Is(r.Error, wire.ErrStorage) {
		t.Error("plain error does not become STORAGE")
	}
	b, _ := json.Marshal(r)
	if want := `{"request_id":5,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_STORAGE","message":"disk full"}}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}

	r = wire.ErrorResult(6, fmt.Errorf("put: %w", wire.RevisionError(wire.CodeConflict, 0, "exists")))
	b, _ = json.Marshal(r)
	if want := `{"request_id":6,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_CONFLICT","message":"exists","current_revision":0}}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}

	r = wire.ErrorResult(0, wire.Errorf(wire.CodeInvalidArgument, "not json"))
	b, _ = json.Marshal(r)
	if want := `{"request_id":0,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_INVALID_ARGUMENT","message":"not json"}}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
}

// errors.Is with a typed nil *Error target (a variable of that type never set) answers false; it
// used to dereference the nil target and panic.
func TestErrorIsWithANilTarget(t *testing.T) {
	var target *wire.Error
	err := fmt.Errorf("x: %w", wire.Errorf(wire.CodeConflict, "c"))
	if errors.Is(err, target) {
		t.Fatal("a conflict matched a nil *Error")
	}
	if !errors.Is(err, wire.ErrConflict) {
		t.Fatal("a conflict does not match ErrConflict")
	}
}
