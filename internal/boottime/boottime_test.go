package boottime

import (
	"testing"
	"time"
)

// The clock moves forward with the monotonic clock: over an interval, by at least what the monotonic
// clock measured (it may count more only across a suspend), and never backwards.
func TestNowAdvancesWithTheMonotonicClock(t *testing.T) {
	mono := time.Now()
	first := Now()
	last := first
	for time.Since(mono) < 20*time.Millisecond {
		n := Now()
		if n.Before(last) {
			t.Fatalf("the clock went back from %v to %v", last, n)
		}
		last = n
	}
	elapsed := time.Since(mono)
	if got := Since(first); got < elapsed-time.Millisecond || got > elapsed+time.Second {
		t.Fatalf("the clock moved %v while the monotonic clock moved %v", got, elapsed)
	}
	if first.IsZero() || !first.Before(last) || !last.After(first) || last.Sub(first) <= 0 {
		t.Fatalf("readings %v then %v do not compare as earlier and later", first, last)
	}
	if d := Until(Now().Add(time.Hour)); d <= 0 || d > time.Hour {
		t.Fatalf("Until an hour from now is %v", d)
	}
	if d := time.Until(Deadline(Now().Add(time.Hour))); d <= 59*time.Minute || d > time.Hour {
		t.Fatalf("the deadline of an hour from now is %v away", d)
	}
}
