package transcode_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// readStatus reads the intent's observed status.
func readStatus(t *testing.T, f *fixture) reconciler.ObservedStatus {
	t.Helper()
	e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
	if errors.Is(err, wire.ErrNotFound) {
		return reconciler.ObservedStatus{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var st reconciler.ObservedStatus
	if err := json.Unmarshal(e.Document, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// The media server restarts (new sessions, none of the old publications) and is slow to serve the
// start that replaces the publication: while that start is under way, the status must not still say
// "active" for the publication the media server no longer has.
func TestStatusNotActiveWhileAPublicationGoneIsRestarted(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return readStatus(t, f).State == reconciler.StateActive })
	old := readStatus(t, f).PublicationID

	next := simtest.RestartSlow(t, f.Env, []sim.SourceConfig{{SourceID: src}}, 3*time.Second) // slow, within the request timeout
	waitFor(t, 10*time.Second, "the new start under way", func() bool { return next.Pending() > 0 })
	// The worker has seen the new session (it sent the start on it): its status says so.
	waitFor(t, 2*time.Second, "status no longer active for the publication gone", func() bool {
		st := readStatus(t, f)
		return !(st.State == reconciler.StateActive && st.PublicationID == old)
	})
	if len(next.Publications()) != 0 {
		t.Fatal("the start was served already: the check above proved nothing")
	}
	waitFor(t, 15*time.Second, "status active on the new server", func() bool {
		st := readStatus(t, f)
		return st.State == reconciler.StateActive && st.PublicationID != old && st.PublicationID != ""
	})
}
