package transcode_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/reconciler"
)

// A transcoder stopped (SIGTERM) while the media server is silent cannot stop its publication, which
// may still run. Its status said "stopped" and named no publication, so once the intent was
// withdrawn nobody ever ended it: the status now names the publication, not stopped, and another
// worker ends it when the intent is withdrawn and the media server answers again.
func TestStoppedDuringASilenceLeavesThePublicationNamed(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	g := &simtest.Gate{}
	s := simtest.ReplaceSim(t, f.Env, []sim.SourceConfig{{SourceID: src}}, g)
	newTranscoder := func(id string) *transcode.Transcoder {
		tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: id, Service: svc,
			LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			Capabilities: simtest.FastTracker})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	stop1 := simtest.Run(t, newTranscoder("tx-1").Run)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return readStatus(t, f).State == reconciler.StateActive })
	pub := readStatus(t, f).PublicationID

	speak := g.Silence(t, f.Env)
	stop1()
	if st := readStatus(t, f); st.State == reconciler.StateStopped || st.PublicationID != pub {
		t.Fatalf("after a stop the media server did not hear: status %s naming publication %q, want not stopped and naming %s",
			st.State, st.PublicationID, pub)
	}
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	speak()
	simtest.Run(t, newTranscoder("tx-2").Run)
	waitFor(t, 15*time.Second, "the publication left running ended", func() bool { return len(s.Publications()) == 0 })
	waitFor(t, 10*time.Second, "status stopped", func() bool { return readStatus(t, f).State == reconciler.StateStopped })
	if st := readStatus(t, f); st.Holder != "tx-2" || !strings.Contains(st.Message, pub) {
		t.Fatalf("status %+v, want tx-2's word that it stopped %s", st, pub)
	}
}
