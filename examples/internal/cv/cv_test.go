package cv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

const (
	src      = "front-door"
	variant  = "browser-h264-720p"
	cvNS     = "service/cv-a"
	intent   = "intents/front-door-people"
	leaseKey = "leases/front-door-people"
)

type fixture struct {
	*simtest.Env
	pub *capabilities.Commands
}

func setup(t *testing.T) *fixture {
	e := simtest.Start(t, sim.Sources(src), "transcoder-a", "cv")
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{Env: e, pub: pub}
}

func (f *fixture) publish(t *testing.T) {
	t.Helper()
	sess, _, _ := f.Sim.SessionID(src)
	if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
		VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "variant READY", func() bool {
		v, ok := f.Sim.Capabilities().Variant(src, "video", variant)
		return ok && v.State == capabilities.StateReady
	})
}

// events records the worker's narration in order.
type events struct {
	mu   sync.Mutex
	list [][2]string // kind, detail
}

func (e *events) add(kind, detail string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, [2]string{kind, detail})
}

// last returns the detail of the last event of kind.
func (e *events) last(kind string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.list) - 1; i >= 0; i-- {
		if e.list[i][0] == kind {
			return e.list[i][1]
		}
	}
	return ""
}

// after counts the events of kind after the first event of mark (-1: mark not seen).
func (e *events) after(mark, kind string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := slices.IndexFunc(e.list, func(ev [2]string) bool { return ev[0] == mark })
	if i < 0 {
		return -1
	}
	n := 0
	for _, ev := range e.list[i+1:] {
		if ev[0] == kind {
			n++
		}
	}
	return n
}

func (f *fixture) cvWorker(t *testing.T, id string) *events {
	t.Helper()
	ev := &events{}
	w, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: id, LeaseTTL: 3 * time.Second,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Events: func(kind, _, detail string) { ev.add(kind, detail) }})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, w.Run)
	return ev
}

func (f *fixture) modelIntent(t *testing.T, model string) {
	t.Helper()
	in := coordinator.SubscribeIntent(src, "video")
	in.VariantID = variant
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"` + model + `"}`)}
	if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
}

func cvSubs(s *sim.Sim) []sim.SubscriptionInfo {
	var out []sim.SubscriptionInfo
	for _, x := range s.Subscriptions() {
		if x.Principal == "cv" {
			out = append(out, x)
		}
	}
	return out
}

var waitFor = simtest.WaitFor

// The transcoder's publication is taken over (the demo's failover: the standby's start_publication
// replaces the dead worker's): the media server ends the subscriptions to the variant, and the CV
// worker subscribes again once the variant is READY. Also when its tracker never sees the PENDING
// generation (hidden: the announcements are lost; it learns only of the READY one after it, the
// variant as it was): the worker went on with the ended subscription then, since the snapshots it
// read showed the variant READY on the same session throughout.
func TestCVResubscribesAfterPublisherTakeover(t *testing.T) {
	for _, hidden := range []bool{false, true} {
		t.Run(fmt.Sprintf("hidden=%v", hidden), func(t *testing.T) {
			f := setup(t)
			f.publish(t)
			f.cvWorker(t, "cv-1")
			f.modelIntent(t, "person-detector")
			waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
			first := cvSubs(f.Sim)[0].ID
			f.Sim.SuppressChanged(hidden)
			f.publish(t)
			if hidden {
				f.Sim.SuppressChanged(false)
				if err := f.Sim.Announce(); err != nil { // the generation after the gap
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "cv subscribed again", func() bool {
				subs := cvSubs(f.Sim)
				return len(subs) == 1 && subs[0].ID != first
			})
		})
	}
}

// The coordinator assigns another model profile: the worker runs the new one.
func TestCVAppliesAModelChange(t *testing.T) {
	f := setup(t)
	f.publish(t)
	ev := f.cvWorker(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "person-detector", func() bool { return ev.last("cv subscribed") == "model person-detector on "+variant })
	f.modelIntent(t, "car-detector")
	waitFor(t, 10*time.Second, "car-detector", func() bool { return ev.last("cv subscribed") == "model car-detector on "+variant })
}

// The worker's lease is taken away and claimed by another holder: the worker stops emitting as soon as
// it learns it lost the lease, and lets the job go (its subscription ends).
func TestCVStopsWhenItsLeaseIsLost(t *testing.T) {
	f := setup(t)
	f.publish(t)
	ev := f.cvWorker(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "detections", func() bool { return ev.last("detection") != "" })
	if _, err := f.Admin.Delete(t.Context(), wire.DeleteRequest{Namespace: cvNS, Key: leaseKey}); err != nil {
		t.Fatal(err)
	}
	other, _ := client.New(f.Connect(t, "cv"), "cv")
	l, err := lease.Claim(t.Context(), other, lease.Options{Namespace: cvNS, Key: leaseKey, Holder: "cv-2", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	waitFor(t, 10*time.Second, "cv-1 learns it lost", func() bool { return ev.after("cv lease lost", "detection") >= 0 })
	waitFor(t, 10*time.Second, "cv-1 lets the job go", func() bool { return len(cvSubs(f.Sim)) == 0 })
	if n := ev.after("cv lease lost", "detection"); n != 0 {
		t.Fatalf("cv-1 emitted %d detections after it learned it had lost the lease", n)
	}
}

func TestMain(m *testing.M) {
	if url := os.Getenv(stallHelperEnv); url != "" {
		os.Exit(runStallHelper(url))
	}
	e2e.Main(m) // the tests, then the removal of the stated binary it built, then goleak
}

// twoStreams starts a source with two video streams, video and cam2, and variant READY on both.
func twoStreams(t *testing.T) *fixture {
	t.Helper()
	e := simtest.Start(t, []sim.SourceConfig{{SourceID: src, Streams: []sim.StreamConfig{
		{StreamID: "video", MediaKind: "video", Codec: "h264"}, {StreamID: "cam2", MediaKind: "video", Codec: "h264"},
	}}}, "transcoder-a", "cv")
	pub, err := capabilities.NewCommands(e.Connect(t, "transcoder-a"), "transcoder-a")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{Env: e, pub: pub}
	sess, _, _ := f.Sim.SessionID(src)
	for _, stream := range []string{"video", "cam2"} {
		if _, err := f.pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: stream,
			VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "both variants READY", func() bool {
		a, okA := f.Sim.Capabilities().Variant(src, "video", variant)
		b, okB := f.Sim.Capabilities().Variant(src, "cam2", variant)
		return okA && okB && a.State == capabilities.StateReady && b.State == capabilities.StateReady
	})
	return f
}

// An intent that names its stream (stream_id) is served on that stream, not on the first stream of
// its media kind: here the source has two video streams and the variant exists on both.
func TestCVSubscribesToTheIntentsStream(t *testing.T) {
	f := twoStreams(t)
	f.cvWorker(t, "cv-1")
	in := coordinator.SubscribeIntent(src, "video")
	in.StreamID, in.VariantID = "cam2", variant
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
	if s := cvSubs(f.Sim)[0]; s.StreamID != "cam2" {
		t.Fatalf("cv subscribed to stream %q, the intent names cam2", s.StreamID)
	}
}

// A worker that loses its lease while a media command is under way sends no further command for the
// job: here the model changes, the unsubscribe of the old model's subscription is slow, and the lease
// goes to another holder meanwhile. A subscribe after that would run the job twice.
func TestCVNoSubscribeAfterTheLeaseIsLost(t *testing.T) {
	f := setup(t)
	f.publish(t)
	ev := f.cvWorker(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
	f.Sim.SetCommandDelay(3 * time.Second)
	f.modelIntent(t, "car-detector")
	waitFor(t, 10*time.Second, "the unsubscribe under way", func() bool { return f.Sim.Pending() > 0 })
	ttl := int64(60_000)
	if _, err := f.Admin.Put(t.Context(), wire.PutRequest{Namespace: cvNS, Key: leaseKey, Schema: wire.SchemaLease,
		Document: []byte(`{"holder":"cv-2","claimed_at_ms":1}`), TTLMs: &ttl}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv-1 learns it lost", func() bool { return ev.after("cv lease lost", "") >= 0 || ev.after("cv stopped", "") >= 0 })
	f.Sim.SetCommandDelay(0)
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	waitFor(t, 10*time.Second, "no subscription of cv left", func() bool { return len(cvSubs(f.Sim)) == 0 })
	subscribes := 0
	for _, c := range f.Sim.Commands() {
		if c.Principal == "cv" && c.Command == capabilities.CommandSubscribe {
			subscribes++
		}
	}
	if subscribes != 1 {
		t.Fatalf("%d subscribes, want only the first: cv-1 subscribed after it lost the lease", subscribes)
	}
}

// A graceful stop that comes while the subscribe is on its way to a slow media server ends the
// subscription that subscribe makes: the worker waits for the answer instead of abandoning a
// subscription it would never know of.
func TestCVStopDuringASubscribeEndsIt(t *testing.T) {
	f := setup(t)
	f.publish(t)
	stop := f.runCV(t, "cv-1", 3*time.Second)
	f.Sim.SetCommandDelay(2 * time.Second)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "the subscribe under way", func() bool { return f.Sim.Pending() > 0 })
	stop()
	f.Sim.SetCommandDelay(0)
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if subs := cvSubs(f.Sim); len(subs) != 0 {
		t.Fatalf("subscriptions left after the worker stopped: %+v", subs)
	}
}

// A standby worker takes the job over soon after the holder lets its lease go (a graceful stop
// deletes it): it tries its claim again at each resync (every 2 s), not only once per TTL. The TTL
// here is far longer than the wait, so a standby that waited out the TTL would not be in time.
func TestCVStandbyTakesOverWhenTheLeaseGoes(t *testing.T) {
	f := setup(t)
	f.publish(t)
	stops := map[string]func(){}
	for _, id := range []string{"cv-1", "cv-2"} {
		w, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: id, LeaseTTL: 60 * time.Second,
			EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		stops[id] = simtest.Run(t, w.Run)
	}
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "one worker subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
	holder := func() string {
		e, err := f.Admin.Get(t.Context(), cvNS, leaseKey)
		if err != nil {
			return ""
		}
		var d wire.LeaseDocument
		_ = json.Unmarshal(e.Document, &d)
		return d.Holder
	}
	first := holder()
	if stops[first] == nil {
		t.Fatalf("lease holder %q", first)
	}
	stops[first]()
	waitFor(t, 10*time.Second, "the standby subscribed", func() bool {
		h := holder()
		return h != "" && h != first && len(cvSubs(f.Sim)) == 1
	})
}

// An intent without variant_id (optional in keeppeek.media-intent.v1) runs the model on the stream's
// own variant, which a subscribe without variant_id gets (SPEC section 12).
func TestCVRunsOnTheOriginalVariant(t *testing.T) {
	f := setup(t)
	f.cvWorker(t, "cv-1")
	in := coordinator.SubscribeIntent(src, "video")
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	if _, err := f.Coord.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "cv subscribed to the original variant", func() bool {
		subs := cvSubs(f.Sim)
		return len(subs) == 1 && subs[0].VariantID == sim.OriginalVariantID
	})
}

// runCV runs a CV worker without narration; the stop it returns stops it gracefully and waits.
func (f *fixture) runCV(t *testing.T, id string, ttl time.Duration) (stop func()) {
	t.Helper()
	w, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: id, LeaseTTL: ttl,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return simtest.Run(t, w.Run)
}

func (f *fixture) leaseGone(t *testing.T, key string) bool {
	_, err := f.Admin.Get(t.Context(), cvNS, key)
	return errors.Is(err, wire.ErrNotFound)
}

// A graceful stop that comes while the unsubscribe of an intent turned undesired is on its way to a
// slow media server still lets the job go: its lease is released, not left to its TTL (the job is no
// longer in the worker's list, so the stop itself would not release it).
func TestCVStopDuringAnUnsubscribeReleasesTheLease(t *testing.T) {
	f := setup(t)
	f.publish(t)
	stop := f.runCV(t, "cv-1", 60*time.Second)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
	f.Sim.SetCommandDelay(2 * time.Second)
	if _, err := f.Coord.SetDesired(t.Context(), cvNS, intent, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the unsubscribe under way", func() bool { return f.Sim.Pending() > 0 })
	stop()
	f.Sim.SetCommandDelay(0)
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if subs := cvSubs(f.Sim); len(subs) != 0 {
		t.Fatalf("subscriptions left after the worker stopped: %+v", subs)
	}
	if !f.leaseGone(t, leaseKey) {
		t.Fatal("the lease was left to its TTL")
	}
}

// A graceful stop on a slow media server ends every job: each unsubscribe and lease release gets the
// time its requests need, instead of one deadline shared by them all that left the last ones unsent.
func TestCVStopEndsEveryJobOnASlowMediaServer(t *testing.T) {
	f := setup(t)
	f.publish(t)
	stop := f.runCV(t, "cv-1", 60*time.Second)
	models := []string{"people", "cars", "parcels"}
	for _, m := range models {
		in := coordinator.SubscribeIntent(src, "video")
		in.VariantID = variant
		in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"` + m + `-detector"}`)}
		if _, err := f.Coord.PutIntent(t.Context(), cvNS, "intents/front-door-"+m, in); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "three jobs subscribed", func() bool { return len(cvSubs(f.Sim)) == len(models) })
	f.Sim.SetCommandDelay(2500 * time.Millisecond)
	stop()
	f.Sim.SetCommandDelay(0)
	waitFor(t, 20*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	if subs := cvSubs(f.Sim); len(subs) != 0 {
		t.Errorf("subscriptions left after the worker stopped: %+v", subs)
	}
	for _, m := range models {
		if !f.leaseGone(t, "leases/front-door-"+m) {
			t.Errorf("the lease of %s was left to its TTL", m)
		}
	}
}

// A subscribe the media server answers only after the command's timeout still makes a subscription:
// the worker, which tried again, ends the one it gave up on when its late answer comes, instead of
// leaving it on the media server unknown to anyone.
func TestCVEndsASubscriptionAnsweredTooLate(t *testing.T) {
	f := setup(t)
	f.publish(t)
	ev := f.cvWorker(t, "cv-1")
	f.Sim.SetCommandDelay(capabilities.DefaultRequestTimeout + time.Second)
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "the subscribe under way", func() bool { return f.Sim.Pending() > 0 })
	f.Sim.SetCommandDelay(0) // the first subscribe still waits out its delay; the retry does not
	waitFor(t, 20*time.Second, "cv subscribed", func() bool { return ev.last("cv subscribed") != "" })
	waitFor(t, 10*time.Second, "every command answered", func() bool { return f.Sim.Pending() == 0 })
	waitFor(t, 10*time.Second, "one subscription of cv left", func() bool { return len(cvSubs(f.Sim)) == 1 })
}

// A lease TTL the store cannot take, or a non-positive detection period, is refused by New: the TTL
// was accepted (the worker ran "ready" while every claim failed, for ever), and a negative
// EventEvery panicked the worker's goroutine at its first subscription.
func TestNewRefusesOptionsThatCannotWork(t *testing.T) {
	f := setup(t)
	for _, c := range []struct {
		ttl, every time.Duration
	}{{500 * time.Millisecond, 0}, {-time.Second, 0}, {25 * time.Hour, 0}, {0, -time.Second}} {
		_, err := cv.New(cv.Config{Conn: f.Connect(t, "cv"), Principal: "cv", WorkerID: "cv-opts", LeaseTTL: c.ttl, EventEvery: c.every})
		if err == nil {
			t.Errorf("LeaseTTL %v, EventEvery %v: New accepted them", c.ttl, c.every)
		}
	}
}
