package acceptance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// The chaos run's parameters. The failover bound is chaosTTL + failoverSlack: the lease expires at
// most TTL after the holder's last renewal (SPEC 6: its EXPIRE within 1 s of the deadline, target
// 100 ms), the standby claims at once, its publication is READY chaosReady later, and the status
// write follows the capability change.
const (
	chaosTTL      = 1500 * time.Millisecond
	chaosReady    = 200 * time.Millisecond
	chaosRun      = 35 * time.Second // no new step starts after that
	settleTimeout = 12 * time.Second
	failoverSlack = 3 * time.Second
	chaosService  = "cx-tx"
)

var (
	chaosSources  = []string{"cx-door", "cx-yard"}
	chaosVariants = []struct{ variant, profile string }{
		{"cx-720p", "browser-h264-720p"}, {"cx-1080p", "browser-h264-1080p"}, {"cx-480p", "browser-vp8-480p"},
	}
	chaosWorkers = []string{"cx-1", "cx-2", "cx-3"}
)

// chaosIntentKey is the one intent of a source: its key names no variant, so that a variant change
// is a change of the same intent.
func chaosIntentKey(source string) string { return "intents/" + source + "-video" }

// TestChaos is the product's promise under chaos, end to end: three examples/transcoder processes of
// one service with a short lease TTL, two publish intents, and a seeded random sequence of steps:
// intent changes through the coordinator (desired on and off, variant, profile and recording mode),
// a transcoder killed with SIGKILL or SIGTERM and restarted, the media simulator stopped and started
// again (a media server restart: its publications and sessions are gone), and a holder stalled with
// SIGSTOP past its lease. The simulator's publications are sampled all along, and every command it
// served is replayed at the end: at no time may an intent have two publications. At every quiet point
// the simulator and the store agree: the publication is the latest intent's, the status is active and
// names it and its holder (a live process holding the lease), and an intent that is not desired has
// no publication and no lease. CHAOS_SEED=<n> replays a run.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes about 45 s")
	}
	seed := chaosSeed(t, "TestChaos$")
	c := newChaos(t, seed, chaosWorkers)
	c.run()
}

// chaosProc is a running transcoder process and when it was started: a lease claimed before that is
// its predecessor's (same worker id), not its own.
type chaosProc struct {
	*process
	started time.Time
}

// simRun is one life of the media simulator: its sessions (to tell which source a start_publication
// is for) and the command ranges served while a holder was stalled.
type simRun struct {
	s        *sim.Sim
	sessions map[string]string // session id -> source id
	stalls   [][2]int          // [from, to) command indexes served during a stall window
}

type chaos struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	e    *env // stated, admin, coordinator; its sim field is unused (see runs)
	ns   string
	// state follows the service namespace: each update wakes the settle waits.
	state     *recorder[wire.WatchMessage]
	mediaConn *nats.Conn

	mu         sync.Mutex
	runs       []*simRun // every simulator life, the last one serving unless stopped
	serving    bool
	stalled    bool     // a holder is stopped (SIGSTOP) or has not settled since it woke
	violations []string // of the invariants that hold at all times
	stallObs   []string // what was seen while a holder was stalled (measured, SPEC 12)
	maxPubs    int      // most publications of one source in any sample outside a stall
	samples    int

	workers  []string              // every worker process's id, in the order their logs are shown
	procs    map[string]*chaosProc // worker id -> its running process; nil while it is down
	intents  map[string]wire.Entry // intent key -> the entry of our latest write
	steps    []string
	failover []time.Duration // SIGKILL of a holder -> settled again
	sigterm  []time.Duration // SIGTERM of a holder -> settled again
	stallMax int
	// per stall mode: how many stalls, and how many saw two publications of one intent
	stalls, stallsDouble [stallModes]int
	// the first and last sample of the current stall window that saw two publications of one intent
	doubleFrom, doubleTo time.Time
	// per stall that saw two: for how long, and until how long after the wake
	doubleFor, doubleAfterWake []time.Duration
}

// chaosSeed is the seed of the chaos run test (a -run pattern): CHAOS_SEED, else a new one. It is
// logged, and so is how to replay it if the test fails.
func chaosSeed(t *testing.T, test string) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED %q: %v", s, err)
		}
	}
	t.Logf("chaos seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d: replay with CHAOS_SEED=%d go test ./examples/acceptance -run '%s'", seed, seed, test)
		}
	})
	return seed
}

// newChaos starts stated, the simulator and a transcoder process for each of workers (ids cx-...).
func newChaos(t *testing.T, seed uint64, workers []string) *chaos {
	s := startStated(t, "")
	c := &chaos{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ns: "service/" + chaosService,
		workers: slices.Clone(workers), procs: map[string]*chaosProc{}, intents: map[string]wire.Entry{}}
	c.e = &env{stated: s, adminConn: connect(t, s, "coordinator")}
	var err error
	if c.e.admin, err = client.New(c.e.adminConn, "coordinator"); err != nil {
		t.Fatal(err)
	}
	if c.e.coord, err = coordinator.New(c.e.admin); err != nil {
		t.Fatal(err)
	}
	c.state = followAcked(t, c.e.admin, "cx-state", c.ns, "")
	c.mediaConn = connect(t, s, "media")
	c.startSim(0)
	t.Cleanup(func() {
		c.mu.Lock()
		r := c.runs[len(c.runs)-1]
		c.mu.Unlock()
		r.s.Stop() // before the media connection closes (cleanups are LIFO)
	})
	for _, id := range workers {
		c.startProc(id)
	}
	// Every worker competes from the first intent on.
	beats := followAcked(t, c.e.admin, "cx-workers", "system", "workers/transcoder-a/cx-")
	for _, id := range workers {
		beats.waitFor(t, 0, id+"'s first heartbeat", func(m wire.WatchMessage) bool {
			return m.Kind == wire.UpdatePut && m.Key == wire.WorkerKey("transcoder-a", id)
		})
	}
	return c
}

// startSim starts a simulator life after generation after: generations only grow (SPEC 12), and the
// sessions are new.
func (c *chaos) startSim(after uint64) {
	s := sim.New(c.mediaConn, sim.Options{Sources: sim.Sources(chaosSources...), ReadyDelay: chaosReady, After: after})
	r := &simRun{s: s, sessions: map[string]string{}}
	for _, src := range chaosSources {
		id, _, _ := s.SessionID(src)
		r.sessions[id] = src
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		c.t.Fatalf("start simulator: %v", err)
	}
	c.mu.Lock()
	c.runs = append(c.runs, r)
	c.serving = true
	c.mu.Unlock()
}

// stopSim stops the serving simulator: its publications go with it.
func (c *chaos) stopSim() {
	c.mu.Lock()
	r := c.runs[len(c.runs)-1]
	c.serving = false
	c.mu.Unlock()
	r.s.Stop()
}

func (c *chaos) current() *sim.Sim {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.serving {
		return nil
	}
	return c.runs[len(c.runs)-1].s
}

func (c *chaos) startProc(id string) {
	p := &chaosProc{started: time.Now()}
	p.process = startTranscoderProcess(c.t, c.e, id, chaosService, chaosTTL)
	c.procs[id] = p
}

// signal sends sig to the worker and, for SIGKILL and SIGTERM, waits for it to exit.
func (c *chaos) signal(id string, sig syscall.Signal) {
	p := c.procs[id]
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %s %v: %v", id, sig, err)
	}
	if sig == syscall.SIGSTOP || sig == syscall.SIGCONT {
		return
	}
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		c.fatalf("%s did not exit within %v after %v", id, waitTimeout, sig)
	}
	c.procs[id] = nil
}

func (c *chaos) step(format string, args ...any) {
	s := fmt.Sprintf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	c.steps = append(c.steps, s)
}

// fatalf ends the test with the steps so far, the violations and the processes' output.
func (c *chaos) fatalf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%s\nseed %d\nsteps:\n  %s\n%s", fmt.Sprintf(format, args...), c.seed, strings.Join(c.steps, "\n  "), c.logs())
}

func (c *chaos) logs() string {
	var b strings.Builder
	for _, id := range c.workers {
		if p := c.procs[id]; p != nil {
			out := p.out.String()
			if len(out) > 6000 {
				out = "..." + out[len(out)-6000:]
			}
			b.WriteString("--- " + id + ":\n" + out)
		}
	}
	return b.String()
}

// sample records, every few milliseconds, how many publications each source has on the serving
// simulator: more than one is a violation (outside a stall window, which is measured instead).
func (c *chaos) sample(ctx context.Context) {
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
		for _, p := range s.Publications() {
			per[p.SourceID] = append(per[p.SourceID], p.ID+"/"+p.VariantID)
		}
		c.mu.Lock()
		c.samples++
		for src, ids := range per {
			if len(ids) < 2 {
				continue
			}
			obs := fmt.Sprintf("%s sample: %d publications of %s: %v", time.Now().Format("15:04:05.000"), len(ids), src, ids)
			if c.stalled {
				c.stallMax = max(c.stallMax, len(ids))
				c.stallObs = append(c.stallObs, obs)
				if c.doubleFrom.IsZero() {
					c.doubleFrom = time.Now()
				}
				c.doubleTo = time.Now()
			} else {
				c.maxPubs = max(c.maxPubs, len(ids))
				c.violations = append(c.violations, obs)
			}
		}
		c.mu.Unlock()
	}
}

// replay walks every command a simulator life served, in order, and reports each moment an intent
// (a source) had two publications outside a stall window: exact where sampling may miss a short one.
func (r *simRun) replay() (violations, stalled []string) {
	type pub struct{ source, stream, variant string }
	live := map[string]pub{}
	for i, cmd := range r.s.Commands() {
		switch {
		case !cmd.Reply.OK:
		case cmd.Command == capabilities.CommandStartPublication:
			var req capabilities.StartPublicationRequest
			_ = json.Unmarshal(cmd.Body, &req)
			p := pub{r.sessions[req.SessionID], req.StreamID, req.VariantID}
			for id, q := range live {
				if q == p { // the same principal takes its variant over
					delete(live, id)
				}
			}
			live[cmd.Reply.PublicationID] = p
			var ids []string
			for id, q := range live {
				if q.source == p.source {
					ids = append(ids, id+"/"+q.variant)
				}
			}
			if len(ids) > 1 {
				obs := fmt.Sprintf("command %d: %d publications of %s: %v", i, len(ids), p.source, ids)
				if slices.ContainsFunc(r.stalls, func(w [2]int) bool { return i >= w[0] && i < w[1] }) {
					stalled = append(stalled, obs)
				} else {
					violations = append(violations, obs)
				}
			}
		case cmd.Command == capabilities.CommandStopPublication:
			var req capabilities.StopPublicationRequest
			_ = json.Unmarshal(cmd.Body, &req)
			delete(live, req.PublicationID)
		}
	}
	return violations, stalled
}

// check reports why the system is not settled on the latest intents ("" when it is): what the
// simulator publishes, the observed status, the leases and the intents as written.
func (c *chaos) check(ctx context.Context) string {
	s := c.current()
	if s == nil {
		return "the simulator is stopped"
	}
	pubs, caps := s.Publications(), s.Capabilities()
	res, err := c.e.admin.List(ctx, wire.ListRequest{Namespace: c.ns, Limit: wire.MaxListLimit})
	if err != nil {
		return fmt.Sprintf("list %s: %v", c.ns, err)
	}
	entries := map[string]wire.Entry{}
	for _, e := range res.Entries {
		entries[e.Key] = e
	}
	var why []string
	for _, src := range chaosSources {
		key := chaosIntentKey(src)
		want, ok := c.intents[key]
		if !ok {
			continue
		}
		got, ok := entries[key]
		if !ok || got.Revision != want.Revision || string(got.Document) != string(want.Document) {
			// Nobody but the coordinator writes intents: a lost or changed write is no wait.
			c.fatalf("intent %s: %+v, want it as written at revision %d: %s", key, got, want.Revision, want.Document)
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
		stEntry, hasStatus := entries[statusKeyOf(key)]
		if hasStatus {
			_ = json.Unmarshal(stEntry.Document, &st)
		}
		var leases []string // the leases held for this intent
		for k, e := range entries {
			var d wire.LeaseDocument
			if strings.HasPrefix(k, "leases/") && json.Unmarshal(e.Document, &d) == nil && strings.HasSuffix(d.Purpose, " "+key) {
				leases = append(leases, k+" by "+d.Holder+" ("+d.Purpose+")")
			}
		}
		if !in.Desired {
			if len(mine) != 0 {
				why = append(why, fmt.Sprintf("%s not desired, publications %+v", key, mine))
			}
			if len(leases) != 0 {
				why = append(why, fmt.Sprintf("%s not desired, leases %v", key, leases))
			}
			if hasStatus && st.State != reconciler.StateStopped {
				why = append(why, fmt.Sprintf("%s not desired, status %s", key, stEntry.Document))
			}
			continue
		}
		if len(mine) != 1 {
			why = append(why, fmt.Sprintf("%s: publications %+v, want one", key, mine))
			continue
		}
		p := mine[0]
		if p.VariantID != in.VariantID || p.OutputProfile != in.OutputProfile || p.RecordingMode != in.RecordingMode || p.Principal != "transcoder-a" {
			why = append(why, fmt.Sprintf("%s: publication %+v, want %s %s %s", key, p, in.VariantID, in.OutputProfile, in.RecordingMode))
			continue
		}
		if v, ok := variantOf(caps, src, p.VariantID); !ok || v.State != capabilities.StateReady || v.Publisher != "transcoder-a" {
			why = append(why, fmt.Sprintf("%s: variant %+v not READY", key, v))
			continue
		}
		if st.State != reconciler.StateActive || st.PublicationID != p.ID || st.VariantID != p.VariantID {
			why = append(why, fmt.Sprintf("%s: status %s, want active on %s", key, stEntry.Document, p.ID))
			continue
		}
		leaseKey := transcode.LeaseKey(reconciler.MediaIntent{SourceID: src, MediaKind: in.MediaKind, VariantID: in.VariantID})
		le, ok := entries[leaseKey]
		var d wire.LeaseDocument
		if !ok || json.Unmarshal(le.Document, &d) != nil || d.Holder != st.Holder || d.Purpose != "publish "+key {
			why = append(why, fmt.Sprintf("%s: lease %s %s, want held by the status's holder %s", key, leaseKey, le.Document, st.Holder))
			continue
		}
		if len(leases) != 1 {
			why = append(why, fmt.Sprintf("%s: leases %v, want only %s", key, leases, leaseKey))
			continue
		}
		// A worker restarted under the same id claims its predecessor's output anew: until it has
		// reported, the status and the publication are the dead predecessor's.
		if p := c.procs[d.Holder]; p == nil || d.ClaimedAtMs < p.started.UnixMilli() || st.ObservedAtMs < d.ClaimedAtMs {
			why = append(why, fmt.Sprintf("%s: served by %s, which is gone (lease claimed at %d, status of %d)", key, d.Holder, d.ClaimedAtMs, st.ObservedAtMs))
		}
	}
	return strings.Join(why, "; ")
}

func variantOf(caps capabilities.ServerCapabilities, source, variant string) (capabilities.Variant, bool) {
	src, ok := caps.Source(source)
	if !ok {
		return capabilities.Variant{}, false
	}
	for _, st := range src.Streams {
		if v, ok := st.Variant(variant); ok {
			return v, true
		}
	}
	return capabilities.Variant{}, false
}

// settle waits until check holds, re-checking at each update of the service namespace (and every
// 100 ms: a media server's change reaches no watch), for at most within; it returns how long it took.
func (c *chaos) settle(what string, within time.Duration) time.Duration {
	return c.settleOn(c.check, what, within)
}

// settleOn is settle with another check (why the system is not settled, "" when it is).
func (c *chaos) settleOn(check func(context.Context) string, what string, within time.Duration) time.Duration {
	start := time.Now()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		c.state.mu.Lock()
		changed := c.state.notify
		c.state.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		last = check(ctx)
		cancel()
		if last == "" {
			return time.Since(start)
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-deadline.C:
			c.fatalf("%s: not settled within %v: %s", what, within, last)
		}
	}
}

// pause is the chaos cadence: the time between two blows, not a synchronisation.
func (c *chaos) pause(maxPause time.Duration) {
	time.Sleep(time.Duration(c.rng.Int64N(int64(maxPause))))
}

// changeIntent writes a random change of a random intent through the coordinator.
func (c *chaos) changeIntent() { c.changeIntentOf(chaosSources[c.rng.IntN(len(chaosSources))]) }

// changeIntentOf writes a random change of the intent of src through the coordinator.
func (c *chaos) changeIntentOf(src string) { c.changeIntentHow(src, c.rng.IntN(4)) }

// changeVariantOf points the intent of src at another output variant.
func (c *chaos) changeVariantOf(src string) { c.changeIntentHow(src, 1) }

// changeRecordingOf changes the recording mode of the intent of src: the same output, published anew.
func (c *chaos) changeRecordingOf(src string) { c.changeIntentHow(src, 3) }

// changeIntentHow writes a change of the intent of src: what 0 toggles desired, 1 and 2 change the
// output variant, 3 the recording mode.
func (c *chaos) changeIntentHow(src string, what int) {
	key := chaosIntentKey(src)
	e, err := c.e.coord.UpdateIntent(bounded(c.t), c.ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		if cur == nil {
			return nil, fmt.Errorf("intent %s is gone", key)
		}
		switch what {
		case 0:
			cur.Desired = !cur.Desired
		case 1, 2: // the output changes: another variant (and its profile)
			i := slices.IndexFunc(chaosVariants, func(v struct{ variant, profile string }) bool { return v.variant == cur.VariantID })
			v := chaosVariants[(i+1+c.rng.IntN(len(chaosVariants)-1))%len(chaosVariants)]
			cur.VariantID, cur.OutputProfile = v.variant, v.profile
		case 3: // the same output, published otherwise
			if cur.RecordingMode == coordinator.RecordingDisabled {
				cur.RecordingMode = coordinator.RecordingInherit
			} else {
				cur.RecordingMode = coordinator.RecordingDisabled
			}
		}
		return cur, nil
	})
	if err != nil {
		c.fatalf("update intent %s: %v", key, err)
	}
	c.intents[key] = e
	c.step("intent %s -> rev %d %s", key, e.Revision, e.Document)
}

// holderOf is the worker whose status says it serves the intent of src, if the intent is desired.
func (c *chaos) holderOf(src string) string {
	key := chaosIntentKey(src)
	var in coordinator.MediaIntent
	if e, ok := c.intents[key]; !ok || json.Unmarshal(e.Document, &in) != nil || !in.Desired {
		return ""
	}
	st, _ := status(c.t, c.e.admin, c.ns, statusKeyOf(key))
	return st.Holder
}

func (c *chaos) run() {
	ctx, cancel := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		c.sample(ctx)
	}()
	defer func() {
		cancel()
		<-sampled
	}()

	for i, src := range chaosSources { // both intents exist from the start
		in := publishIntent(src, chaosVariants[i].variant, coordinator.RecordingDisabled)
		in.OutputProfile = chaosVariants[i].profile
		e, err := c.e.coord.PutIntent(bounded(c.t), c.ns, chaosIntentKey(src), in)
		if err != nil {
			c.fatalf("put intent: %v", err)
		}
		c.intents[chaosIntentKey(src)] = e
		c.step("intent %s -> rev %d %s", chaosIntentKey(src), e.Revision, e.Document)
	}
	c.settle("first publications", settleTimeout)
	end := time.Now().Add(chaosRun)
	for n := 0; time.Now().Before(end); n++ {
		// What held at the last quiet point still holds: nothing changed since but the cadence.
		c.pause(500 * time.Millisecond)
		if why := c.check(bounded(c.t)); why != "" {
			c.fatalf("step %d: the settled state changed by itself: %s", n, why)
		}
		switch k := c.rng.IntN(10); {
		case k < 3:
			c.blows(n)
		case k < 6:
			c.killHolder(n)
		case k < 8:
			c.restartSim(n)
		default:
			c.stall(n)
		}
		c.mu.Lock()
		v := slices.Clone(c.violations)
		c.mu.Unlock()
		if len(v) > 0 {
			c.fatalf("step %d: %d publications of one intent at once: %v", n, len(v), v[:min(len(v), 5)])
		}
	}
	cancel()
	<-sampled
	c.mu.Lock()
	runs := slices.Clone(c.runs)
	c.mu.Unlock()
	var stalled []string
	for i, r := range runs {
		v, s := r.replay()
		if len(v) > 0 {
			c.fatalf("simulator life %d: two publications of one intent: %v", i, v)
		}
		stalled = append(stalled, s...)
	}
	c.t.Logf("chaos seed %d: %d steps, %d samples; failover after SIGKILL of the holder %v (max %v, bound %v); after SIGTERM %v; "+
		"stalls (idle, busy, in flight) %v, of which with two publications of one intent %v: most %d, %d samples and %d commands with two, "+
		"for %v, the last seen this long after the wake: %v",
		c.seed, len(c.steps), c.samples, c.failover, slices.Max(append(c.failover, 0)), chaosTTL+failoverSlack, c.sigterm,
		c.stalls, c.stallsDouble, c.stallMax, len(c.stallObs), len(stalled), c.doubleFor, c.doubleAfterWake)
	for _, o := range append(c.stallObs[:min(len(c.stallObs), 5)], stalled...) {
		c.t.Logf("  stall: %s", o)
	}
}

// blows is one to three random blows in a row, a short cadence apart, then a quiet point: intent
// changes, a worker killed (SIGKILL or SIGTERM) and restarted now or later, the simulator restarted.
func (c *chaos) blows(n int) {
	var down []string
	for range 1 + c.rng.IntN(3) {
		switch k := c.rng.IntN(4); {
		case k < 2:
			c.changeIntent()
		case k == 2:
			if id, ok := c.killOne(n, chaosWorkers, c.startProc); !ok {
				c.changeIntent()
			} else if id != "" {
				down = append(down, id)
			}
		default:
			c.bounceSim(n)
		}
		c.pause(300 * time.Millisecond)
	}
	if c.current() == nil {
		c.startSim(c.runs[len(c.runs)-1].s.Generation())
	}
	// The intents settle before the workers killed are back: the others serve.
	d := c.settle(fmt.Sprintf("step %d", n), settleTimeout)
	c.step("step %d: settled in %v", n, d.Round(time.Millisecond))
	for _, id := range down {
		c.step("step %d: restart %s", n, id)
		c.startProc(id)
	}
}

// up is the running processes among ids.
func (c *chaos) up(ids []string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return c.procs[id] == nil })
}

// killOne kills a random running process of ids, SIGKILL or SIGTERM, if two or more run (one stays to
// serve), and starts it again at once, or leaves it down and returns its id, to be started after the
// quiet point. ok is false when fewer than two run: nothing was done.
func (c *chaos) killOne(n int, ids []string, start func(id string)) (down string, ok bool) {
	up := c.up(ids)
	if len(up) < 2 {
		return "", false
	}
	id := up[c.rng.IntN(len(up))]
	sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[c.rng.IntN(2)]
	c.step("step %d: %v %s", n, sig, id)
	c.signal(id, sig)
	if c.rng.IntN(2) == 0 {
		c.step("step %d: restart %s", n, id)
		start(id)
		return "", true
	}
	return id, true
}

// bounceSim stops the media simulator for a second and starts a new one.
func (c *chaos) bounceSim(n int) {
	c.step("step %d: simulator stopped", n)
	c.stopSim()
	c.pause(time.Second)
	c.startSim(c.runs[len(c.runs)-1].s.Generation())
	c.step("step %d: simulator started", n)
}

// killHolder kills the worker that serves a desired intent, SIGKILL or SIGTERM, and measures the
// failover: the time until another worker (or the same one, restarted) serves it, bounded by
// chaosTTL + failoverSlack.
func (c *chaos) killHolder(n int) {
	src := chaosSources[c.rng.IntN(len(chaosSources))]
	id := c.holderOf(src)
	if id == "" || c.procs[id] == nil {
		c.changeIntentOf(src) // nothing to fail over: change it instead
		c.settle(fmt.Sprintf("step %d", n), settleTimeout)
		return
	}
	sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[c.rng.IntN(2)]
	restart := c.rng.IntN(3) == 0
	c.step("step %d: %v holder %s of %s (restart at once: %v)", n, sig, id, src, restart)
	at := time.Now()
	c.signal(id, sig)
	if restart {
		c.startProc(id)
	}
	c.settle(fmt.Sprintf("step %d: failover after %v of %s", n, sig, id), settleTimeout)
	d := time.Since(at)
	c.step("step %d: failed over in %v", n, d.Round(time.Millisecond))
	if d > chaosTTL+failoverSlack {
		c.fatalf("step %d: failover after %v of the holder took %v, want within TTL %v + %v", n, sig, d, chaosTTL, failoverSlack)
	}
	if sig == syscall.SIGKILL {
		c.failover = append(c.failover, d.Round(time.Millisecond))
	} else {
		c.sigterm = append(c.sigterm, d.Round(time.Millisecond))
	}
	if !restart {
		c.step("step %d: restart %s", n, id)
		c.startProc(id)
	}
}

// restartSim stops the media simulator for a while and starts a new one (new sessions, no
// publications): the workers publish again on the new sessions.
func (c *chaos) restartSim(n int) {
	c.step("step %d: simulator stopped", n)
	c.stopSim()
	if c.rng.IntN(2) == 0 {
		c.changeIntent() // written while the media server is away
	}
	c.pause(1500 * time.Millisecond)
	c.startSim(c.runs[len(c.runs)-1].s.Generation())
	d := c.settle(fmt.Sprintf("step %d: simulator restarted", n), settleTimeout)
	c.step("step %d: simulator started, settled in %v", n, d.Round(time.Millisecond))
}

// Stall modes.
const (
	stallIdle     = iota // the holder is idle; the intent may change while it is stopped
	stallBusy            // stopped just after a change of its intent: it may be reconciling it
	stallInFlight        // stopped while a start_publication of its is queued on a slow media server
	stallModes
)

// stall stops a holder (SIGSTOP) for longer than its lease and wakes it (SIGCONT). Media commands
// carry no fencing token (SPEC 12): what the stalled holder's commands do once they reach the media
// server is measured, not failed, from the stop until the quiet point after the wake.
func (c *chaos) stall(n int) {
	src := chaosSources[c.rng.IntN(len(chaosSources))]
	id := c.holderOf(src)
	if id == "" || c.procs[id] == nil {
		c.changeIntentOf(src)
		c.settle(fmt.Sprintf("step %d", n), settleTimeout)
		return
	}
	mode := c.rng.IntN(stallModes)
	c.mu.Lock()
	c.stalled = true
	r := c.runs[len(c.runs)-1]
	from := len(r.s.Commands())
	samples := len(c.stallObs)
	c.doubleFrom, c.doubleTo = time.Time{}, time.Time{}
	c.mu.Unlock()
	switch mode {
	case stallBusy:
		c.changeIntentOf(src)
	case stallInFlight:
		// The holder restarts its publication (a recording mode change: the same output), and the
		// media server takes 300 ms per command: its stop, then its start, wait in turn.
		r.s.SetCommandDelay(300 * time.Millisecond)
		c.changeRecordingOf(src)
		c.pause(100 * time.Millisecond)
		time.Sleep(350 * time.Millisecond) // the cadence: past the stop, into the start
	}
	c.step("step %d: SIGSTOP holder %s of %s (mode %d)", n, id, src, mode)
	c.signal(id, syscall.SIGSTOP)
	r.s.SetCommandDelay(0)
	woken := false
	defer func() {
		if !woken {
			_ = c.procs[id].cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	if mode == stallInFlight || (mode == stallIdle && c.rng.IntN(2) == 0) {
		c.pause(chaosTTL)
		c.changeVariantOf(src)
	}
	time.Sleep(chaosTTL + time.Duration(c.rng.Int64N(int64(time.Second)))) // the stall: past the lease
	c.step("step %d: SIGCONT %s", n, id)
	c.signal(id, syscall.SIGCONT)
	wokenAt := time.Now()
	woken = true
	d := c.settle(fmt.Sprintf("step %d: after the stall of %s", n, id), settleTimeout)
	c.step("step %d: settled %v after the wake", n, d.Round(time.Millisecond))
	c.mu.Lock()
	c.stalled = false
	c.stalls[mode]++
	if len(c.stallObs) > samples {
		c.stallsDouble[mode]++
		c.doubleFor = append(c.doubleFor, c.doubleTo.Sub(c.doubleFrom).Round(time.Millisecond))
		c.doubleAfterWake = append(c.doubleAfterWake, c.doubleTo.Sub(wokenAt).Round(time.Millisecond))
	}
	if c.runs[len(c.runs)-1] == r {
		r.stalls = append(r.stalls, [2]int{from, len(r.s.Commands())})
	}
	c.mu.Unlock()
}
