package server

import (
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
