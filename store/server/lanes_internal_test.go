package server

import (
	"fmt"
	"testing"
	"time"
)

// queues run one key's functions one at a time in the order offered, and never make offer wait: a key
// with limit functions waiting behind a stuck one has the next refused at once (offerFull), while
// another key's functions run beside it. Closed, queues take nothing more but run what they took.
func TestQueuesKeepOrderPerKeyAndNeverBlockOffer(t *testing.T) {
	q := queues{limit: 3}
	release := make(chan struct{})
	running := make(chan struct{})
	if got := q.offer("alice", func() { close(running); <-release }); got != offerQueued {
		t.Fatalf("first offer: %v", got)
	}
	<-running
	var ran []int // alice's, in the order they ran (one at a time: no lock needed)
	for i := range 3 {
		if got := q.offer("alice", func() { ran = append(ran, i) }); got != offerQueued {
			t.Fatalf("offer %d: %v", i, got)
		}
	}
	if got := q.offer("alice", func() { t.Error("a refused function ran") }); got != offerFull {
		t.Fatalf("offer past the limit: %v, want offerFull", got)
	}
	bobRan := make(chan struct{})
	if got := q.offer("bob", func() { close(bobRan) }); got != offerQueued {
		t.Fatalf("bob's offer: %v", got)
	}
	select {
	case <-bobRan:
	case <-time.After(10 * time.Second):
		t.Fatal("bob's function waited behind alice's stuck one")
	}
	q.close()
	if got := q.offer("bob", func() { t.Error("a function offered after close ran") }); got != offerClosed {
		t.Fatalf("offer after close: %v", got)
	}
	close(release)
	q.wg.Wait()
	if fmt.Sprint(ran) != "[0 1 2]" {
		t.Fatalf("alice's functions ran as %v, want [0 1 2]", ran)
	}
}

// latestLanes keep one waiting function per key, the newest: a key's functions run one at a time, a
// newer one replaces the one waiting, the groups with keys waiting take turns (one key each), a group
// with limit keys waiting has a further key dropped without blocking, another group's taken, and close
// drops what still waits.
func TestLatestLanesKeepTheNewestWaitingFunction(t *testing.T) {
	const limit = 4
	l := latestLanes{n: 1, limit: limit}
	release := make(chan struct{})
	running := make(chan struct{})
	if got := l.offer("a", "busy", func() { close(running); <-release }); got != offerQueued {
		t.Fatalf("first offer: %v", got)
	}
	<-running
	var ran []string // in the order run (one lane: one at a time)
	done := make(chan struct{})
	for i := range 3 { // the newest of a key's waiting functions runs, once
		want := offerSuperseded
		if i == 0 {
			want = offerQueued
		}
		if got := l.offer("a", "k", func() { ran = append(ran, fmt.Sprint("k", i)) }); got != want {
			t.Fatalf("offer %d: %v, want %v", i, got, want)
		}
	}
	for i := 1; i < limit; i++ { // group a's other keys, up to its limit
		if got := l.offer("a", fmt.Sprint("a", i), func() {
			ran = append(ran, fmt.Sprint("a", i))
			if i == limit-1 {
				close(done)
			}
		}); got != offerQueued {
			t.Fatalf("offer of key a%d: %v", i, got)
		}
	}
	if got := l.offer("a", "one-too-many", func() { t.Error("a dropped function ran") }); got != offerFull {
		t.Fatalf("offer past its group's limit: %v, want offerFull", got)
	}
	for i := range 2 { // group b's keys come after all of a's, and take turns with them
		if got := l.offer("b", fmt.Sprint("b", i), func() { ran = append(ran, fmt.Sprint("b", i)) }); got != offerQueued {
			t.Fatalf("offer of key b%d: %v", i, got)
		}
	}
	close(release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting functions never ran")
	}
	if got := fmt.Sprint(ran); got != "[k2 b0 a1 b1 a2 a3]" {
		t.Fatalf("ran %s, want the newest of k (k2), then groups a and b in turns: [k2 b0 a1 b1 a2 a3]", got)
	}
	// Closed, the lanes take nothing and drop what waits.
	block := make(chan struct{})
	started := make(chan struct{})
	l2 := latestLanes{n: 1, limit: limit}
	l2.offer("g", "a", func() { close(started); <-block })
	<-started
	l2.offer("g", "b", func() { t.Error("a function waiting at close ran") })
	l2.close()
	close(block)
	l2.wg.Wait()
	if got := l2.offer("g", "c", func() {}); got != offerClosed {
		t.Fatalf("offer after close: %v", got)
	}
	l.close()
	l.wg.Wait()
}

// warnEvery lets one warning per principal through per period, each principal on its own clock.
func TestWarnEveryLimitsPerPrincipal(t *testing.T) {
	w := warnEvery{period: time.Minute}
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		who  string
		at   time.Duration
		want bool
	}{{"alice", 0, true}, {"alice", time.Second, false}, {"bob", time.Second, true},
		{"alice", 59 * time.Second, false}, {"alice", time.Minute, true}, {"bob", time.Minute, false}} {
		if got := w.due(c.who, t0.Add(c.at)); got != c.want {
			t.Errorf("due(%s, +%v) = %v, want %v", c.who, c.at, got, c.want)
		}
	}
	// A principal whose period ended is forgotten once another is warned about: the map holds the
	// principals warned about within the last period, not every one ever warned about.
	for i := range 100 {
		w.due(fmt.Sprintf("p%d", i), t0.Add(2*time.Minute+time.Duration(i)*time.Second))
	}
	w.mu.Lock()
	n := len(w.last)
	w.mu.Unlock()
	if n != 60 {
		t.Fatalf("after a warning a second for 100 s, %d principals remembered, want the last minute's 60", n)
	}
}
