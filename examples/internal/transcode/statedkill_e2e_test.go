package transcode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// killEnv is the real stated binary (its store killed and started again on the same data directory),
// a media simulator, a coordinator, and three transcoders of one service, all in this process but
// stated.
type killEnv struct {
	t        *testing.T
	s        *e2e.Stated
	external bool
	sim      *sim.Sim
	admin    *client.Client
	coord    *coordinator.Coordinator
	ns       string
	intents  map[string]wire.Entry // intent key -> as last written
	logs     *simtest.LogTap

	mu         sync.Mutex
	events     []string
	violations []string
}

const (
	killSvc = "transcoder-a"
	killTTL = 2 * time.Second
	// settleWithin bounds the wait for the workers to settle after a step: a bound against a hang,
	// far above the seconds it takes (a cache learns a killed stated's return within two check
	// intervals), for a machine running every test package at once.
	settleWithin = time.Minute
	killPW       = "pw"
)

var killSources = []string{"k-door", "k-yard"}

func killIntentKey(src string) string { return "intents/" + src + "-video" }

func newKillEnv(t *testing.T, external bool) *killEnv {
	cfg := e2e.Config{Principals: []e2e.Principal{{ID: "coordinator", Admin: true, Password: killPW},
		{ID: "media", Media: true, Password: killPW}, {ID: killSvc, Admin: true, Password: killPW}}}
	if external {
		cfg.NATSURL = natstest.Start(t, natsserver.Options{}).ClientURL()
	}
	k := &killEnv{t: t, s: e2e.NewStated(t, cfg), external: external, ns: "service/" + killSvc,
		intents: map[string]wire.Entry{}, logs: &simtest.LogTap{}}
	k.s.Start()
	k.sim = sim.New(k.connect("media"), sim.Options{Sources: sim.Sources(killSources...), ReadyDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := k.sim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.sim.Stop)
	var err error
	if k.admin, err = client.New(k.connect("coordinator"), "coordinator", client.WithRequestTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	if k.coord, err = coordinator.New(k.admin); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *killEnv) connect(principal string) *nats.Conn {
	opts := []nats.Option{nats.ReconnectWait(50 * time.Millisecond)}
	if !k.external {
		opts = append(opts, nats.UserInfo(principal, killPW))
	}
	nc, err := client.Connect(k.s.URL(), principal, opts...)
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(nc.Close)
	return nc
}

func (k *killEnv) transcoder(id string) {
	tr, err := transcode.New(transcode.Config{Conn: k.connect(killSvc), Principal: killSvc, WorkerID: id, Service: killSvc,
		LeaseTTL: killTTL, HeartbeatInterval: 200 * time.Millisecond, Capabilities: simtest.FastTracker,
		Logger: slog.New(k.logs).With("worker", id),
		Events: func(e transcode.Event) {
			k.mu.Lock()
			k.events = append(k.events, fmt.Sprintf("%s %s %s %s %s", time.Now().Format("15:04:05.000"), e.WorkerID, e.Kind, e.Intent, e.Detail))
			k.mu.Unlock()
		}})
	if err != nil {
		k.t.Fatal(err)
	}
	simtest.Run(k.t, tr.Run)
}

func (k *killEnv) step(format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events = append(k.events, time.Now().Format("15:04:05.000")+" STEP "+fmt.Sprintf(format, args...))
}

func (k *killEnv) history() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Join(k.events, "\n")
}

// write puts an intent, retrying while stated is away (a coordinator's write during the outage
// lands once stated is back).
func (k *killEnv) write(src string, fn func(in *coordinator.MediaIntent)) {
	key := killIntentKey(src)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e, err := k.coord.UpdateIntent(ctx, k.ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
			if cur == nil {
				in := coordinator.PublishIntent(src, "video", coordinator.RecordingDisabled)
				in.VariantID, in.OutputProfile = src+"-720p", "browser-h264-720p"
				cur = &in
			}
			fn(cur)
			return cur, nil
		})
		cancel()
		if err == nil {
			k.intents[key] = e
			k.step("intent %s -> rev %d %s", key, e.Revision, e.Document)
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("write intent %s: %v\n%s", key, err, k.history())
		}
		time.Sleep(100 * time.Millisecond) // a retry pause while stated is away, not a synchronisation
	}
}

// sample records, every few milliseconds until ctx ends, every moment a source has two publications.
func (k *killEnv) sample(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		per := map[string][]string{}
		for _, p := range k.sim.Publications() {
			per[p.SourceID] = append(per[p.SourceID], p.ID+"/"+p.VariantID)
		}
		for src, ids := range per {
			if len(ids) > 1 {
				k.mu.Lock()
				k.violations = append(k.violations, fmt.Sprintf("%s: %d publications of %s: %v", time.Now().Format("15:04:05.000"), len(ids), src, ids))
				k.mu.Unlock()
			}
		}
	}
}

// check says why the store and the media server are not settled on the latest intents ("" when they are).
func (k *killEnv) check(ctx context.Context) string {
	res, err := k.admin.List(ctx, wire.ListRequest{Namespace: k.ns, Limit: wire.MaxListLimit})
	if err != nil {
		return fmt.Sprintf("list: %v", err)
	}
	entries := map[string]wire.Entry{}
	for _, e := range res.Entries {
		entries[e.Key] = e
	}
	pubs, caps := k.sim.Publications(), k.sim.Capabilities()
	var why []string
	for _, src := range killSources {
		key := killIntentKey(src)
		want := k.intents[key]
		if got, ok := entries[key]; !ok || string(got.Document) != string(want.Document) {
			return fmt.Sprintf("intent %s is %s, written %s", key, got.Document, want.Document)
		}
		var in coordinator.MediaIntent
		_ = json.Unmarshal(want.Document, &in)
		var mine []sim.PublicationInfo
		for _, p := range pubs {
			if p.SourceID == src {
				mine = append(mine, p)
			}
		}
		var st reconciler.ObservedStatus
		stE, hasSt := entries["status/"+strings.TrimPrefix(key, "intents/")]
		if hasSt {
			_ = json.Unmarshal(stE.Document, &st)
		}
		var leases []string
		for kk, e := range entries {
			var d wire.LeaseDocument
			if strings.HasPrefix(kk, "leases/") && json.Unmarshal(e.Document, &d) == nil && strings.HasSuffix(d.Purpose, " "+key) {
				leases = append(leases, kk+" by "+d.Holder)
			}
		}
		if !in.Desired {
			if len(mine) != 0 || len(leases) != 0 || hasSt && st.State != reconciler.StateStopped {
				why = append(why, fmt.Sprintf("%s withdrawn: publications %+v, leases %v, status %s", key, mine, leases, stE.Document))
			}
			continue
		}
		if len(mine) != 1 || mine[0].VariantID != in.VariantID {
			why = append(why, fmt.Sprintf("%s: publications %+v, want one of %s", key, mine, in.VariantID))
			continue
		}
		v, ok := caps.Variant(src, "video", in.VariantID)
		if !ok || v.State != capabilities.StateReady {
			why = append(why, fmt.Sprintf("%s: variant %+v not READY", key, v))
			continue
		}
		if st.State != reconciler.StateActive || st.PublicationID != mine[0].ID {
			why = append(why, fmt.Sprintf("%s: status %s, want active on %s", key, stE.Document, mine[0].ID))
			continue
		}
		le, ok := entries[transcode.LeaseKey(reconciler.MediaIntent{SourceID: src, MediaKind: "video", VariantID: in.VariantID})]
		var d wire.LeaseDocument
		if !ok || json.Unmarshal(le.Document, &d) != nil || d.Holder != st.Holder || len(leases) != 1 {
			why = append(why, fmt.Sprintf("%s: leases %v, status holder %s", key, leases, st.Holder))
		}
	}
	return strings.Join(why, "; ")
}

// settle waits, for at most settleWithin after stated is back, until check holds.
func (k *killEnv) settle(what string) {
	k.t.Helper()
	var last string
	start := time.Now()
	defer func() { k.t.Logf("%s: settled in %v", what, time.Since(start).Round(time.Millisecond)) }()
	ok := simtest.Within(settleWithin, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		last = k.check(ctx)
		return last == ""
	})
	if !ok {
		k.t.Fatalf("%s: not settled within %v: %s\nhistory:\n%s\nlogs:\n%s", what, settleWithin, last, k.history(), k.logs.String())
	}
	k.step("settled: %s", what)
}

// Three transcoders serve two publish intents while stated is killed (SIGKILL) and started again on
// the same data directory, with outages shorter and longer than the lease TTL, and intents changed
// just before a kill and while stated is away (the coordinator's write lands once it is back). At no
// time may a source have two publications (the old holder's next to the new one's), and after each
// restart every intent is served again, within a bound, by exactly one worker whose lease and status
// say so; a withdrawn intent has no publication, no lease, and a status that says stopped.
func TestTranscodersAcrossStatedKills(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded NATS", true: "external NATS"}[external], func(t *testing.T) {
			transcodersAcrossKills(t, external)
		})
	}
}

func transcodersAcrossKills(t *testing.T, external bool) {
	k := newKillEnv(t, external)
	for _, id := range []string{"tx-1", "tx-2", "tx-3"} {
		k.transcoder(id)
	}
	k.firstPublications()
	otherVariant := func(in *coordinator.MediaIntent) {
		if strings.HasSuffix(in.VariantID, "-720p") {
			in.VariantID, in.OutputProfile = in.SourceID+"-480p", "browser-vp8-480p"
		} else {
			in.VariantID, in.OutputProfile = in.SourceID+"-720p", "browser-h264-720p"
		}
	}
	toggle := func(in *coordinator.MediaIntent) { in.Desired = !in.Desired }
	rounds := []struct {
		name   string
		before func() // just before the kill
		outage time.Duration
		while  func() // while stated is away (lands at its return)
	}{
		{"short outage", nil, 300 * time.Millisecond, nil},
		{"long outage", nil, killTTL + time.Second, nil},
		{"variant changed just before a short outage", func() { k.write(killSources[0], otherVariant) }, 300 * time.Millisecond, nil},
		{"withdrawn just before a long outage", func() { k.write(killSources[1], toggle) }, killTTL + time.Second, nil},
		{"desired again and variant changed during a long outage", nil, killTTL + time.Second, func() {
			k.write(killSources[1], toggle)
			k.write(killSources[0], otherVariant)
		}},
		{"withdrawn during a short outage", nil, 300 * time.Millisecond, func() { k.write(killSources[0], toggle) }},
	}
	for i, r := range rounds {
		if r.before != nil {
			r.before()
		}
		k.step("round %d (%s): kill stated", i, r.name)
		k.s.Kill()
		time.Sleep(r.outage) // the outage's length is what the round is about
		done := make(chan struct{})
		if r.while != nil {
			go func() { defer close(done); r.while() }()
		} else {
			close(done)
		}
		k.s.Start()
		k.step("round %d: stated started", i)
		<-done
		k.settle(fmt.Sprintf("round %d (%s)", i, r.name))
		k.mu.Lock()
		v := slices.Clone(k.violations)
		k.mu.Unlock()
		if len(v) > 0 {
			t.Fatalf("round %d (%s): two publications of one source at once: %v\nhistory:\n%s", i, r.name, v[:min(5, len(v))], k.history())
		}
	}
}

// Three transcoders serve two publish intents; stated is backed up, the intents change (one
// withdrawn, the other pointed at another variant) and are served so, then stated is restored from
// the backup (a new epoch: the store moved backwards). The workers must follow the restored store:
// the intents as they were at the backup are served again, by one worker each, with a lease and a
// status that say so, and nothing is left of what the later intents had published; at no time may a
// source have two publications.
func TestTranscodersAcrossARestore(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded NATS", true: "external NATS"}[external], func(t *testing.T) {
			transcodersAcrossARestore(t, external)
		})
	}
}

func transcodersAcrossARestore(t *testing.T, external bool) {
	k := newKillEnv(t, external)
	for _, id := range []string{"tx-1", "tx-2", "tx-3"} {
		k.transcoder(id)
	}
	k.firstPublications()
	k.step("backup")
	backup := k.s.OfflineBackup()
	k.settle("after the backup's restart")
	atBackup := maps.Clone(k.intents)
	k.write(killSources[0], func(in *coordinator.MediaIntent) { in.Desired = false })
	k.write(killSources[1], func(in *coordinator.MediaIntent) {
		in.VariantID, in.OutputProfile = in.SourceID+"-480p", "browser-vp8-480p"
	})
	k.settle("the changes")
	k.step("restore")
	k.s.Restore(backup)
	k.intents = atBackup
	k.settle("the restore")
	k.mu.Lock()
	v := slices.Clone(k.violations)
	k.mu.Unlock()
	if len(v) > 0 {
		t.Fatalf("two publications of one source at once: %v\nhistory:\n%s", v[:min(5, len(v))], k.history())
	}
}

// firstPublications starts sampling the media server for two publications of one source, for the
// rest of the test, and has every source's intent published and settled.
func (k *killEnv) firstPublications() {
	ctx, cancel := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() { defer close(sampled); k.sample(ctx) }()
	k.t.Cleanup(func() { cancel(); <-sampled })
	for _, src := range killSources {
		k.write(src, func(*coordinator.MediaIntent) {})
	}
	k.settle("first publications")
}
