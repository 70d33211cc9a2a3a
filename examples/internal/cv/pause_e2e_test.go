package cv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// timeline records a worker's events with when they came.
type timeline struct {
	mu   sync.Mutex
	list []helperEvent
}

func (l *timeline) add(kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, helperEvent{at: time.Now(), kind: kind})
}

// since reports whether an event of kind came at or after t.
func (l *timeline) since(kind string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.list {
		if e.kind == kind && !e.at.Before(t) {
			return true
		}
	}
	return false
}

func (l *timeline) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, e := range l.list {
		if e.kind != "detection" {
			fmt.Fprintf(&b, "%s %s\n", e.at.Format("15:04:05.000"), e.kind)
		}
	}
	return b.String()
}

// A lone CV worker whose state server hangs (SIGSTOP) for longer than its lease loses the lease and
// lets its job go; once the state server answers again it claims the lease anew, ends the
// subscription its status still names and runs the job again: the intent is still desired and
// nobody else holds it (the reported "lone worker stays stuck after losing its lease"). The intent
// names no variant (the stream's own, which no transcoder publishes), so no capability change follows
// the hang: only the worker's own retries bring the job back. With stated's embedded NATS server the
// hang silences the media server too (the unsubscribe of the lost job goes unanswered until the
// return); on an external NATS server only the store hangs.
func TestCVLoneWorkerRunsTheJobAgainAfterTheStateServerHangs(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded NATS", true: "external NATS"}[external], func(t *testing.T) {
			loneWorkerAfterAHang(t, external)
		})
	}
}

// statedEnv is the real stated binary (on an external NATS server when external: a hang of stated
// then leaves the media server answering), a media simulator with the source src, and a coordinator.
type statedEnv struct {
	s       *e2e.Stated
	sim     *sim.Sim
	admin   *client.Client
	co      *coordinator.Coordinator
	connect func(principal string) *nats.Conn
}

func newStatedEnv(t *testing.T, external bool) *statedEnv {
	const pw = "pw"
	cfg := e2e.Config{Principals: []e2e.Principal{
		{ID: "coordinator", Admin: true, Password: pw}, {ID: "media", Media: true, Password: pw}, {ID: "cv", Admin: true, Password: pw}}}
	if external {
		cfg.NATSURL = natstest.Start(t, natsserver.Options{}).ClientURL()
	}
	env := &statedEnv{s: e2e.NewStated(t, cfg)}
	env.s.Start()
	env.connect = func(principal string) *nats.Conn {
		opts := []nats.Option{nats.ReconnectWait(50 * time.Millisecond)}
		if !external { // an external NATS server has no users
			opts = append(opts, nats.UserInfo(principal, pw))
		}
		nc, err := client.Connect(env.s.URL(), principal, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	env.sim = sim.New(env.connect("media"), sim.Options{Sources: sim.Sources(src)})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := env.sim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.sim.Stop)
	var err error
	if env.admin, err = client.New(env.connect("coordinator"), "coordinator"); err != nil {
		t.Fatal(err)
	}
	if env.co, err = coordinator.New(env.admin); err != nil {
		t.Fatal(err)
	}
	return env
}

// run runs a CV worker configured so, and puts the intent it serves: the stream's own variant of
// src (which no transcoder publishes) with the person-detector model.
func (env *statedEnv) run(t *testing.T, cfg cv.Config) {
	w, err := cv.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, w.Run)
	in := coordinator.SubscribeIntent(src, "video") // no variant: the stream's own
	in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
	if _, err := env.co.PutIntent(t.Context(), cvNS, intent, in); err != nil {
		t.Fatal(err)
	}
}

func loneWorkerAfterAHang(t *testing.T, external bool) {
	env := newStatedEnv(t, external)
	s, sm, admin, connect := env.s, env.sim, env.admin, env.connect
	tl := &timeline{}
	const ttl = time.Second
	env.run(t, cv.Config{Conn: connect("cv"), Principal: "cv", WorkerID: "cv-1", LeaseTTL: ttl,
		EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Events: func(kind, _, _ string) { tl.add(kind) }})

	// running is the job's subscription when the worker runs it alone under its lease and says so.
	running := func() (string, string) {
		var st reconciler.ObservedStatus
		if e, err := admin.Get(t.Context(), cvNS, "status/front-door-people"); err == nil {
			_ = json.Unmarshal(e.Document, &st)
		}
		var holder string
		if e, err := admin.Get(t.Context(), cvNS, leaseKey); err == nil {
			var d wire.LeaseDocument
			_ = json.Unmarshal(e.Document, &d)
			holder = d.Holder
		}
		subs := cvSubs(sm)
		what := fmt.Sprintf("status %+v, lease holder %q, subscriptions %+v", st, holder, subs)
		if len(subs) == 1 && holder == "cv-1" && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID {
			return subs[0].ID, what
		}
		return "", what
	}
	var first, last string
	if !simtest.Within(10*time.Second, func() bool { first, last = running(); return first != "" }) {
		t.Fatalf("the worker does not run the job: %s\nevents:\n%s", last, tl)
	}

	paused := time.Now()
	s.Pause()
	waitFor(t, 10*time.Second, "the lease lost while the state server hangs", func() bool { return tl.since("cv lease lost", paused) })
	// The hang goes on past the lease's TTL in the store too (the worker loses it locally first, by
	// a safety margin): the length of the hang is what the test is about, not a wait for an event.
	time.Sleep(ttl + ttl/2)
	resumed := time.Now()
	s.Resume()

	var again string
	if !simtest.Within(20*time.Second, func() bool { again, last = running(); return again != "" && again != first }) {
		t.Fatalf("the lone worker does not run the job again within 20 s of the state server's return: %s\nevents:\n%s", last, tl)
	}
	if !tl.since("cv stopped", paused) || !tl.since("cv subscribed", resumed) {
		t.Fatalf("the job was not let go and subscribed afresh:\n%s", tl)
	}
}
