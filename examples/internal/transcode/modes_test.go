package transcode_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// The source stops offering the intent's recording mode while the publication runs, and then the
// publication FAILS: the failed publication, which still holds the variant, is stopped; no start is
// sent while the mode is not offered; once the source offers it again (with other modes beside it),
// the publication is started again and reported active.
func TestRecordingModeWithdrawnWhileThePublicationRuns(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("required")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return readStatus(t, f).State == reconciler.StateActive })
	pub, ok := readyPublication(f)
	if !ok {
		t.Fatal("no READY publication")
	}
	if err := f.Sim.SetRecordingModes(src, []string{"inherit", "disabled"}); err != nil {
		t.Fatal(err)
	}
	starts := simtest.CountCommands(f.Sim, svc, "start_publication")
	if err := f.Sim.FailPublication(pub.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the failed publication stopped", func() bool { return len(f.Sim.Publications()) == 0 })
	waitFor(t, 10*time.Second, "status failed for the recording mode", func() bool {
		st := readStatus(t, f)
		return st.State == reconciler.StateFailed && st.ErrorCode == "PUBLICATION_ERROR_CODE_RECORDING_MODE_INVALID"
	})
	if n := simtest.CountCommands(f.Sim, svc, "start_publication"); n != starts {
		t.Fatalf("%d start_publication sent while the source did not offer the mode", n-starts)
	}
	if err := f.Sim.SetRecordingModes(src, []string{"required"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "active again", func() bool {
		st := readStatus(t, f)
		return st.State == reconciler.StateActive && st.PublicationID != pub.ID && st.PublicationID != ""
	})
}
