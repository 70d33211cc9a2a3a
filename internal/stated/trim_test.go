package stated

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A trim follows each change of activity once it has been quiet for a period, once per change.
func TestTrimWhenIdle(t *testing.T) {
	var act atomic.Uint64
	trims := make(chan uint64, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { trimWhenIdle(ctx, 5*time.Millisecond, act.Load, func() { trims <- act.Load() }) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	next := func() uint64 {
		t.Helper()
		select {
		case v := <-trims:
			return v
		case <-time.After(10 * time.Second):
			t.Fatal("no trim within 10 s")
			return 0
		}
	}
	none := func(why string) {
		t.Helper()
		select {
		case v := <-trims:
			t.Fatalf("a trim at activity %d %s", v, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
	none("before any activity")
	act.Add(3) // requests
	if v := next(); v != 3 {
		t.Fatalf("trim at activity %d, want 3", v)
	}
	none("without a change")
	// One change, one trim; a second trim needs another change.
	act.Add(1 << 32) // a client left
	if v := next(); v != 3+1<<32 {
		t.Fatalf("trim at activity %d, want %d", v, 3+1<<32)
	}
	none("without a change")
}
