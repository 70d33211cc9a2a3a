package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
)

// A leader whose job returns at once (its own dependency is down, say) must not claim and release the
// lease in a tight loop of store writes: the elector pauses after a term before it campaigns again,
// which also gives a standby its turn. The pauses are checked from below only.
func TestElectorPausesBetweenTerms(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	type span struct{ start, end time.Time }
	terms := make(chan span, 16)
	e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{
		Options: opts("leaders/flaky", "w1", 2*time.Second),
		OnStarted: func(context.Context, *lease.Lease) {
			terms <- span{start: time.Now(), end: time.Now()}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var got []span
	for range 3 {
		got = append(got, recv(t, terms, "a term"))
	}
	cancel()
	if err := recv(t, done, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].start.Sub(got[i-1].end); gap < 100*time.Millisecond {
			t.Errorf("term %d started %v after term %d's job returned; want a pause of at least 100 ms", i+1, gap, i)
		}
	}
}
