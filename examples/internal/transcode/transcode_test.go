package transcode_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/reconciler"
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
	f.runTranscoder(t, id, 2*time.Second)
}

// runTranscoder runs a transcoder with lease TTL ttl; the stop it returns stops it gracefully and waits.
func (f *fixture) runTranscoder(t *testing.T, id string, ttl time.Duration) (stop func()) {
	t.Helper()
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: id, Service: svc,
		LeaseTTL: ttl, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return simtest.Run(t, tr.Run)
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

func TestMain(m *testing.M) { e2e.Main(m) } // the tests, the removal of the stated binary, goleak

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
	stop := f.runTranscoder(t, "tx-1", 2*time.Second)
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

// startTx1 runs the worker tx-1 (lease TTL 2 s, heartbeats every 200 ms) on a connection of its own,
// and returns kill: it closes that connection (nothing more reaches the servers, the lease is not
// released) and stops the worker.
func startTx1(t *testing.T, f *fixture) (kill func()) {
	t.Helper()
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
	return func() { nc.Close(); cancel() }
}

// The lease holder dies while its start_publication is under way; the media server still carries the
// start out. The standby takes over once the lease expires: in the end one publication, the standby's,
// READY and reported active by it.
func TestHolderKilledMidStart(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	kill := startTx1(t, f)
	f.Sim.SetCommandDelay(time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1's start under way", func() bool { return f.Sim.Pending() > 0 })
	kill()
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

// leaseGone reports whether the lease entry of the test's intent is gone from the store.
func (f *fixture) leaseGone(t *testing.T, leaseKey string) bool {
	_, err := f.Admin.Get(t.Context(), ns, leaseKey)
	return errors.Is(err, wire.ErrNotFound)
}

// statusOf returns the status document of an intent key, "" if there is none.
func (f *fixture) statusOf(t *testing.T, intentKey string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := f.Admin.Get(ctx, ns, "status/"+strings.TrimPrefix(intentKey, "intents/"))
	if err != nil {
		return ""
	}
	return string(e.Document)
}

// A graceful stop that comes while the stop_publication of an intent turned undesired is on its way
// to a slow media server still finishes that intent's work: its status says stopped (not the active
// of a publication that is gone) and its lease is released, not left to its TTL.
func TestStopDuringAStopOfThePublicationFinishesIt(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	stop := f.runTranscoder(t, "tx-1", 60*time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })
	f.Sim.SetCommandDelay(2 * time.Second)
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stop_publication under way", func() bool { return f.Sim.Pending() > 0 })
	stop()
	f.Sim.SetCommandDelay(0)
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Fatalf("publications left after the transcoder stopped: %+v", pubs)
	}
	if st := f.statusOf(t, key); !strings.Contains(st, `"state":"stopped"`) {
		t.Errorf("status of the undesired intent after the stop: %s", st)
	}
	if !f.leaseGone(t, "leases/front-door-video-browser-h264-720p") {
		t.Error("the lease was left to its TTL")
	}
}

// A graceful stop on a slow media server stops every publication the transcoder holds, each with the
// time a command needs: one shared deadline for them all left the last ones unsent, their
// publications holding their variants after the transcoder had gone. Every lease is released.
func TestStopEndsEveryPublicationOnASlowMediaServer(t *testing.T) {
	variants := []string{"browser-h264-720p", "browser-h264-480p", "browser-h264-360p"}
	f := setup(t, sim.SourceConfig{SourceID: src})
	stop := f.runTranscoder(t, "tx-1", 60*time.Second)
	keys := make([]string, len(variants))
	for i, v := range variants {
		in := coordinator.PublishIntent(src, "video", "disabled")
		in.VariantID, in.OutputProfile = v, v
		keys[i] = "intents/front-door-video-" + v
		if _, err := f.Coord.PutIntent(t.Context(), ns, keys[i], in); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 15*time.Second, "every status active", func() bool {
		for _, k := range keys {
			if !strings.Contains(f.statusOf(t, k), `"state":"active"`) {
				return false
			}
		}
		return true
	})
	f.Sim.SetCommandDelay(2500 * time.Millisecond)
	stop()
	f.Sim.SetCommandDelay(0)
	waitFor(t, 20*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Errorf("publications left after the transcoder stopped: %+v", pubs)
	}
	for i, k := range keys {
		// A stop answered within the command's timeout says stopped; one answered later (the media
		// server queues them) was not known to have stopped anything when the worker went: its
		// status names the publication, for whoever takes the intent up next to end.
		if st := f.statusOf(t, k); !strings.Contains(st, `"state":"stopped"`) &&
			!(strings.Contains(st, `"state":"pending"`) && strings.Contains(st, `"publication_id":"pub-`)) {
			t.Errorf("status of %s after the stop: %s", k, st)
		}
		if !f.leaseGone(t, "leases/front-door-video-"+variants[i]) {
			t.Errorf("the lease of %s was left to its TTL", k)
		}
	}
}

// A start_publication the media server answers only after the command's timeout still makes a
// publication. The intent is deleted meanwhile, so no later start replaces it: the transcoder stops
// the publication when the late answer comes, instead of leaving it to hold the variant for good.
func TestPublicationStartedTooLateIsStopped(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	f.Sim.SetCommandDelay(capabilities.DefaultRequestTimeout + time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the start under way", func() bool { return f.Sim.Pending() > 0 })
	f.Sim.SetCommandDelay(0)
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the start answered", func() bool {
		for _, c := range f.Sim.Commands() {
			if c.Command == capabilities.CommandStartPublication {
				return true
			}
		}
		return false
	})
	waitFor(t, 10*time.Second, "no publication left", func() bool { return f.Sim.Pending() == 0 && len(f.Sim.Publications()) == 0 })
}

// The transcoder's publication goes while the source's session stays (stopped by its id by another
// process of the principal: an operator, an old lease holder): the capabilities no longer show the
// variant, and the transcoder starts it again instead of waiting for ever for a publication that is
// gone.
func TestPublicationGoneIsStartedAgain(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })
	p, ok := readyPublication(f)
	if !ok {
		t.Fatal("no READY publication")
	}
	other, err := capabilities.NewCommands(f.Connect(t, svc), svc)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.StopPublication(t.Context(), p.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "a new publication READY, reported active", func() bool {
		q, ok := readyPublication(f)
		st := f.statusOf(t, key)
		return ok && q.ID != p.ID && strings.Contains(st, `"state":"active"`) && strings.Contains(st, q.ID)
	})
}

// The intent changes its output variant (a new lease) while the media server is slow to stop the old
// publication: the standby claims the new lease and reports its publication active before the old
// holder has let the old output go. The old holder's "stopped", written under the old lease, must
// not bury the new holder's "active": the status is the new output's, and the new holder does not
// write it again while nothing changes.
func TestOutputChangeKeepsTheNewHoldersStatus(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	var mu sync.Mutex
	var events []transcode.Event
	for _, id := range []string{"tx-1", "tx-2"} {
		tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: id, Service: svc,
			LeaseTTL: 60 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			Events: func(e transcode.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		simtest.Run(t, tr.Run)
	}
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })
	var first reconciler.ObservedStatus
	if err := json.Unmarshal([]byte(f.statusOf(t, key)), &first); err != nil {
		t.Fatal(err)
	}
	// Hold the media server's stop_publication queue: a stop sent now waits 3 s, and the old holder's
	// stop of its publication waits behind it. Starts are served at once.
	other, err := capabilities.NewCommands(f.Connect(t, svc), svc)
	if err != nil {
		t.Fatal(err)
	}
	f.Sim.SetCommandDelay(3 * time.Second)
	blocker := make(chan error, 1)
	go func() { blocker <- other.StopPublication(context.Background(), "pub-none") }()
	waitFor(t, 10*time.Second, "the queue held", func() bool { return f.Sim.Pending() > 0 })
	f.Sim.SetCommandDelay(0)
	const next = "browser-h264-480p"
	in := coordinator.PublishIntent(src, "video", "disabled")
	in.VariantID, in.OutputProfile = next, next
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, in); err != nil {
		t.Fatal(err)
	}
	stoppedBy := func(worker string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == "stopped" && e.WorkerID == worker {
				return true
			}
		}
		return false
	}
	waitFor(t, 15*time.Second, "the old holder let the old output go", func() bool { return stoppedBy(first.Holder) })
	<-blocker
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("status: %s; publications: %+v", f.statusOf(t, key), f.Sim.Publications())
		}
	})
	waitFor(t, 10*time.Second, "the new output's status, active", func() bool {
		var st reconciler.ObservedStatus
		_ = json.Unmarshal([]byte(f.statusOf(t, key)), &st)
		return st.State == reconciler.StateActive && st.VariantID == next
	})
}

// Source and variant ids may each be 128 bytes (SPEC section 13), so the lease key of an output can
// outgrow a key's 256 bytes: the transcoder still claims a valid key for it (shortened with a hash)
// and publishes, instead of retrying a claim the store refuses for ever without a word of status.
func TestLongIdsStillGetALease(t *testing.T) {
	long := strings.Repeat("s", 128)
	longVariant := "browser-h264-720p-" + strings.Repeat("v", 110)
	f := setup(t, sim.SourceConfig{SourceID: long})
	f.transcoder(t, "tx-1")
	in := coordinator.PublishIntent(long, "video", "disabled")
	in.VariantID, in.OutputProfile = longVariant, "browser-h264-720p"
	const k = "intents/long"
	if _, err := f.Coord.PutIntent(t.Context(), ns, k, in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "status active", func() bool { return strings.Contains(f.statusOf(t, k), `"state":"active"`) })
	lk := transcode.LeaseKey(reconciler.MediaIntent{SourceID: long, MediaKind: "video", VariantID: longVariant})
	if !wire.ValidKey(lk) {
		t.Fatalf("LeaseKey %q is not a valid key", lk)
	}
	if _, err := f.Admin.Get(t.Context(), ns, lk); err != nil {
		t.Fatalf("lease %s: %v", lk, err)
	}
	other := transcode.LeaseKey(reconciler.MediaIntent{SourceID: long, MediaKind: "video", VariantID: longVariant + "x"})
	if other == lk {
		t.Fatal("two outputs share a shortened lease key")
	}
}

// A lease TTL the store cannot take (under 1 s, negative, over 24 h) is refused by New: it was
// accepted, and the worker ran "ready" while every reconcile failed on its lease claim, retried for
// ever, and the intents were never acted on.
func TestNewRefusesALeaseTTLTheStoreCannotTake(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	for _, ttl := range []time.Duration{500 * time.Millisecond, -time.Second, 25 * time.Hour} {
		_, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-ttl", Service: svc, LeaseTTL: ttl})
		if err == nil || !strings.Contains(err.Error(), "TTL") {
			t.Errorf("LeaseTTL %v: New returned %v, want an error naming the TTL", ttl, err)
		}
	}
}
