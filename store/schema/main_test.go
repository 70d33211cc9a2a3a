package schema

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wantInvalid fails the test unless err is a SCHEMA_INVALID *wire.Error whose message holds every
// one of parts.
func wantInvalid(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil, want SCHEMA_INVALID")
	}
	if !errors.Is(err, wire.ErrSchemaInvalid) {
		t.Fatalf("got %v, want SCHEMA_INVALID", err)
	}
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeSchemaInvalid {
		t.Fatalf("got %T %v, want *wire.Error with %s", err, err, wire.CodeSchemaInvalid)
	}
	for _, p := range parts {
		if !strings.Contains(we.Message, p) {
			t.Errorf("message %q does not mention %q", we.Message, p)
		}
	}
}

// wantValid fails the test when err is not nil.
func wantValid(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("got %v, want nil", err)
	}
}

// newRegistry returns a registry or fails the test.
func newRegistry(t testing.TB) *Registry {
	t.Helper()
	r, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}
