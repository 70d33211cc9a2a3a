package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
)

// splitCluster is a state server on the near node of a two-node cluster with a route that parts.
type splitCluster struct{ *splittest.Env }

// startSplit starts the cluster and a state server (the coordinator, an admin) on its near node.
func startSplit(t *testing.T) *splitCluster {
	return &splitCluster{splittest.Start(t, splittest.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}}})}
}

// The tests of this file run the state server on node 1 of a two-node NATS cluster whose route a test
// can cut (or freeze) and mend, and lease holders on either node. A holder on node 0 (the far side)
// keeps a healthy connection through a partition (its pings to its own node succeed) and reaches
// nothing of the state server: requests fail at once with no responders (a cut route) or time out
// (a frozen one), and no status change tells it.

// client connects the coordinator to node only (no other node learnt of) and returns its client.
func (s *splitCluster) client(t *testing.T, node int) *client.Client {
	t.Helper()
	c, err := client.New(s.Connect(t, node, "coordinator", client.Connect), "coordinator", client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stamps records when things happened, on the test process's monotonic clock.
type stamps struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (s *stamps) mark(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.at[what]; !ok {
		s.at[what] = time.Now()
	}
}

func (s *stamps) get(what string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[what]
	return at, ok
}

// An Elector leading on the far side of a route partition, a standby Elector on the state server's
// side: the leader stops believing it leads (Held false, its job's context ended, OnStopped) before
// the standby can claim, whatever the partition makes its requests do (fail at once, time out), and
// the two leases are never Held at one instant. Once the route is back, the former leader reads the
// lease again, finds the new holder, and stays a standby: its job is not started again.
func TestElectorAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			s := startSplit(t)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			st := &stamps{at: map[string]time.Time{}}
			var leases [2]atomic.Pointer[lease.Lease]
			var starts [2]atomic.Int32
			var heldAtTakeover atomic.Bool
			waits := [2]chan struct{}{make(chan struct{}, 64), make(chan struct{}, 64)}
			started := [2]chan struct{}{make(chan struct{}, 4), make(chan struct{}, 4)}
			names := [2]string{"far", "near"}
			var runs sync.WaitGroup
			runCtx, stop := context.WithCancel(ctx)
			defer func() { stop(); runs.Wait() }()
			startElector := func(i int, c *client.Client) {
				o := lease.Options{Namespace: ns, Key: "leases/split", Holder: names[i], TTL: 3 * time.Second}
				o = lease.WithHooks(o, lease.TestHooks{Wait: func() {
					select {
					case waits[i] <- struct{}{}:
					default:
					}
				}})
				e, err := lease.NewElector(c, lease.ElectorOptions{Options: o,
					OnStarted: func(jctx context.Context, l *lease.Lease) {
						if i == 1 {
							// The standby takes over: the former leader must not hold its lease now.
							if a := leases[0].Load(); a != nil && a.Held() {
								heldAtTakeover.Store(true)
							}
						}
						st.mark(names[i] + " started")
						leases[i].Store(l)
						starts[i].Add(1)
						started[i] <- struct{}{}
						<-jctx.Done()
						st.mark(names[i] + " job ended")
					},
					OnStopped: func() { st.mark(names[i] + " stopped") },
				})
				if err != nil {
					t.Fatal(err)
				}
				runs.Go(func() {
					if err := e.Run(runCtx); err != nil {
						t.Errorf("%s elector: %v", names[i], err)
					}
				})
			}
			startElector(0, s.client(t, splittest.Far))
			recv(t, started[0], "the far elector to lead")
			startElector(1, s.client(t, splittest.Near))
			recv(t, waits[1], "the near elector to stand by")

			// Both Held at one instant is what must never be seen. The new holder is read first: a
			// former holder that is still Held after it was is Held at an instant the new one was.
			overlap := make(chan string, 1)
			sampling, stopSampling := context.WithCancel(ctx)
			var sampler sync.WaitGroup
			sampler.Go(func() {
				for sampling.Err() == nil {
					b, a := leases[1].Load(), leases[0].Load()
					if b != nil && b.Held() && a.Held() {
						select {
						case overlap <- "both held":
						default:
						}
					}
					time.Sleep(time.Millisecond) // sampling, not synchronisation
				}
			})
			defer func() { stopSampling(); sampler.Wait() }()

			p.Apart(s.Env, t)
			st.mark("partition")
			recv(t, started[1], "the near elector to take over")
			far := leases[0].Load()
			if heldAtTakeover.Load() {
				t.Fatal("the far leader's lease was Held when the near elector started its job")
			}
			if !errors.Is(far.Err(), lease.ErrLost) {
				t.Fatalf("the far leader's lease ended with %v, want ErrLost", far.Err())
			}
			takeover, _ := st.get("near started")
			for _, ev := range []string{"far job ended", "far stopped"} {
				at, ok := st.get(ev)
				if !ok || !at.Before(takeover) {
					t.Fatalf("%q (%v) not before the near elector started (%v)", ev, at, takeover)
				}
			}
			part, _ := st.get("partition")
			lostAt, _ := st.get("far job ended")
			t.Logf("partition to far job ended %v, to near started %v", lostAt.Sub(part), takeover.Sub(part))

			s.Mend(t)
			recv(t, waits[0], "the far elector to stand by once the route is back")
			if n := starts[0].Load(); n != 1 {
				t.Fatalf("the far elector started its job %d times", n)
			}
			if b := leases[1].Load(); !b.Held() {
				t.Fatalf("the near elector's lease is not held: %v", b.Err())
			}
			// The former leader's lease stays lost: a write on its behalf is refused before it is sent.
			if _, err := far.Put(ctx, statusPut("status/split", "active")); !errors.Is(err, lease.ErrNotHeld) {
				t.Fatalf("a write of the former leader once the route is back: %v, want ErrNotHeld", err)
			}
			e, ok := get(t, s.client(t, splittest.Near), "leases/split")
			if !ok || decodeLease(t, e).Holder != "near" {
				t.Fatalf("lease entry %+v (%v), want the near elector's", e, ok)
			}
			select {
			case what := <-overlap:
				t.Fatal(what)
			default:
			}
		})
	}
}

// A standby on the far side of a route partition that lasts, while the holder, on the state server's
// side, releases the lease: once the route is back the standby claims within about a RenewEvery (its
// watch's check interval), as after a reconnect of its own connection. Before, its watch's re-watch
// attempts backed off to 5 s, and nothing woke them when the route came back: the lease stayed free,
// with a standby waiting, up to 5 s after the route was back (five TTLs here).
func TestStandbyClaimsSoonAfterALongRoutePartition(t *testing.T) {
	s := startSplit(t)
	ctx := ctxT(t)
	o := lease.Options{Namespace: ns, Key: "leases/split", Holder: "near", TTL: time.Second}
	a, err := lease.Claim(ctx, s.client(t, splittest.Near), o)
	if err != nil {
		t.Fatal(err)
	}
	log := splittest.NewRetryLog()
	waiting, onWait := notifier[struct{}]()
	bo := o
	bo.Holder, bo.Logger = "far", slog.New(log)
	type result struct {
		l   *lease.Lease
		err error
	}
	standby := make(chan result, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		if r := <-standby; r.l != nil {
			releaseNow(t, r.l)
		}
	}()
	go func() {
		l, err := lease.Campaign(cctx, s.client(t, splittest.Far), lease.WithHooks(bo, lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		standby <- result{l, err}
	}()
	recv(t, waiting, "the far standby to wait")
	s.Cut(t)
	releaseNow(t, a)
	// Seven failed re-watches: a backoff doubling from 100 ms to 5 s would have the last wait 5 s.
	for range 7 {
		recv(t, log.Retries, "a failed re-watch of the far standby")
	}
	s.Mend(t)
	mended := time.Now()
	var b result
	select {
	case b = <-standby:
		standby <- b
	case <-time.After(testTimeout):
		t.Fatal("the far standby never claimed the released lease")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	// A bound with room for a loaded machine (a try sent as the route mends may wait out a request
	// timeout), below 5 s less the mend.
	if d := time.Since(mended); d > 3*time.Second {
		t.Fatalf("the far standby claimed %v after the route was back (RenewEvery %v)", d, time.Second/3)
	}
}
