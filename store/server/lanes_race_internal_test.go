package server

import (
	"fmt"
	"testing"
	"time"
)

// A lanes' first run that races its close never panics. close takes the lanes' once before it marks
// them closed; a run that comes in between finds no lanes made and not yet closed, and must run its
// function on its own goroutine (as after the close) rather than pick a lane out of none.
func TestLanesFirstRunRacingCloseRunsItsFunction(t *testing.T) {
	var l lanes
	l.once.Do(func() {}) // close's first step; the run below comes before its second
	ran := make(chan struct{})
	l.run("kp.state.v1.coordinator", func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the function handed to run never ran")
	}
	l.close()
	l.wg.Wait()
}

// latestLanes keep one waiting function per key, the newest: a key's functions run one at a time, a
// newer one replaces the one waiting, a lane with no room for another key drops it without blocking,
// and close drops what still waits.
func TestLatestLanesKeepTheNewestWaitingFunction(t *testing.T) {
	l := latestLanes{n: 1}
	release := make(chan struct{})
	running := make(chan struct{})
	if got := l.offer("busy", func() { close(running); <-release }); got != offerQueued {
		t.Fatalf("first offer: %v", got)
	}
	<-running
	var ran []int
	done := make(chan struct{})
	for i := range 3 { // the newest of a key's waiting functions runs, once
		want := offerSuperseded
		if i == 0 {
			want = offerQueued
		}
		if got := l.offer("k", func() { ran = append(ran, i); close(done) }); got != want {
			t.Fatalf("offer %d: %v, want %v", i, got, want)
		}
	}
	for i := 1; i < heartbeatsWaiting; i++ { // fill the lane with other keys
		if got := l.offer(fmt.Sprint("other-", i), func() {}); got != offerQueued {
			t.Fatalf("offer of key %d: %v", i, got)
		}
	}
	if got := l.offer("one-too-many", func() { t.Error("a dropped function ran") }); got != offerFull {
		t.Fatalf("offer to a full lane: %v, want offerFull", got)
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting function never ran")
	}
	if len(ran) != 1 || ran[0] != 2 {
		t.Fatalf("ran %v, want only the newest (2)", ran)
	}
	// Closed, the lanes take nothing and drop what waits.
	block := make(chan struct{})
	started := make(chan struct{})
	l2 := latestLanes{n: 1}
	l2.offer("a", func() { close(started); <-block })
	<-started
	l2.offer("b", func() { t.Error("a function waiting at close ran") })
	l2.close()
	close(block)
	l2.wg.Wait()
	if got := l2.offer("c", func() {}); got != offerClosed {
		t.Fatalf("offer after close: %v", got)
	}
	l.close()
	l.wg.Wait()
}
