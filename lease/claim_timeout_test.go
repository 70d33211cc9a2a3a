package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
)

// A claim whose put gets no reply (the server's own request timeout is spent at once, so it answers
// info but never a write) gives up after the client's request timeout (200 ms here), as any request
// without a context deadline does, not after the lease's TTL (a minute).
func TestClaimKeepsTheClientsRequestTimeout(t *testing.T) {
	env := testenv.Start(t, testenv.Options{RequestTimeout: time.Nanosecond})
	c, err := client.New(env.Connect(t, "coordinator"), "coordinator", client.WithRequestTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := lease.Claim(context.Background(), c, opts("leaders/no-reply", "w1", time.Minute))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Claim of a put without a reply: %v, want the request's timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Claim without a context deadline waited past 20 s for a put without a reply (request timeout 200 ms)")
	}
}
