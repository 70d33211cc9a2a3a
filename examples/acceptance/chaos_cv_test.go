package acceptance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// The CV chaos run's parameters. examples/cvworker has no flag for its lease TTL: it is the CV
// worker's own, 5 s, so the run is kept short and the stalls few. A standby claims a lease that is
// gone at its next look, and the CV worker looks at every intent every cvChaosResync: the failover
// bound after a SIGKILL of the holder is cvChaosTTL + cvChaosResync + cvChaosSlack, after a SIGTERM
// (the lease released) cvChaosResync + cvChaosSlack.
const (
	cvChaosService = "cx-cv"
	cvChaosTTL     = 5 * time.Second
	cvChaosResync  = 2 * time.Second
	cvChaosSlack   = 4 * time.Second
	cvChaosRun     = 30 * time.Second // no new step starts after that
)

var (
	cvChaosTranscoders = []string{"cx-1", "cx-2"} // one publishes each source's variant, the other stands by
	cvChaosWorkers     = []string{"cv-1", "cv-2", "cv-3"}
	cvChaosModels      = []string{"person-detector", "vehicle-detector", "package-detector"}
	// The CV intents, each on a variant of its own, so that the media server's subscriptions tell
	// whose they are: two on the transcoders' publications (TestChaos's first variants), one on a
	// source's own variant (no publisher: the intent names no variant).
	cvChaosIntents = []cvIntent{
		{"intents/cv-door", "cx-door", "cx-720p"},
		{"intents/cv-yard", "cx-yard", "cx-1080p"},
		{"intents/cv-door-raw", "cx-door", ""},
	}
)

// cvIntent is a model intent of the run: its key, and the source and variant it subscribes to.
type cvIntent struct{ key, source, variant string }

// target is the variant the media server's subscriptions of the intent are to.
func (ci cvIntent) target() string {
	if ci.variant == "" {
		return ci.source + "/" + sim.OriginalVariantID
	}
	return ci.source + "/" + ci.variant
}

func cvLeaseKey(intentKey string) string {
	return "leases/" + strings.TrimPrefix(intentKey, "intents/")
}

func cvModelParams(model string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"model_profile": model})
	return b
}

// cvModelOf is the model profile an intent assigns to the run's CV service.
func cvModelOf(in coordinator.MediaIntent) string {
	var p struct {
		ModelProfile string `json:"model_profile"`
	}
	_ = json.Unmarshal(in.Parameters[cvChaosService], &p)
	return p.ModelProfile
}

// TestChaosCV is TestChaos for the computer-vision worker: two examples/transcoder processes keep up
// a publication of each of two sources (one holds it, the other stands by), three examples/cvworker
// processes of one CV service compete for three model intents written through the coordinator (two
// on the publications, one on a source's own variant), and a seeded random sequence of steps hits
// them: the model changed, the intent withdrawn and desired again, a CV worker killed (SIGKILL or
// SIGTERM) and restarted, a CV lease holder stalled (SIGSTOP) past its lease and woken, the
// transcoder holding a publication killed (the standby takes over, and the media server ends the
// subscriptions of the publication it replaces), the media simulator restarted. The simulator's
// subscriptions are sampled all along, and every command it served is replayed at the end: at no
// time may a CV intent have two live subscriptions (nor a source two publications). At every quiet
// point the simulator and the store agree: a desired intent has exactly one subscription, its status
// says active, names it, the current model and the holder of the intent's lease (a live process),
// and a withdrawn intent has no subscription, no lease and no status but stopped. Stalls that catch
// the holder with a media command under way are measured, not failed: media commands carry no
// fencing token (SPEC 12). CHAOS_SEED=<n> replays a run.
func TestChaosCV(t *testing.T) {
	if testing.Short() {
		t.Skip("the CV chaos run takes about 40 s")
	}
	seed := chaosSeed(t, "TestChaosCV$")
	c := newCVChaos(t, seed)
	c.run()
}

// cvChaos is a chaos run (stated, the simulator's lives, the transcoders, the steps) with CV workers
// and model intents on top; the CV workers are among its processes. Its fields ns, state,
// violations, stallObs, samples, failover, sigterm, stalls and stallsDouble are the CV service's:
// chaos's of the same names are the transcoders'.
type cvChaos struct {
	*chaos
	ns      string // the CV service's namespace (chaos.ns is the transcoders')
	state   *recorder[wire.WatchMessage]
	written map[string]wire.Entry // CV intent key -> the entry of our latest write
	lives   []cvLife              // every CV worker process started, for the failure report

	// Guarded by chaos.mu.
	measuring  bool                 // a stall that may catch a media command under way
	windows    map[*simRun][][2]int // per simulator life: [from, to) command indexes of such stalls
	violations []string
	stallObs   []string
	samples    int

	failover, sigterm, takeover []time.Duration
	stalls, stallsDouble        [stallModes]int
}

type cvLife struct {
	id string
	p  *chaosProc
}

func newCVChaos(t *testing.T, seed uint64) *cvChaos {
	c := &cvChaos{chaos: newChaos(t, seed, cvChaosTranscoders), ns: "service/" + cvChaosService,
		written: map[string]wire.Entry{}, windows: map[*simRun][][2]int{}}
	c.workers = append(c.workers, cvChaosWorkers...)
	c.state = followAcked(t, c.e.admin, "cv-state", c.ns, "")
	t.Cleanup(c.report)
	for _, id := range cvChaosWorkers {
		c.startCV(id)
	}
	// Every CV worker competes from the first intent on.
	beats := followAcked(t, c.e.admin, "cv-workers", "system", "workers/transcoder-a/cv-")
	for _, id := range cvChaosWorkers {
		beats.waitFor(t, 0, id+"'s first heartbeat", func(m wire.WatchMessage) bool {
			return m.Kind == wire.UpdatePut && m.Key == wire.WorkerKey("transcoder-a", id)
		})
	}
	return c
}

func (c *cvChaos) startCV(id string) {
	p := &chaosProc{started: time.Now()}
	p.process = startExampleProcess(c.t, c.e, "cvworker", id, "--service", cvChaosService, "--health-listen", "")
	c.procs[id] = p
	c.lives = append(c.lives, cvLife{id, p})
}

// report, on failure, shows what the failure message cannot: every CV worker's log without its
// detections (those killed included), the CV namespace's history and the simulator's last commands.
func (c *cvChaos) report() {
	if !c.t.Failed() {
		return
	}
	for _, l := range c.lives {
		var lines []string
		for line := range strings.SplitSeq(l.p.out.String(), "\n") {
			if !strings.Contains(line, "msg=detection") && line != "" {
				lines = append(lines, line)
			}
		}
		c.t.Logf("--- %s started %s:\n%s", l.id, l.p.started.Format("15:04:05.000"), strings.Join(lines[max(0, len(lines)-120):], "\n"))
	}
	items := c.state.all()
	var b strings.Builder
	for _, it := range items[max(0, len(items)-150):] {
		m := it.V
		doc := ""
		if m.Entry != nil {
			doc = string(m.Entry.Document)
		}
		fmt.Fprintf(&b, "\n  %s rev %d %s %s %s", it.At.Format("15:04:05.000"), m.Revision, m.Kind, m.Key, doc)
	}
	c.t.Logf("--- %s history:%s", c.ns, b.String())
	c.mu.Lock()
	r := c.runs[len(c.runs)-1]
	c.mu.Unlock()
	cmds := r.s.Commands()
	b.Reset()
	for i := max(0, len(cmds)-80); i < len(cmds); i++ {
		fmt.Fprintf(&b, "\n  %d %s %s %s -> %+v", i, cmds[i].Principal, cmds[i].Command, cmds[i].Body, cmds[i].Reply)
	}
	c.t.Logf("--- the simulator's last commands (life %d):%s", len(c.runs)-1, b.String())
}

// checkAll is why the system is not settled: the transcoders' publications (chaos.check), then the
// CV intents (checkCV).
func (c *cvChaos) checkAll(ctx context.Context) string {
	if why := c.check(ctx); why != "" {
		return why
	}
	return c.checkCV(ctx)
}

// checkCV reports why the CV intents are not settled ("" when they are): what the simulator
// subscribes, the observed statuses, the leases and the intents as written.
func (c *cvChaos) checkCV(ctx context.Context) string {
	s := c.current()
	if s == nil {
		return "the simulator is stopped"
	}
	per := map[string][]sim.SubscriptionInfo{}
	for _, sub := range s.Subscriptions() {
		per[sub.SourceID+"/"+sub.VariantID] = append(per[sub.SourceID+"/"+sub.VariantID], sub)
	}
	res, err := c.e.admin.List(ctx, wire.ListRequest{Namespace: c.ns, Limit: wire.MaxListLimit})
	if err != nil {
		return fmt.Sprintf("list %s: %v", c.ns, err)
	}
	entries := map[string]wire.Entry{}
	for _, e := range res.Entries {
		entries[e.Key] = e
	}
	var why []string
	for _, ci := range cvChaosIntents {
		want := c.written[ci.key]
		got, ok := entries[ci.key]
		if !ok || got.Revision != want.Revision || string(got.Document) != string(want.Document) {
			// Nobody but the coordinator writes intents: a lost or changed write is no wait.
			c.fatalf("intent %s: %+v, want it as written at revision %d: %s", ci.key, got, want.Revision, want.Document)
		}
		var in coordinator.MediaIntent
		_ = json.Unmarshal(want.Document, &in)
		mine := per[ci.target()]
		delete(per, ci.target())
		var st reconciler.ObservedStatus
		stEntry, hasStatus := entries[statusKeyOf(ci.key)]
		if hasStatus {
			_ = json.Unmarshal(stEntry.Document, &st)
		}
		le, hasLease := entries[cvLeaseKey(ci.key)]
		var d wire.LeaseDocument
		if hasLease {
			_ = json.Unmarshal(le.Document, &d)
		}
		if !in.Desired {
			if len(mine) != 0 {
				why = append(why, fmt.Sprintf("%s withdrawn, subscriptions %+v", ci.key, mine))
			}
			if hasLease {
				why = append(why, fmt.Sprintf("%s withdrawn, lease %s", ci.key, le.Document))
			}
			if hasStatus && st.State != reconciler.StateStopped {
				why = append(why, fmt.Sprintf("%s withdrawn, status %s", ci.key, stEntry.Document))
			}
			continue
		}
		if len(mine) != 1 {
			why = append(why, fmt.Sprintf("%s: subscriptions %+v, want one", ci.key, mine))
			continue
		}
		sub := mine[0]
		if sub.Principal != "transcoder-a" {
			why = append(why, fmt.Sprintf("%s: subscription %+v, want the CV workers' (transcoder-a)", ci.key, sub))
			continue
		}
		model := cvModelOf(in)
		if st.State != reconciler.StateActive || st.SubscriptionID != sub.ID || st.VariantID != sub.VariantID || st.Message != "model "+model {
			why = append(why, fmt.Sprintf("%s: status %s, want active on %s with model %s", ci.key, stEntry.Document, sub.ID, model))
			continue
		}
		if !hasLease || d.Holder != st.Holder || d.Purpose != "cv "+ci.key {
			why = append(why, fmt.Sprintf("%s: lease %s, want held by the status's holder %s", ci.key, le.Document, st.Holder))
			continue
		}
		// A worker restarted under the same id claims anew: until then the lease, the status and the
		// subscription are its dead predecessor's.
		if p := c.procs[d.Holder]; p == nil || d.ClaimedAtMs < p.started.UnixMilli() || st.ObservedAtMs < d.ClaimedAtMs {
			why = append(why, fmt.Sprintf("%s: served by %s, which is gone (lease claimed at %d, status of %d)", ci.key, d.Holder, d.ClaimedAtMs, st.ObservedAtMs))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(per)) {
		why = append(why, fmt.Sprintf("subscriptions of no intent, to %s: %+v", t, per[t]))
	}
	return strings.Join(why, "; ")
}

// settleCV waits until checkAll holds, for at most within, and returns how long it took.
func (c *cvChaos) settleCV(what string, within time.Duration) time.Duration {
	return c.settleOn(c.checkAll, what, within)
}

// sampleCV records, every few milliseconds, how many subscriptions each CV intent (each variant) has
// on the serving simulator: more than one is a violation, unless a measured stall is under way.
func (c *cvChaos) sampleCV(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := c.current()
		if s == nil {
			continue
		}
		per := map[string][]string{}
		for _, sub := range s.Subscriptions() {
			per[sub.SourceID+"/"+sub.VariantID] = append(per[sub.SourceID+"/"+sub.VariantID], sub.ID)
		}
		c.mu.Lock()
		c.samples++
		for t, ids := range per {
			if len(ids) < 2 {
				continue
			}
			obs := fmt.Sprintf("%s sample: %d subscriptions to %s: %v", time.Now().Format("15:04:05.000"), len(ids), t, ids)
			if c.measuring {
				c.stallObs = append(c.stallObs, obs)
			} else {
				c.violations = append(c.violations, obs)
			}
		}
		c.mu.Unlock()
	}
}

// replayCV walks every command a simulator life served, in order, and reports each moment a variant
// (a CV intent) had two live subscriptions, outside and inside the measured windows. A publication
// started over one of the same variant (a takeover), or stopped, ends the subscriptions to it, as the
// simulator does.
func replayCV(r *simRun, windows [][2]int) (violations, measured []string) {
	live := map[string]string{} // subscription id -> source/variant
	pubs := map[string]string{} // publication id -> source/variant
	end := func(t string) {
		maps.DeleteFunc(live, func(_, v string) bool { return v == t })
	}
	for i, cmd := range r.s.Commands() {
		if !cmd.Reply.OK {
			continue
		}
		switch cmd.Command {
		case capabilities.CommandStartPublication:
			var req capabilities.StartPublicationRequest
			_ = json.Unmarshal(cmd.Body, &req)
			t := r.sessions[req.SessionID] + "/" + req.VariantID
			end(t)
			pubs[cmd.Reply.PublicationID] = t
		case capabilities.CommandStopPublication:
			var req capabilities.StopPublicationRequest
			_ = json.Unmarshal(cmd.Body, &req)
			if t, ok := pubs[req.PublicationID]; ok {
				end(t)
				delete(pubs, req.PublicationID)
			}
		case capabilities.CommandSubscribe:
			var req capabilities.SubscribeRequest
			_ = json.Unmarshal(cmd.Body, &req)
			t := r.sessions[req.SessionID] + "/" + cmd.Reply.VariantID
			live[cmd.Reply.SubscriptionID] = t
			var ids []string
			for id, u := range live {
				if u == t {
					ids = append(ids, id)
				}
			}
			if len(ids) > 1 {
				slices.Sort(ids)
				obs := fmt.Sprintf("command %d: %d subscriptions to %s: %v", i, len(ids), t, ids)
				if slices.ContainsFunc(windows, func(w [2]int) bool { return i >= w[0] && i < w[1] }) {
					measured = append(measured, obs)
				} else {
					violations = append(violations, obs)
				}
			}
		case capabilities.CommandUnsubscribe:
			var req capabilities.UnsubscribeRequest
			_ = json.Unmarshal(cmd.Body, &req)
			delete(live, req.SubscriptionID)
		}
	}
	return violations, measured
}

// putCV writes a model intent through the coordinator, as `coordinator model` does.
func (c *cvChaos) putCV(ci cvIntent, model string) {
	in := coordinator.SubscribeIntent(ci.source, coordinator.MediaKindVideo)
	in.VariantID = ci.variant
	in.Parameters = map[string]json.RawMessage{cvChaosService: cvModelParams(model)}
	e, err := c.e.coord.PutIntent(bounded(c.t), c.ns, ci.key, in)
	if err != nil {
		c.fatalf("put intent %s: %v", ci.key, err)
	}
	c.written[ci.key] = e
	c.step("intent %s -> rev %d %s", ci.key, e.Revision, e.Document)
}

// Changes of a CV intent.
const (
	cvToggle = iota // withdrawn, or desired again
	cvModel         // another model profile
)

// changeCV writes a change of the intent through the coordinator.
func (c *cvChaos) changeCV(ci cvIntent, what int) {
	skip := 1 + c.rng.IntN(len(cvChaosModels)-1) // drawn here: the update may run its function again
	e, err := c.e.coord.UpdateIntent(bounded(c.t), c.ns, ci.key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		if cur == nil {
			return nil, fmt.Errorf("intent %s is gone", ci.key)
		}
		switch what {
		case cvToggle:
			cur.Desired = !cur.Desired
		case cvModel:
			i := slices.Index(cvChaosModels, cvModelOf(*cur))
			cur.Parameters = maps.Clone(cur.Parameters)
			cur.Parameters[cvChaosService] = cvModelParams(cvChaosModels[(i+skip)%len(cvChaosModels)])
		}
		return cur, nil
	})
	if err != nil {
		c.fatalf("update intent %s: %v", ci.key, err)
	}
	c.written[ci.key] = e
	c.step("intent %s -> rev %d %s", ci.key, e.Revision, e.Document)
}

func (c *cvChaos) randomIntent() cvIntent { return cvChaosIntents[c.rng.IntN(len(cvChaosIntents))] }

// changeRandom writes a random change of a random CV intent.
func (c *cvChaos) changeRandom() { c.changeCV(c.randomIntent(), c.rng.IntN(2)) }

// heldIntent picks a random desired CV intent whose lease a running CV worker holds, and that worker.
func (c *cvChaos) heldIntent() (cvIntent, string) {
	ci := c.randomIntent()
	var in coordinator.MediaIntent
	if json.Unmarshal(c.written[ci.key].Document, &in) != nil || !in.Desired {
		return ci, ""
	}
	e, err := c.e.admin.Get(bounded(c.t), c.ns, cvLeaseKey(ci.key))
	if errors.Is(err, wire.ErrNotFound) {
		return ci, ""
	}
	if err != nil {
		c.fatalf("get the lease of %s: %v", ci.key, err)
	}
	var d wire.LeaseDocument
	if json.Unmarshal(e.Document, &d) != nil || c.procs[d.Holder] == nil {
		return ci, ""
	}
	return ci, d.Holder
}

func (c *cvChaos) run() {
	ctx, cancel := context.WithCancel(context.Background())
	sampled := make(chan struct{}, 2)
	go func() {
		defer func() { sampled <- struct{}{} }()
		c.sample(ctx)
	}()
	go func() {
		defer func() { sampled <- struct{}{} }()
		c.sampleCV(ctx)
	}()
	stopSampling := func() {
		if cancel != nil {
			cancel()
			<-sampled
			<-sampled
			cancel = nil
		}
	}
	defer stopSampling()

	for i, src := range chaosSources { // the publications, as TestChaos starts them
		in := publishIntent(src, chaosVariants[i].variant, coordinator.RecordingDisabled)
		in.OutputProfile = chaosVariants[i].profile
		e, err := c.e.coord.PutIntent(bounded(c.t), c.chaos.ns, chaosIntentKey(src), in)
		if err != nil {
			c.fatalf("put intent: %v", err)
		}
		c.intents[chaosIntentKey(src)] = e
		c.step("intent %s -> rev %d %s", chaosIntentKey(src), e.Revision, e.Document)
	}
	for i, ci := range cvChaosIntents {
		c.putCV(ci, cvChaosModels[i%len(cvChaosModels)])
	}
	c.settleCV("first subscriptions", settleTimeout)
	end := time.Now().Add(cvChaosRun)
	for n := 0; time.Now().Before(end); n++ {
		// What held at the last quiet point still holds: nothing changed since but the cadence.
		c.pause(500 * time.Millisecond)
		if why := c.checkAll(bounded(c.t)); why != "" {
			c.fatalf("step %d: the settled state changed by itself: %s", n, why)
		}
		switch k := c.rng.IntN(10); {
		case k < 4:
			c.blowsCV(n)
		case k < 6:
			c.killCVHolder(n)
		case k < 8:
			c.stallCV(n)
		case k < 9:
			c.killTranscoder(n)
		default:
			c.restartSimCV(n)
		}
		c.mu.Lock()
		v := slices.Concat(c.chaos.violations, c.violations)
		c.mu.Unlock()
		if len(v) > 0 {
			c.fatalf("step %d: two publications of a source or two subscriptions of a CV intent at once: %v", n, v[:min(len(v), 5)])
		}
	}
	stopSampling()
	c.mu.Lock()
	runs := slices.Clone(c.runs)
	c.mu.Unlock()
	var measured []string
	for i, r := range runs {
		if v, _ := r.replay(); len(v) > 0 {
			c.fatalf("simulator life %d: two publications of one source: %v", i, v)
		}
		v, m := replayCV(r, c.windows[r])
		if len(v) > 0 {
			c.fatalf("simulator life %d: two subscriptions of one CV intent: %v", i, v)
		}
		measured = append(measured, m...)
	}
	c.t.Logf("chaos seed %d: %d steps, %d samples; CV failover after SIGKILL of the holder %v (bound %v), after SIGTERM %v (bound %v); "+
		"publication takeovers %v; stalls (idle, busy, in flight) %v, of which with two subscriptions of one intent %v: %d samples and %d commands with two",
		c.seed, len(c.steps), c.samples, c.failover, cvChaosTTL+cvChaosResync+cvChaosSlack, c.sigterm, cvChaosResync+cvChaosSlack,
		c.takeover, c.stalls, c.stallsDouble, len(c.stallObs), len(measured))
	for _, o := range append(c.stallObs[:min(len(c.stallObs), 5)], measured...) {
		c.t.Logf("  stall: %s", o)
	}
}

// blowsCV is one to three random blows in a row, a short cadence apart, then a quiet point: a model
// changed, an intent withdrawn or desired again, a CV worker or a transcoder killed (SIGKILL or
// SIGTERM) and restarted now or after the quiet point, the simulator restarted.
func (c *cvChaos) blowsCV(n int) {
	var down []string
	for range 1 + c.rng.IntN(3) {
		switch k := c.rng.IntN(6); {
		case k < 2:
			c.changeCV(c.randomIntent(), cvModel)
		case k == 2:
			c.changeCV(c.randomIntent(), cvToggle)
		case k < 5:
			ids := cvChaosWorkers // one CV worker stays to serve
			if k == 4 {
				ids = cvChaosTranscoders // a transcoder is killed only with its standby up
			}
			if id, ok := c.killOne(n, ids, c.restart); !ok {
				c.changeRandom()
			} else if id != "" {
				down = append(down, id)
			}
		default:
			c.bounceSim(n)
		}
		c.pause(300 * time.Millisecond)
	}
	// The intents settle before the workers killed are back: the others serve.
	d := c.settleCV(fmt.Sprintf("step %d", n), settleTimeout)
	c.step("step %d: settled in %v", n, d.Round(time.Millisecond))
	for _, id := range down {
		c.step("step %d: restart %s", n, id)
		c.restart(id)
	}
}

// restart starts the worker id again, a transcoder or a CV worker.
func (c *cvChaos) restart(id string) {
	if slices.Contains(cvChaosTranscoders, id) {
		c.startProc(id)
	} else {
		c.startCV(id)
	}
}

// killCVHolder kills the CV worker holding a desired intent's lease, SIGKILL or SIGTERM, and
// measures the failover: the time until another worker (or the same one, restarted) serves it.
func (c *cvChaos) killCVHolder(n int) {
	ci, id := c.heldIntent()
	if id == "" {
		c.changeCV(ci, cvToggle) // nothing to fail over: desired again instead
		c.settleCV(fmt.Sprintf("step %d", n), settleTimeout)
		return
	}
	sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[c.rng.IntN(2)]
	restart := c.rng.IntN(3) == 0
	c.step("step %d: %v CV holder %s of %s (restart at once: %v)", n, sig, id, ci.key, restart)
	at := time.Now()
	c.signal(id, sig)
	if restart {
		c.startCV(id)
	}
	c.settleCV(fmt.Sprintf("step %d: failover after %v of %s", n, sig, id), settleTimeout)
	d := time.Since(at)
	c.step("step %d: failed over in %v", n, d.Round(time.Millisecond))
	bound := cvChaosResync + cvChaosSlack
	if sig == syscall.SIGKILL {
		bound += cvChaosTTL
		c.failover = append(c.failover, d.Round(time.Millisecond))
	} else {
		c.sigterm = append(c.sigterm, d.Round(time.Millisecond))
	}
	if d > bound {
		c.fatalf("step %d: failover after %v of the CV holder took %v, want within %v", n, sig, d, bound)
	}
	if !restart {
		c.step("step %d: restart %s", n, id)
		c.startCV(id)
	}
}

// killTranscoder kills the transcoder holding a publication, SIGKILL or SIGTERM: the standby
// publishes the variant anew, the media server ends the subscriptions of the publication it
// replaces, and the CV holder subscribes again once the new one is READY.
func (c *cvChaos) killTranscoder(n int) {
	src := chaosSources[c.rng.IntN(len(chaosSources))]
	id := c.holderOf(src)
	if id == "" || c.procs[id] == nil || len(c.up(cvChaosTranscoders)) < 2 {
		c.changeRandom()
		c.settleCV(fmt.Sprintf("step %d", n), settleTimeout)
		return
	}
	sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[c.rng.IntN(2)]
	c.step("step %d: %v transcoder %s, holder of %s", n, sig, id, src)
	at := time.Now()
	c.signal(id, sig)
	c.settleCV(fmt.Sprintf("step %d: takeover after %v of %s", n, sig, id), settleTimeout)
	d := time.Since(at)
	c.takeover = append(c.takeover, d.Round(time.Millisecond))
	c.step("step %d: taken over, CV settled, in %v; restart %s", n, d.Round(time.Millisecond), id)
	c.startProc(id)
}

// restartSimCV stops the media simulator for a while and starts a new one (new sessions, no
// publications, no subscriptions): the transcoders publish again, the CV holders subscribe again.
func (c *cvChaos) restartSimCV(n int) {
	c.step("step %d: simulator stopped", n)
	c.stopSim()
	if c.rng.IntN(2) == 0 {
		c.changeRandom() // written while the media server is away
	}
	c.pause(1500 * time.Millisecond)
	c.startSim(c.runs[len(c.runs)-1].s.Generation())
	d := c.settleCV(fmt.Sprintf("step %d: simulator restarted", n), settleTimeout)
	c.step("step %d: simulator started, settled in %v", n, d.Round(time.Millisecond))
}

// stallCV stops a CV lease holder (SIGSTOP) for longer than its lease and wakes it (SIGCONT), in one
// of the stall modes of TestChaos: idle (its intent may change while it is stopped), busy (stopped
// just after a model change of its intent), in flight (stopped while its subscribe waits on a slow
// media server). A stall in the last two may catch a media command under way, which no lease fences
// (SPEC 12): what the simulator does then is measured, not failed, from the stop until the quiet
// point after the wake. An idle stall is held to the invariant.
func (c *cvChaos) stallCV(n int) {
	ci, id := c.heldIntent()
	if id == "" {
		c.changeCV(ci, cvToggle)
		c.settleCV(fmt.Sprintf("step %d", n), settleTimeout)
		return
	}
	mode := c.rng.IntN(stallModes)
	c.mu.Lock()
	c.measuring = mode != stallIdle
	r := c.runs[len(c.runs)-1]
	from := len(r.s.Commands())
	obs := len(c.stallObs)
	c.mu.Unlock()
	switch mode {
	case stallBusy:
		c.changeCV(ci, cvModel)
	case stallInFlight:
		// The model changes: the holder ends its subscription and subscribes anew, and the media
		// server takes 300 ms per command: the unsubscribe, then the subscribe, wait in turn.
		r.s.SetCommandDelay(300 * time.Millisecond)
		c.changeCV(ci, cvModel)
		c.pause(100 * time.Millisecond)
		time.Sleep(350 * time.Millisecond) // the cadence: past the unsubscribe, into the subscribe
	}
	c.step("step %d: SIGSTOP CV holder %s of %s (mode %d)", n, id, ci.key, mode)
	c.signal(id, syscall.SIGSTOP)
	stoppedAt := time.Now()
	r.s.SetCommandDelay(0)
	woken := false
	defer func() {
		if !woken {
			_ = c.procs[id].cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	stallFor := cvChaosTTL + time.Duration(c.rng.Int64N(int64(time.Second))) // past the lease
	if mode == stallInFlight || (mode == stallIdle && c.rng.IntN(2) == 0) {
		time.Sleep(time.Duration(c.rng.Int64N(int64(stallFor)))) // the cadence
		c.changeCV(ci, c.rng.IntN(2))                            // written while the holder is stopped
	}
	time.Sleep(time.Until(stoppedAt.Add(stallFor))) // the stall
	c.step("step %d: SIGCONT %s", n, id)
	c.signal(id, syscall.SIGCONT)
	woken = true
	d := c.settleCV(fmt.Sprintf("step %d: after the stall of %s", n, id), settleTimeout)
	c.step("step %d: settled %v after the wake (%v after the stop)", n, d.Round(time.Millisecond), time.Since(stoppedAt).Round(time.Millisecond))
	c.mu.Lock()
	c.measuring = false
	c.stalls[mode]++
	if len(c.stallObs) > obs {
		c.stallsDouble[mode]++
	}
	if mode != stallIdle && c.runs[len(c.runs)-1] == r {
		c.windows[r] = append(c.windows[r], [2]int{from, len(r.s.Commands())})
	}
	c.mu.Unlock()
}
