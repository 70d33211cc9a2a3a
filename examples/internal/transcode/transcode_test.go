package transcode_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

const (
	svc     = "transcoder-a"
	ns      = "service/" + svc
	src     = "front-door"
	variant = "browser-h264-720p"
	key     = "intents/front-door-video-browser-h264-720p"
)

type fixture struct {
	env   *testenv.Env
	sim   *sim.Sim
	coord *coordinator.Coordinator
	admin *client.Client
}

func setup(t *testing.T, srcCfg sim.SourceConfig) *fixture {
	t.Helper()
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{
		{ID: "coordinator", Admin: true}, {ID: svc, Admin: true}, {ID: "media", Admin: false}}})
	s := sim.New(env.Connect(t, "media"), sim.Options{Sources: []sim.SourceConfig{srcCfg}, ReadyDelay: 50 * time.Millisecond})
	sctx, scancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer scancel()
	if err := s.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	admin, _ := client.New(env.Connect(t, "coordinator"), "coordinator")
	co, err := coordinator.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{env: env, sim: s, coord: co, admin: admin}
}

func (f *fixture) transcoder(t *testing.T, id string) {
	t.Helper()
	tr, err := transcode.New(transcode.Config{Conn: f.env.Connect(t, svc), Principal: svc, WorkerID: id, Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func publishIntent(mode string) coordinator.MediaIntent {
	in := coordinator.PublishIntent(src, "video", mode)
	in.VariantID, in.OutputProfile = variant, variant
	return in
}

func readyPublication(f *fixture) (sim.PublicationInfo, bool) {
	for _, p := range f.sim.Publications() {
		if v, ok := f.sim.Capabilities().Variant(src, "video", p.VariantID); ok && v.State == capabilities.StateReady {
			return p, true
		}
	}
	return sim.PublicationInfo{}, false
}

// The coordinator changes the desired recording mode of a running publication: the transcoder must
// The intent's recording_mode changes: the transcoder stops its publication and starts one with the
// new mode.
func TestRecordingModeChangeIsApplied(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	if _, err := f.coord.PutIntent(t.Context(), ns, key, publishIntent("required")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "one publication, recording required", func() bool {
		pubs := f.sim.Publications()
		return len(pubs) == 1 && pubs[0].RecordingMode == "required"
	})
}

// An intent changes role from publish to subscribe: the transcoder stops its publication and releases
// its lease (it is no longer the transcoder's to do).
func TestRoleChangeStopsThePublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	sub := coordinator.SubscribeIntent(src, "video")
	sub.VariantID = variant
	if _, err := f.coord.PutIntent(t.Context(), ns, key, sub); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no publication and no lease", func() bool {
		_, err := f.admin.Get(t.Context(), ns, "leases/front-door-video-browser-h264-720p")
		return len(f.sim.Publications()) == 0 && errors.Is(err, wire.ErrNotFound)
	})
}

// The capabilities say the source allows recording "required" only; an intent asking "disabled" can
// never succeed: the transcoder reports it failed without sending a start_publication (SPEC 12).
func TestRecordingModeCheckedAgainstCapabilities(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src, RecordingModes: []string{"required"}})
	f.transcoder(t, "tx-1")
	if _, err := f.coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a failed status", func() bool {
		e, err := f.admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), string(capabilities.CodeRecordingModeInvalid))
	})
	for _, c := range f.sim.Commands() {
		if c.Command == capabilities.CommandStartPublication {
			t.Fatalf("a start_publication was sent that the capabilities rule out (recording_modes [required]): %+v", c)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
