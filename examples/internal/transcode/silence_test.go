package transcode_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
)

// A media server that goes silent and comes back with the same sessions still has the transcoder's
// publication: the transcoder keeps it (a stale snapshot says nothing of it), sends no second start,
// and reports it active again. Restarted (new sessions), the media server has ended it: the
// transcoder starts it again, once.
func TestPublicationKeptAcrossASilentMediaServer(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	g := &simtest.Gate{}
	s := simtest.ReplaceSim(t, f.Env, []sim.SourceConfig{{SourceID: src}}, g)
	opts := capabilities.TrackerOptions{ResyncInterval: 100 * time.Millisecond, FetchTimeout: 200 * time.Millisecond}
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 5 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Capabilities: opts})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	first, _ := readyPublication(f)
	active := func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), `"state":"active"`)
	}
	waitFor(t, 10*time.Second, "status active", active)

	probe := capabilities.NewTracker(f.Connect(t, "coordinator"), opts) // tells when the silence reads as stale
	if err := probe.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer probe.Stop()
	g.SetCut(true)
	waitFor(t, 10*time.Second, "the silence read as stale", probe.Stale)
	g.SetCut(false)
	waitFor(t, 10*time.Second, "current again", func() bool { return !probe.Stale() })
	waitFor(t, 10*time.Second, "status active again", active)
	if pubs := s.Publications(); len(pubs) != 1 || pubs[0].ID != first.ID {
		t.Fatalf("publications after the silence: %+v, want only %s", pubs, first.ID)
	}
	if n := simtest.CountCommands(s, svc, string(capabilities.CommandStartPublication)); n != 1 {
		t.Fatalf("%d start_publication for one publication across a silence", n)
	}

	s = simtest.ReplaceSim(t, f.Env, []sim.SourceConfig{{SourceID: src}}, nil)
	waitFor(t, 10*time.Second, "published on the new session", func() bool { _, ok := readyPublication(f); return ok })
	if n := simtest.CountCommands(s, svc, string(capabilities.CommandStartPublication)); n != 1 {
		t.Fatalf("%d start_publication after the restart, want 1", n)
	}
	if _, err := f.Admin.Get(t.Context(), ns, "leases/front-door-video-browser-h264-720p"); err != nil {
		t.Fatalf("the lease after the restart: %v", err)
	}
}
