package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/worker"
)

// An owned goroutine whose own stop fails (it cannot flush or hand over what it holds) returns an
// error that is not its context's: Run returned nil, so a supervisor read a clean stop, and nothing
// logged the failure. Run returns it when the stop was otherwise clean (it is then the first error);
// a goroutine that returns its context's error, wrapped or not, is no failure.
func TestWorkerReturnsAGoroutinesFailureDuringTheStop(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	flushFailed := errors.New("flush of the last offsets failed")
	for _, tc := range []struct {
		name string
		ret  func(ctx context.Context) error
		want error // nil: Run returns nil
	}{
		{"failure", func(context.Context) error { return flushFailed }, flushFailed},
		{"context error", func(ctx context.Context) error { return fmt.Errorf("job: %w", ctx.Err()) }, nil},
		{"nil", func(context.Context) error { return nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "tx-stoperr"})
			if err != nil {
				t.Fatal(err)
			}
			running := make(chan struct{})
			w.Go("shipper", func(ctx context.Context) error {
				close(running)
				<-ctx.Done()
				return tc.ret(ctx)
			})
			stop := runWorker(t, w)
			<-running
			switch err := stop(); {
			case tc.want == nil && err != nil:
				t.Fatalf("Run = %v, want nil", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Run = %v, want the goroutine's failure %q", err, tc.want)
			}
		})
	}
}
