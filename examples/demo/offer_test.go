package main

import (
	"testing"
	"time"
)

// offer never blocks the worker that reports an event: once nobody reads (the tour is over, with
// --keep), events are dropped, and the ones already queued stay as they were.
func TestOfferDropsWhatNobodyReads(t *testing.T) {
	ch := make(chan int, 2)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range 100 {
			offer(ch, i)
		}
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("offer blocked on a full channel")
	}
	if a, b := <-ch, <-ch; a != 0 || b != 1 || len(ch) != 0 {
		t.Fatalf("queued %d, %d (%d more), want the first two", a, b, len(ch))
	}
}
