package lease_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// pollUntil polls cond (a count no event announces: goroutines, subscriptions) until it holds, or
// fails the test after testTimeout with cond's last description.
func pollUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	natstest.Poll(t, testTimeout, what, cond)
}

// disconnectAndAwait cuts nc at the NATS server and waits until it has reconnected.
func disconnectAndAwait(ctx context.Context, t *testing.T, env *testenv.Env, nc *nats.Conn) {
	t.Helper()
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	if !natstest.Kick(env.NATS, nc) {
		t.Fatal("no connection to cut")
	}
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("no reconnect")
	}
}

// Three electors on one key run a long life: terms that end and pass the lease on, and hundreds of
// connection cuts of leader and standbys alike. One term runs at a time, OnStopped follows each
// OnStarted once, the elector still leads after the last cycle, and once Run returned nothing is
// left: no goroutine, no subscription, no live watch, no lease entry.
func TestElectorLongLifeLeavesNothingBehind(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	// Longer than testTimeout: the many cycles add up on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	const electors = 3
	const cycles = 150

	var (
		mu               sync.Mutex
		active, overlaps int
		started, stopped [electors]int
	)
	startedCh := make(chan int, 64)
	endTerm := make(chan struct{})
	leases := make(chan *lease.Lease, 64) // each term's lease
	conns := make([]*nats.Conn, electors)
	els := make([]*lease.Elector, electors)
	for i := range electors {
		nc, err := client.Connect(env.URL, "coordinator", nats.ReconnectWait(5*time.Millisecond), nats.ReconnectJitter(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[i] = nc
		cl, err := client.New(conns[i], "coordinator")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Info(ctx); err != nil { // the reply subscription is made now
			t.Fatal(err)
		}
		els[i], err = lease.NewElector(cl, lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: "longrun", Holder: fmt.Sprintf("e%d", i), TTL: time.Second},
			OnStarted: func(ctx context.Context, l *lease.Lease) {
				mu.Lock()
				active++
				if active > 1 {
					overlaps++
				}
				started[i]++
				mu.Unlock()
				startedCh <- i
				leases <- l
				select {
				case <-ctx.Done():
				case <-endTerm:
				}
				mu.Lock()
				active--
				mu.Unlock()
			},
			OnStopped: func() {
				mu.Lock()
				stopped[i]++
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	subs := make([]int, electors)
	for i, nc := range conns {
		subs[i] = nc.NumSubscriptions()
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, e := range els {
		wg.Go(func() {
			if err := e.Run(runCtx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	stopped1 := false
	defer func() {
		if !stopped1 {
			stop()
			wg.Wait()
		}
	}()
	leader := recv(t, startedCh, "the first term")
	current := recv(t, leases, "the first term's lease")
	totalSubs := func() int {
		n := 0
		for _, nc := range conns {
			n += nc.NumSubscriptions()
		}
		return n
	}
	// While running, each connection has its reply subscription, and each standby its campaign's
	// watch, once its pause after a term is over: the counts to hold to.
	const runningSubs = electors + electors - 1
	steady := func(what string) {
		t.Helper()
		pollUntil(t, what, func() (bool, string) {
			n := totalSubs()
			return n == runningSubs, fmt.Sprintf("%d subscriptions, want %d", n, runningSubs)
		})
	}
	var running int
	for i := range cycles {
		if i == 20 {
			steady("subscriptions at cycle 20")
			runtime.GC()
			running = runtime.NumGoroutine()
			t.Logf("running: %d goroutines", running)
		}
		switch {
		case i%50 == 45:
			// The leader stalls and loses its lease: its job is stopped, and a standby takes over.
			lease.PauseRenewals(current)
			leader = recv(t, startedCh, fmt.Sprintf("cycle %d: the term after a loss", i))
			current = recv(t, leases, "its lease")
		case i%10 == 0:
			// The leader's job ends: the lease passes to a standby.
			select {
			case endTerm <- struct{}{}:
			case <-ctx.Done():
				t.Fatalf("cycle %d: the leader does not end its term", i)
			}
			leader = recv(t, startedCh, fmt.Sprintf("cycle %d: the next term", i))
			current = recv(t, leases, "its lease")
		case i%10 == 3, i%10 == 7:
			// The server closes the standbys' watches.
			reason := wire.CloseOverflow
			if i%10 == 7 {
				reason = wire.CloseAckTimeout
			}
			for _, ref := range env.Store.LiveWatches() {
				env.Store.CloseWatch(policy.Principal{ID: ref.Principal, Admin: true}, ref.WatchID, reason, "longrun")
			}
		default:
			disconnectAndAwait(ctx, t, env, conns[i%electors])
		}
	}
	// The elector still works: the leader leads, and one more term passes on.
	pollUntil(t, "leading", func() (bool, string) {
		return els[leader].Leading(), fmt.Sprintf("elector %d not leading", leader)
	})
	steady("subscriptions after the cycles")
	pollUntil(t, "goroutines while running", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= running+2, fmt.Sprintf("%d goroutines (at cycle 20: %d)", n, running)
	})
	endTerm <- struct{}{}
	recv(t, startedCh, "the term after the cycles")
	recv(t, leases, "its lease")

	stop()
	wg.Wait()
	stopped1 = true
	mu.Lock()
	for i := range electors {
		if started[i] != stopped[i] {
			t.Errorf("elector %d: OnStarted %d times, OnStopped %d times", i, started[i], stopped[i])
		}
	}
	if overlaps != 0 {
		t.Errorf("%d terms began while another ran", overlaps)
	}
	t.Logf("terms: %v", started)
	mu.Unlock()
	for i, nc := range conns {
		pollUntil(t, "subscriptions", func() (bool, string) {
			n := nc.NumSubscriptions()
			return n == subs[i], fmt.Sprintf("%d subscriptions on elector %d's connection (before Run: %d)", n, i, subs[i])
		})
	}
	pollUntil(t, "live watches", func() (bool, string) {
		n := len(env.Store.LiveWatches())
		return n == 0, fmt.Sprintf("%d live watches", n)
	})
	pollUntil(t, "goroutines", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= goroutines+2, fmt.Sprintf("%d goroutines (before Run: %d)", n, goroutines)
	})
	if e, ok := get(t, newClient(t, env), "longrun"); ok {
		t.Errorf("the lease entry is left after Run returned: %s", e.String())
	}
}

// Electors stopped while their connections are cut again and again return, and leave no goroutine
// behind.
func TestElectorStopDuringReconnectStorm(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	const electors = 2
	conns := make([]*nats.Conn, electors)
	els := make([]*lease.Elector, electors)
	started := make(chan struct{}, 64)
	for i := range electors {
		nc, err := client.Connect(env.URL, "coordinator", nats.ReconnectWait(time.Millisecond), nats.ReconnectJitter(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[i] = nc
		cl, err := client.New(nc, "coordinator", client.WithRequestTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Info(ctx); err != nil {
			t.Fatal(err)
		}
		els[i], err = lease.NewElector(cl, lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: "storm", Holder: fmt.Sprintf("e%d", i), TTL: time.Second},
			OnStarted: func(ctx context.Context, _ *lease.Lease) {
				started <- struct{}{}
				<-ctx.Done()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	for round := range 5 {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, electors)
		for _, e := range els {
			go func() { done <- e.Run(runCtx) }()
		}
		recv(t, started, "a term")
		endStorm := natstest.Storm(env.NATS, time.Duration(round)*time.Millisecond, conns...)
		stop()
		for range electors {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("round %d: Run = %v", round, err)
				}
			case <-ctx.Done():
				t.Fatalf("round %d: Run did not return", round)
			}
		}
		endStorm()
		for len(started) > 0 {
			<-started
		}
	}
	pollUntil(t, "goroutines", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= goroutines+2, fmt.Sprintf("%d goroutines (before: %d)", n, goroutines)
	})
}

// A leader cut off from NATS for longer than its TTL, again and again, loses its lease each time
// (its job stopped, OnStopped once), the standby takes over, and once the link is back it stands by
// in turn: terms alternate, and nothing accumulates across the outages.
func TestElectorOutagesLongerThanTheTTL(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	const outages = 4
	links := make([]*natstest.CutLink, 2)
	els := make([]*lease.Elector, 2)
	var mu sync.Mutex
	var started, stopped [2]int
	startedCh := make(chan int, 64)
	for i := range 2 {
		links[i] = natstest.NewCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
		nc, err := client.Connect(links[i].URL(), "coordinator", nats.ReconnectWait(5*time.Millisecond), nats.ReconnectJitter(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		cl, err := client.New(nc, "coordinator", client.WithRequestTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		els[i], err = lease.NewElector(cl, lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: "outage", Holder: fmt.Sprintf("e%d", i), TTL: time.Second},
			OnStarted: func(ctx context.Context, _ *lease.Lease) {
				mu.Lock()
				started[i]++
				mu.Unlock()
				startedCh <- i
				<-ctx.Done()
			},
			OnStopped: func() {
				mu.Lock()
				stopped[i]++
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, e := range els {
		wg.Go(func() {
			if err := e.Run(runCtx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	leader := recv(t, startedCh, "the first term")
	var goroutines int
	for i := range outages {
		if i == 1 {
			runtime.GC()
			goroutines = runtime.NumGoroutine()
		}
		links[leader].Cut()
		next := recv(t, startedCh, fmt.Sprintf("outage %d: the standby's term", i))
		if next == leader {
			t.Fatalf("outage %d: the cut-off leader led again", i)
		}
		links[leader].Mend()
		// The former leader stops its term once it sees the loss, and stands by again.
		old := leader
		pollUntil(t, "the former leader's stop", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return stopped[old] == started[old], fmt.Sprintf("elector %d: %d terms, %d stopped", old, started[old], stopped[old])
		})
		leader = next
	}
	pollUntil(t, "leading", func() (bool, string) {
		return els[leader].Leading(), fmt.Sprintf("elector %d not leading", leader)
	})
	pollUntil(t, "goroutines", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= goroutines+2, fmt.Sprintf("%d goroutines (after the first outage: %d)", n, goroutines)
	})
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i := range 2 {
		if started[i] != stopped[i] {
			t.Errorf("elector %d: OnStarted %d times, OnStopped %d times", i, started[i], stopped[i])
		}
	}
}
