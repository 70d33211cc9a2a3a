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
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
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
	*simtest.Env
}

func setup(t *testing.T, srcCfg sim.SourceConfig) *fixture {
	return &fixture{simtest.Start(t, []sim.SourceConfig{srcCfg}, svc)}
}

func (f *fixture) transcoder(t *testing.T, id string) {
	t.Helper()
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: id, Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
}

var waitFor = simtest.WaitFor

func publishIntent(mode string) coordinator.MediaIntent {
	in := coordinator.PublishIntent(src, "video", mode)
	in.VariantID, in.OutputProfile = variant, variant
	return in
}

func readyPublication(f *fixture) (sim.PublicationInfo, bool) {
	for _, p := range f.Sim.Publications() {
		if v, ok := f.Sim.Capabilities().Variant(src, "video", p.VariantID); ok && v.State == capabilities.StateReady {
			return p, true
		}
	}
	return sim.PublicationInfo{}, false
}

// The intent's recording_mode changes: the transcoder stops its publication and starts one with the
// new mode.
func TestRecordingModeChangeIsApplied(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("required")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "one publication, recording required", func() bool {
		pubs := f.Sim.Publications()
		return len(pubs) == 1 && pubs[0].RecordingMode == "required"
	})
}

// An intent changes role from publish to subscribe: the transcoder stops its publication and releases
// its lease (it is no longer the transcoder's to do).
func TestRoleChangeStopsThePublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	sub := coordinator.SubscribeIntent(src, "video")
	sub.VariantID = variant
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, sub); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no publication and no lease", func() bool {
		_, err := f.Admin.Get(t.Context(), ns, "leases/front-door-video-browser-h264-720p")
		return len(f.Sim.Publications()) == 0 && errors.Is(err, wire.ErrNotFound)
	})
}

// The capabilities say the source allows recording "required" only; an intent asking "disabled" can
// never succeed: the transcoder reports it failed without sending a start_publication (SPEC 12).
func TestRecordingModeCheckedAgainstCapabilities(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src, RecordingModes: []string{"required"}})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a failed status", func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), string(capabilities.CodeRecordingModeInvalid))
	})
	for _, c := range f.Sim.Commands() {
		if c.Command == capabilities.CommandStartPublication {
			t.Fatalf("a start_publication was sent that the capabilities rule out (recording_modes [required]): %+v", c)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A transcoder that loses its lease stops its own publication: left running it would hold the
// variant against the new holder.
func TestLostLeaseStopsThePublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	// Another holder's entry replaces tx-1's (an operator, or an expiry during a stall and a new claim):
	// tx-1's next renewal is refused.
	ttl := int64(60_000)
	if _, err := f.Admin.Put(t.Context(), wire.PutRequest{Namespace: ns, Key: "leases/front-door-video-browser-h264-720p",
		Schema: wire.SchemaLease, Document: []byte(`{"holder":"tx-2","claimed_at_ms":1}`), TTLMs: &ttl}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1's publication stopped", func() bool { return len(f.Sim.Publications()) == 0 })
}

// A transcoder that loses its lease while a media command is under way sends no further command for
// the intent: here the intent changes, its stop of the old publication is slow, and the lease goes to
// another holder meanwhile. A start after the stop would take the variant over from the new holder.
func TestNoStartAfterTheLeaseIsLost(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	stopped := make(chan string, 16)
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 1500 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Events: func(e transcode.Event) {
			if e.Kind == "stopped" {
				select {
				case stopped <- e.Detail:
				default:
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	f.Sim.SetCommandDelay(3 * time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("required")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stop of the old publication under way", func() bool { return f.Sim.Pending() > 0 })
	ttl := int64(60_000)
	if _, err := f.Admin.Put(t.Context(), wire.PutRequest{Namespace: ns, Key: "leases/front-door-video-browser-h264-720p",
		Schema: wire.SchemaLease, Document: []byte(`{"holder":"tx-2","claimed_at_ms":1}`), TTLMs: &ttl}); err != nil {
		t.Fatal(err)
	}
	select {
	case why := <-stopped:
		t.Logf("tx-1 stopped: %s", why)
	case <-time.After(30 * time.Second):
		t.Fatal("tx-1 never gave the intent up after losing its lease")
	}
	f.Sim.SetCommandDelay(0)
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	starts := 0
	for _, c := range f.Sim.Commands() {
		if c.Command == capabilities.CommandStartPublication {
			starts++
		}
	}
	if starts != 1 {
		t.Fatalf("%d publications started, want only the first: tx-1 sent a start after it lost the lease", starts)
	}
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Fatalf("publications left: %+v", pubs)
	}
}

// A graceful stop that comes while the start_publication is on its way to a slow media server stops
// the publication that start makes: the transcoder waits for the answer instead of abandoning a
// publication it would never know of, which would hold the variant for good.
func TestStopDuringAStartStopsThePublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stop := simtest.Run(t, tr.Run)
	f.Sim.SetCommandDelay(2 * time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the start under way", func() bool { return f.Sim.Pending() > 0 })
	stop()
	f.Sim.SetCommandDelay(0)
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Fatalf("publications left after the transcoder stopped: %+v", pubs)
	}
}

// The intent is deleted while its start_publication is under way (a slow media server): the
// publication that start creates is stopped, the lease released, and the status says stopped.
func TestIntentDeletedWhileThePublicationStarts(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	f.Sim.SetCommandDelay(time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the start under way", func() bool { return f.Sim.Pending() > 0 })
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "no publication, no lease, status stopped", func() bool {
		_, lerr := f.Admin.Get(t.Context(), ns, "leases/front-door-video-browser-h264-720p")
		e, serr := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return len(f.Sim.Publications()) == 0 && errors.Is(lerr, wire.ErrNotFound) && serr == nil &&
			strings.Contains(string(e.Document), `"state":"stopped"`)
	})
}

// The media server restarts (a new simulator with new sessions, counting generations on from the
// old one's) while a command is under way: the transcoder publishes again on the new server.
func TestMediaServerRestart(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	f.Sim.SetCommandDelay(10 * time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("required")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stop under way", func() bool { return f.Sim.Pending() > 0 })
	f.Sim.Stop() // the pending command is dropped, unanswered
	next := sim.New(f.Connect(t, "media"), sim.Options{Sources: []sim.SourceConfig{{SourceID: src}}, ReadyDelay: 50 * time.Millisecond,
		After: f.Sim.Generation()})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := next.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(next.Stop)
	waitFor(t, 20*time.Second, "a READY publication with recording required on the new server", func() bool {
		pubs := next.Publications()
		if len(pubs) != 1 || pubs[0].RecordingMode != "required" {
			return false
		}
		v, ok := next.Capabilities().Variant(src, "video", variant)
		return ok && v.State == capabilities.StateReady
	})
	waitFor(t, 10*time.Second, "status active", func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), `"state":"active"`)
	})
}

// The lease holder dies while its start_publication is under way; the media server still carries the
// start out. The standby takes over once the lease expires: in the end one publication, the standby's,
// READY and reported active by it.
func TestHolderKilledMidStart(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	nc := f.Connect(t, svc)
	tx1, err := transcode.New(transcode.Config{Conn: nc, Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tx1.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.Sim.SetCommandDelay(time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1's start under way", func() bool { return f.Sim.Pending() > 0 })
	nc.Close() // killed: nothing more reaches the servers, the lease is not released
	cancel()
	f.Sim.SetCommandDelay(0)
	f.transcoder(t, "tx-2")
	waitFor(t, 20*time.Second, "tx-2 active with one publication", func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		_, ready := readyPublication(f)
		return err == nil && strings.Contains(string(e.Document), `"state":"active"`) && strings.Contains(string(e.Document), `"holder":"tx-2"`) &&
			len(f.Sim.Publications()) == 1 && ready
	})
}

// The media server reports the publication FAILED, and then the intent is deleted: the failed
// publication is stopped too. Left behind it would hold the variant (FAILED, published by the
// principal) on the media server after nobody wants it.
func TestFailedPublicationIsStoppedWhenTheIntentGoes(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.Sim.SetFailing(sim.VariantRef{SourceID: src, StreamID: "video", VariantID: variant}, true)
	events := make(chan transcode.Event, 64)
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Events: func(e transcode.Event) {
			select {
			case events <- e:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for reported := false; !reported; {
		select {
		case e := <-events:
			reported = e.Kind == "status" && strings.HasPrefix(e.Detail, "failed the media server reports the variant FAILED")
		case <-timeout:
			t.Fatal("no failed status")
		}
	}
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the lease released", func() bool {
		_, err := f.Admin.Get(t.Context(), ns, "leases/front-door-video-browser-h264-720p")
		return errors.Is(err, wire.ErrNotFound)
	})
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Fatalf("publications left after the intent was deleted: %+v", pubs)
	}
}

// The source came back with a new session while the media server's announcements were lost: the
// transcoder's snapshot is behind, and the start it sends with the old session is refused
// (SOURCE_UNAVAILABLE). It then refreshes the capabilities and starts on the new session.
func TestStaleSessionIsRefreshedAfterARefusedStart(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "publication READY", func() bool { _, ok := readyPublication(f); return ok })
	f.Sim.SuppressChanged(true)
	for _, online := range []bool{false, true} {
		if err := f.Sim.SetOnline(src, online); err != nil {
			t.Fatal(err)
		}
	}
	f.Sim.SuppressChanged(false) // what follows is announced again; the new session never was
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("required")); err != nil {
		t.Fatal(err)
	}
	session, _, _ := f.Sim.SessionID(src)
	waitFor(t, 15*time.Second, "a publication on the new session, READY", func() bool {
		p, ok := readyPublication(f)
		return ok && p.SessionID == session && p.RecordingMode == "required"
	})
}
