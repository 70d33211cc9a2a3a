package transcode_test

import (
	"context"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/examples/internal/simtest"
)

// The holder's state server hangs (SIGSTOP; NATS is external, so the media server still answers)
// just as the holder finds its publication gone (stopped by its id from another process of the
// principal). Before it starts the publication again it reports "starting the publication", a write
// that hangs until the lease is lost. The start must not be sent then: the lease is gone, and a start
// would take the variant over from whoever holds it next. It was sent, since the holder checked its
// lease before that write only (the chaos test caught it, the holder frozen by SIGSTOP in between).
func TestTranscoderStartsNothingOnceItsLeaseIsLost(t *testing.T) {
	k := newKillEnv(t, true)
	k.transcoder("tx-1")
	k.firstPublications()
	var pubID string
	for _, p := range k.sim.Publications() {
		if p.SourceID == killSources[0] {
			pubID = p.ID
		}
	}
	other, err := capabilities.NewCommands(k.connect(killSvc), killSvc)
	if err != nil {
		t.Fatal(err)
	}
	count := func(cmd string) int { return simtest.CountCommands(k.sim, killSvc, cmd) }
	starts, stops := count("start_publication"), count("stop_publication")
	k.s.Pause()
	paused := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := other.StopPublication(ctx, pubID); err != nil {
		t.Fatal(err)
	}
	// The holder's status write hangs past the lease's loss; the loss makes it stop what it holds
	// (the publication it knows of: not found, or the one it started meanwhile).
	if !simtest.Within(30*time.Second, func() bool { return count("stop_publication") >= stops+2 }) {
		t.Fatalf("the holder sent no stop_publication after losing the lease\nhistory:\n%s\nlogs:\n%s", k.history(), k.logs.String())
	}
	if n := count("start_publication"); n != starts {
		t.Fatalf("%d start_publication sent while the state server hung (for %v so far), the lease lost meanwhile\nhistory:\n%s\nlogs:\n%s",
			n-starts, time.Since(paused).Round(time.Millisecond), k.history(), k.logs.String())
	}
	k.s.Resume()
	k.settle("after the state server answers again")
}
