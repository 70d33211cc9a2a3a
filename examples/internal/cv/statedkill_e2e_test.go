package cv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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

// Three CV workers share one intent while stated is killed (SIGKILL) and started again on the same
// data directory, with outages shorter and longer than the lease, the intent withdrawn just before a
// kill and made desired again while stated is away (the write lands at its return). At no time does
// the media server hold two subscriptions of cv (two workers running the job at once), and after each
// restart the job settles, within a bound: desired, one subscription, made by the lease's holder, which
// the status names as active; withdrawn, no subscription, no lease, a status that says stopped.
func TestCVWorkersAcrossStatedKills(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded NATS", true: "external NATS"}[external], func(t *testing.T) {
			cvAcrossKills(t, external)
		})
	}
}

func cvAcrossKills(t *testing.T, external bool) {
	const ttl = 2 * time.Second
	s, connect, sm, admin, co := startStatedEnv(t, external)
	tl := &timeline{}
	tap := &simtest.LogTap{}
	for _, id := range []string{"cv-1", "cv-2", "cv-3"} {
		w, err := cv.New(cv.Config{Conn: connect("cv"), Principal: "cv", WorkerID: id, LeaseTTL: ttl,
			EventEvery: 50 * time.Millisecond, Logger: slog.New(tap).With("worker", id), Capabilities: simtest.FastTracker,
			Events: func(kind, _, _ string) {
				if kind != "detection" {
					tl.add(id + " " + kind)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		simtest.Run(t, w.Run)
	}
	var mu sync.Mutex
	var doubles []string
	sctx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			if subs := cvSubs(sm); len(subs) > 1 {
				mu.Lock()
				doubles = append(doubles, fmt.Sprintf("%s %+v", time.Now().Format("15:04:05.000"), subs))
				mu.Unlock()
			}
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	desired := true
	write := func() {
		in := coordinator.SubscribeIntent(src, "video") // no variant: the stream's own
		in.Desired = desired
		in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
		deadline := time.Now().Add(30 * time.Second)
		for {
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := co.PutIntent(wctx, cvNS, intent, in)
			cancel()
			if err == nil {
				tl.add(fmt.Sprintf("STEP intent desired %v", desired))
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("put intent: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond) // a retry pause while stated is away, not a synchronisation
		}
	}
	check := func() string {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var st reconciler.ObservedStatus
		stE, err := admin.Get(cctx, cvNS, "status/front-door-people")
		if err == nil {
			_ = json.Unmarshal(stE.Document, &st)
		}
		var d wire.LeaseDocument
		le, lerr := admin.Get(cctx, cvNS, leaseKey)
		if lerr == nil {
			_ = json.Unmarshal(le.Document, &d)
		}
		subs := cvSubs(sm)
		what := fmt.Sprintf("desired %v: status %s (%v), lease %s (%v), subscriptions %+v", desired, stE.Document, err, le.Document, lerr, subs)
		if desired {
			if len(subs) == 1 && d.Holder != "" && st.Holder == d.Holder && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID {
				return ""
			}
			return what
		}
		if len(subs) == 0 && lerr != nil && (err != nil || st.State == reconciler.StateStopped) {
			return ""
		}
		return what
	}
	settle := func(what string) {
		t.Helper()
		var last string
		start := time.Now()
		if !simtest.Within(time.Minute, func() bool { last = check(); return last == "" }) {
			t.Fatalf("%s: not settled within a minute: %s\nevents:\n%s\nlogs:\n%s", what, last, tl, tap)
		}
		t.Logf("%s: settled in %v", what, time.Since(start).Round(time.Millisecond))
		tl.add("STEP settled: " + what)
	}
	write()
	settle("first job")
	for i, r := range []struct {
		name           string
		before, during bool // toggle desired just before the kill, or while stated is away
		outage         time.Duration
	}{
		{"short outage", false, false, 300 * time.Millisecond},
		{"long outage", false, false, ttl + time.Second},
		{"withdrawn before a long outage", true, false, ttl + time.Second},
		{"desired again during a long outage", false, true, ttl + time.Second},
		{"withdrawn during a short outage", false, true, 300 * time.Millisecond},
		{"desired again before a short outage", true, false, 300 * time.Millisecond},
	} {
		if r.before {
			desired = !desired
			write()
		}
		tl.add(fmt.Sprintf("STEP round %d (%s): kill", i, r.name))
		s.Kill()
		time.Sleep(r.outage) // the outage's length is what the round is about
		done := make(chan struct{})
		if r.during {
			desired = !desired
			go func() { defer close(done); write() }()
		} else {
			close(done)
		}
		s.Start()
		<-done
		settle(fmt.Sprintf("round %d (%s)", i, r.name))
		mu.Lock()
		d := doubles
		mu.Unlock()
		if len(d) > 0 {
			t.Fatalf("round %d (%s): two subscriptions of cv at once: %v\nevents:\n%s", i, r.name, d[:min(5, len(d))], tl)
		}
	}
}

// startStatedEnv starts the real stated (on an external NATS server, without credentials, when
// external), the media simulator and an admin coordinator, for the tests that kill or restore stated
// under CV workers; connect dials it as a principal ("cv" is an admin).
func startStatedEnv(t *testing.T, external bool) (s *e2e.Stated, connect func(principal string) *nats.Conn, sm *sim.Sim,
	admin *client.Client, co *coordinator.Coordinator) {
	t.Helper()
	const pw = "pw"
	cfg := e2e.Config{Principals: []e2e.Principal{
		{ID: "coordinator", Admin: true, Password: pw}, {ID: "media", Media: true, Password: pw}, {ID: "cv", Admin: true, Password: pw}}}
	if external {
		cfg.NATSURL = natstest.Start(t, natsserver.Options{}).ClientURL()
	}
	s = e2e.NewStated(t, cfg)
	s.Start()
	connect = func(principal string) *nats.Conn {
		opts := []nats.Option{nats.ReconnectWait(50 * time.Millisecond)}
		if !external {
			opts = append(opts, nats.UserInfo(principal, pw))
		}
		nc, err := client.Connect(s.URL(), principal, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	sm = sim.New(connect("media"), sim.Options{Sources: sim.Sources(src)})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := sm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sm.Stop)
	admin, err := client.New(connect("coordinator"), "coordinator", client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if co, err = coordinator.New(admin); err != nil {
		t.Fatal(err)
	}
	return s, connect, sm, admin, co
}
