package cv_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
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
// worker subscribes again once the variant is READY.
func TestCVResubscribesAfterPublisherTakeover(t *testing.T) {
	f := setup(t)
	f.publish(t)
	f.cvWorker(t, "cv-1")
	f.modelIntent(t, "person-detector")
	waitFor(t, 10*time.Second, "cv subscribed", func() bool { return len(cvSubs(f.Sim)) == 1 })
	first := cvSubs(f.Sim)[0].ID
	f.publish(t)
	waitFor(t, 10*time.Second, "cv subscribed again", func() bool {
		subs := cvSubs(f.Sim)
		return len(subs) == 1 && subs[0].ID != first
	})
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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
