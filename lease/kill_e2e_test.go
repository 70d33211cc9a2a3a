package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
)

// The tests of this file kill the real stated binary (SIGKILL) and start it again on the same
// database, its embedded NATS server with it: every connection drops, and requests in flight get no
// reply.

// killClient returns a coordinator client of s connected the way store/client.Connect does (no
// reconnect buffer: a request made while stated is away fails at once).
func killClient(t *testing.T, s *e2e.Stated) *client.Client {
	t.Helper()
	nc, err := client.Connect(s.URL(), "coordinator", nats.UserInfo("coordinator", e2ePassword), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "coordinator", client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// campaignUntil campaigns until it holds the lease or ctx ends: a campaign fails while stated is away.
func campaignUntil(ctx context.Context, c *client.Client, o lease.Options) (*lease.Lease, error) {
	for {
		l, err := lease.Campaign(ctx, c, o)
		if err == nil || ctx.Err() != nil {
			return l, err
		}
		t := time.NewTimer(50 * time.Millisecond) // a retry pause while stated is away, not a synchronisation
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// A holder whose stated is killed keeps its lease through an outage shorter than the lease's
// validity: renewals resume on the restarted stated, and no standby gets it meanwhile.
func TestE2ELeaseSurvivesAShortOutage(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	renewals, onRenewed := notifier[uint64]()
	o := lease.Options{Namespace: ns, Key: "leases/short", Holder: "holder-a", TTL: 10 * time.Second, RenewEvery: time.Second}
	a, err := lease.Claim(ctx, killClient(t, s), lease.WithHooks(o, lease.TestHooks{Renewed: onRenewed}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		t0 := time.Now()
		err := a.Release(context.Background())
		t.Logf("release %v took %v", err, time.Since(t0))
	})
	recv(t, renewals, "a renewal before the kill")
	before := a.Revision()
	t0 := time.Now()
	s.Kill()
	s.Start()
	t.Logf("restart took %v", time.Since(t0))
	for rev := uint64(0); rev <= before; {
		rev = recv(t, renewals, "a renewal on the restarted stated")
	}
	t.Logf("renewed after %v", time.Since(t0))
	if !a.Held() || a.Err() != nil {
		t.Fatalf("after a short outage: held %v, err %v", a.Held(), a.Err())
	}
	// The lease entry is the holder's, at the lease's revision (or a renewal newer still).
	e, err := killClient(t, s).Get(ctx, ns, o.Key)
	if err != nil {
		t.Fatal(err)
	}
	if d := decodeLease(t, e); d.Holder != o.Holder || e.Revision < a.Revision() {
		t.Fatalf("lease entry %s (holder %s), lease at %d", e.String(), d.Holder, a.Revision())
	}
}

// A holder whose stated stays away longer than its lease learns the loss by itself, before the store
// can expire the entry (Held false, Guard void, writes refused without a request); the standby gets
// the lease only once it expired, and the former holder's Release leaves the new holder's entry alone.
func TestE2ELeaseLostDuringAnOutage(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	o := lease.Options{Namespace: ns, Key: "leases/long", Holder: "holder-a", TTL: 2 * time.Second}
	hc := killClient(t, s)
	connected := hc.Conn().StatusChanged(nats.CONNECTED)
	defer hc.Conn().RemoveStatusListener(connected)
	a, err := lease.Claim(ctx, hc, o)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *lease.Lease
		err error
	}
	standby := make(chan result, 1)
	bo := o
	bo.Holder = "holder-b"
	waiting, onWait := notifier[struct{}]()
	go func() {
		l, err := campaignUntil(ctx, killClient(t, s), lease.WithHooks(bo, lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		standby <- result{l, err}
	}()
	recv(t, waiting, "the standby to wait for the key")
	s.Kill()
	closed(t, a.Lost(), "the holder to learn that its lease is lost")
	if a.Held() {
		t.Fatal("Held after Lost")
	}
	if g := a.Guard(); g.Revision == int64(a.Revision()) {
		t.Fatalf("Guard %+v of a lost lease names its revision", g)
	}
	if _, err := a.Put(ctx, statusPut("status/x", "active")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a write of a lost lease: %v, want ErrNotHeld", err)
	}
	lostAt := a.Revision()
	s.Start()
	var b result
	select {
	case b = <-standby:
	case <-ctx.Done():
		t.Fatal("the standby never got the lease")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer func() { _ = b.l.Release(context.Background()) }()
	if b.l.Revision() <= lostAt {
		t.Fatalf("the standby's claim at %d, the former holder's last revision %d", b.l.Revision(), lostAt)
	}
	for !hc.Conn().IsConnected() { // the former holder's connection is back: its Release reaches the store
		recv(t, connected, "the former holder's connection to come back")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of the lost lease: %v", err)
	}
	e, err := killClient(t, s).Get(ctx, ns, o.Key)
	if err != nil {
		t.Fatalf("the new holder's entry: %v", err)
	}
	if d := decodeLease(t, e); d.Holder != bo.Holder || e.Revision != b.l.Revision() {
		t.Fatalf("lease entry %s (holder %s), want the standby's at %d", e.String(), d.Holder, b.l.Revision())
	}
	if !b.l.Held() {
		t.Fatalf("the standby does not hold its lease: %v", b.l.Err())
	}
}

// Two electors on one key while stated is killed and restarted, with outages shorter and longer than
// the lease: whenever a term starts, no other term's lease is still Held (no two leaders believe they
// lead at once), each term's fencing token is above the one before, leadership comes back after each
// restart, and Run returns, bounded, once cancelled while stated is away.
func TestE2EElectorsAcrossKills(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		leases  []*lease.Lease
		lastRev uint64
	)
	started := make(chan string, 64)
	runs := map[string]chan error{}
	runCtx, stopRuns := context.WithCancel(ctx)
	defer stopRuns()
	for _, name := range []string{"leader-1", "leader-2"} {
		e, err := lease.NewElector(killClient(t, s), lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: "leaders/job", Holder: name, TTL: 2 * time.Second},
			OnStarted: func(jctx context.Context, l *lease.Lease) {
				mu.Lock()
				for _, other := range leases {
					if other != l && other.Held() {
						t.Errorf("%s starts a term at revision %d while the lease of %s at %d is still Held",
							name, l.Revision(), other.Holder(), other.Revision())
					}
				}
				if l.Revision() <= lastRev {
					t.Errorf("%s starts a term at revision %d, after one at %d", name, l.Revision(), lastRev)
				}
				lastRev = l.Revision()
				leases = append(leases, l)
				mu.Unlock()
				started <- fmt.Sprintf("%s@%d", name, l.Revision())
				<-jctx.Done()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		runs[name] = done
		go func() { done <- e.Run(runCtx) }()
	}
	recv(t, started, "the first term")
	for _, outage := range []time.Duration{0, 3 * time.Second, 0, 3 * time.Second} {
		s.Kill()
		if outage > 0 {
			// Outlast the lease: wait until the leader has learned it lost it.
			mu.Lock()
			cur := leases[len(leases)-1]
			mu.Unlock()
			closed(t, cur.Lost(), "the leader to lose its lease while stated is away")
		}
		s.Start()
		// Leadership comes back: the current leader renews on, or a new term starts.
		mu.Lock()
		cur := leases[len(leases)-1]
		mu.Unlock()
		if outage > 0 || !cur.Held() {
			recv(t, started, "a term after the restart")
		}
	}
	s.Kill()
	stopRuns()
	for name, done := range runs {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("%s: Run did not return, stated away", name)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range leases {
		if l.Held() {
			t.Errorf("the lease of %s at %d is still Held after Run returned", l.Holder(), l.Revision())
		}
	}
	t.Logf("%d terms", len(leases))
}

// With stated on an external NATS server, a kill and restart sends the standby nothing: its
// connection stays up, and its watch is simply gone from the restarted stated, which will never send
// it the DELETE or EXPIRE of the lease. The standby must still learn that the key is free within the
// failover bound of issue 4 (a TTL and a second) of the release, not only when its cache's default
// liveness check (every 5 s, so 5 to 10 s after the last update) finds the watch gone.
func TestE2EStandbyTakesOverAfterAKillOnAnExternalNATS(t *testing.T) {
	nsrv := natstest.Start(t, natsserver.Options{})
	s := e2e.NewStated(t, e2e.Config{NATSURL: nsrv.ClientURL()})
	s.Start()
	dev := func() *client.Client {
		nc, err := client.Connect(nsrv.ClientURL(), "dev", nats.ReconnectWait(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := client.New(nc, "dev", client.WithRequestTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	renewals, onRenewed := notifier[uint64]()
	o := lease.Options{Namespace: ns, Key: "leases/ext", Holder: "holder-a", TTL: 2 * time.Second}
	a, err := lease.Claim(ctx, dev(), lease.WithHooks(o, lease.TestHooks{Renewed: onRenewed}))
	if err != nil {
		t.Fatal(err)
	}
	bo := o
	bo.Holder = "holder-b"
	waiting, onWait := notifier[struct{}]()
	type result struct {
		l   *lease.Lease
		err error
	}
	standby := make(chan result, 1)
	bc := dev()
	go func() {
		l, err := campaignUntil(ctx, bc, lease.WithHooks(bo, lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		standby <- result{l, err}
	}()
	defer func() {
		cancel()
		if r := <-standby; r.l != nil {
			_ = r.l.Release(context.Background())
		}
	}()
	recv(t, waiting, "the standby to wait for the key")
	before := a.Revision()
	s.Kill()
	s.Start()
	for rev := uint64(0); rev <= before; {
		rev = recv(t, renewals, "a renewal on the restarted stated")
	}
	released := time.Now()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bound := o.TTL + time.Second
	select {
	case r := <-standby:
		standby <- r // for the deferred release
		if r.err != nil {
			t.Fatalf("standby: %v", r.err)
		}
		t.Logf("the standby claimed %v after the release", time.Since(released))
	case <-time.After(bound):
		t.Fatalf("the standby has not claimed the released lease %v after the release", bound)
	}
}

// A standby campaigning under a long deadline whose claim goes out just as stated hangs and is then
// killed: the claim's reply never comes. Once stated is back the standby must claim within a few
// request timeouts, not sit on the lost reply until its campaign's deadline (the rest of the
// campaign, possibly hours).
func TestE2ECampaignDoesNotWaitOutALostClaimReply(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	o := lease.Options{Namespace: ns, Key: "leases/lost-reply", Holder: "holder-a", TTL: 2 * time.Second}
	a, err := lease.Claim(ctx, killClient(t, s), o)
	if err != nil {
		t.Fatal(err)
	}
	bo := o
	bo.Holder = "holder-b"
	waiting, onWait := notifier[struct{}]()
	claiming, onClaim := notifier[struct{}]()
	paused := make(chan struct{})
	released := make(chan struct{}) // closed once the holder's release is answered
	var once sync.Once
	// The campaign may last far longer than this test: its deadline must not bound its claims.
	campaignCtx, stopCampaign := context.WithTimeout(context.Background(), 10*time.Minute)
	type result struct {
		l   *lease.Lease
		err error
	}
	standby := make(chan result, 1)
	bc := killClient(t, s)
	go func() {
		l, err := campaignUntil(campaignCtx, bc, lease.WithHooks(bo, lease.TestHooks{
			Wait: func() { onWait(struct{}{}) },
			Claim: func() {
				once.Do(func() {
					// The standby may see the release's delete before stated has sent the holder its
					// reply: pausing stated then would leave the release unanswered.
					select {
					case <-released:
					case <-time.After(testTimeout):
					}
					s.Pause() // the claim that follows reaches a stated that answers nothing
					close(paused)
				})
				onClaim(struct{}{})
			},
		}))
		standby <- result{l, err}
	}()
	defer func() {
		stopCampaign()
		if r := <-standby; r.l != nil {
			_ = r.l.Release(context.Background())
		}
	}()
	recv(t, waiting, "the standby to wait for the key")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(released)
	closed(t, paused, "the standby to claim the released key")
	recv(t, claiming, "the claim")
	s.Kill()
	s.Start()
	back := time.Now()
	select {
	case r := <-standby:
		standby <- r
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("the standby claimed %v after stated came back", time.Since(back))
	case <-time.After(testTimeout):
		t.Fatalf("the standby has not claimed the free key %v after stated came back: its claim waits for a reply that was lost", testTimeout)
	}
}
