package wire_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wantInvalidArgument fails unless err is an INVALID_ARGUMENT *wire.Error with a message.
func wantInvalidArgument(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("got nil, want INVALID_ARGUMENT")
	}
	checkInvalidArgument(t, err)
}

// checkInvalidArgument fails unless err (not nil) is a *wire.Error with code INVALID_ARGUMENT that
// errors.Is matches against wire.ErrInvalidArgument.
func checkInvalidArgument(t testing.TB, err error) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInvalidArgument {
		t.Fatalf("got %T %v, want a *wire.Error with %s", err, err, wire.CodeInvalidArgument)
	}
	if !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("errors.Is(%v, wire.ErrInvalidArgument) is false", err)
	}
	if we.Message == "" {
		t.Fatal("INVALID_ARGUMENT without a message")
	}
	if we.CurrentRevision != nil {
		t.Fatalf("INVALID_ARGUMENT carries current_revision %d", *we.CurrentRevision)
	}
}

func i64(v int64) *int64 { return &v }

func u64(v uint64) *uint64 { return &v }
