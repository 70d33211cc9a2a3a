package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// TestOffsetRoundTrip: what SaveOffset stores, LoadOffset returns byte for byte; an offset that the
// store's document cannot carry as it is (not UTF-8: JSON would replace its bytes with U+FFFD) is
// refused, as is one over 256 bytes, and leaves the saved offset as it was, so a new leader never
// resumes from a mangled one.
func TestOffsetRoundTrip(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newClient(t, env)
	ctx := ctxT(t)
	o := opts(key, "replica-a", time.Minute)
	o.OffsetKey = "offsets/job"
	l := claim(t, c, o)
	if off, err := l.LoadOffset(ctx); err != nil || off != "" {
		t.Fatalf("LoadOffset before any save = %q, %v; want empty", off, err)
	}
	for _, off := range []string{"42", "segment-7/offset 1200", "é€😀", `{"a":"b\\c"}`} {
		if err := l.SaveOffset(ctx, off); err != nil {
			t.Fatalf("SaveOffset(%q): %v", off, err)
		}
		if got, err := l.LoadOffset(ctx); err != nil || got != off {
			t.Fatalf("LoadOffset after SaveOffset(%q) = %q, %v", off, got, err)
		}
	}
	if err := l.SaveOffset(ctx, "pos\xff\xfe"); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("SaveOffset of a non-UTF-8 offset = %v, want INVALID_ARGUMENT", err)
	}
	// Over 256 bytes (the observed-status message it travels in): refused as the non-UTF-8 one is,
	// INVALID_ARGUMENT, so a caller can tell its own bad offset from a store or transport failure.
	if err := l.SaveOffset(ctx, strings.Repeat("7", 257)); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("SaveOffset of a 257-byte offset = %v, want INVALID_ARGUMENT", err)
	}
	if got, err := l.LoadOffset(ctx); err != nil || got != `{"a":"b\\c"}` {
		t.Fatalf("LoadOffset after a refused save = %q, %v; want the last saved offset", got, err)
	}
}
