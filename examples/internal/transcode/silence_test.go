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

// publishingBehindAGate runs a transcoder whose tracker notices a silence fast, against a simulator
// whose network g can cut, and puts a publish intent. The transcoder logs to h, nil: nowhere.
func publishingBehindAGate(t *testing.T, h slog.Handler) (*fixture, *simtest.Gate, *sim.Sim) {
	if h == nil {
		h = slog.DiscardHandler
	}
	f := setup(t, sim.SourceConfig{SourceID: src})
	g := &simtest.Gate{}
	s := simtest.ReplaceSim(t, f.Env, []sim.SourceConfig{{SourceID: src}}, g)
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 5 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(h), Capabilities: simtest.FastTracker})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	return f, g, s
}

// A media server that goes silent and comes back with the same sessions still has the transcoder's
// publication: the transcoder keeps it (a stale snapshot says nothing of it), sends no second start,
// and reports it active again. Restarted (new sessions), the media server has ended it: the
// transcoder starts it again, once.
func TestPublicationKeptAcrossASilentMediaServer(t *testing.T) {
	f, g, s := publishingBehindAGate(t, nil)
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	first, _ := readyPublication(f)
	active := func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), `"state":"active"`)
	}
	waitFor(t, 10*time.Second, "status active", active)

	speak := g.Silence(t, f.Env)
	speak()
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

// An intent withdrawn while the media server is silent: the stop_publication reaches nobody, so the
// transcoder keeps the publication (its lease held, its status not "stopped") and stops it once the
// media server answers again, with the same session that still has it; only then is the lease
// released and the status stopped.
func TestWithdrawnIntentStopsThePublicationOnceTheMediaServerAnswers(t *testing.T) {
	f, g, s := publishingBehindAGate(t, nil)
	waitFor(t, 10*time.Second, "status active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })

	speak := g.Silence(t, f.Env)
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the withdrawal acted on", func() bool {
		st := f.statusOf(t, key)
		return strings.Contains(st, `"state":"stopped"`) || strings.Contains(st, "does not answer")
	})
	if st := f.statusOf(t, key); strings.Contains(st, `"state":"stopped"`) {
		t.Errorf("status %s while the publication is still on the media server", st)
	}
	if f.leaseGone(t, "leases/front-door-video-browser-h264-720p") {
		t.Error("lease released while the publication still holds the variant")
	}
	speak()
	waitFor(t, 10*time.Second, "the publication stopped once the media server answers", func() bool { return len(s.Publications()) == 0 })
	waitFor(t, 10*time.Second, "lease released and status stopped", func() bool {
		return f.leaseGone(t, "leases/front-door-video-browser-h264-720p") && strings.Contains(f.statusOf(t, key), `"state":"stopped"`)
	})
}

// While a withdrawn intent's stop_publication goes unanswered, the transcoder sends it again every
// second, for as long as the media server stays silent. It warned at every one of them, burying the
// log under one line a second. It warns once per outage, logs the repeats at Debug, and tells at
// Info when the media server answers again.
func TestTranscoderWarnsOncePerUnansweredStop(t *testing.T) {
	tap := &simtest.LogTap{}
	f, g, s := publishingBehindAGate(t, tap)
	waitFor(t, 10*time.Second, "status active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })
	speak := g.Silence(t, f.Env)
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "three unanswered stops", func() bool { return tap.Count("stop publication", slog.LevelDebug) >= 3 })
	if n := tap.Count("stop publication", slog.LevelWarn); n != 1 {
		t.Errorf("%d warnings for one unanswered stop_publication, want 1", n)
	}
	speak()
	waitFor(t, 10*time.Second, "the publication stopped once the media server answers", func() bool { return len(s.Publications()) == 0 })
	waitFor(t, 10*time.Second, "the recovery told", func() bool { return tap.Count("stop publication answered again", slog.LevelInfo) == 1 })
}
