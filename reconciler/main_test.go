package reconciler

import (
	"context"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
)

func TestMain(m *testing.M) {
	e2e.Main(m) // the tests, the removal of the stated binary, goleak
}

// testTimeout bounds every wait in the tests.
const testTimeout = 10 * time.Second

// ctxT returns a context that ends after testTimeout or with the test.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// recv receives one value from ch within testTimeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
