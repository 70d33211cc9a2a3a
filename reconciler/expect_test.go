package reconciler

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// Expectations a controller-runtime user brings to the controller, checked against a real store.

// A key whose Reconcile asked to be looked at again later (RequeueAfter, Requeue, an error's backoff)
// and that an event reconciles before then is not reconciled once more when the old schedule comes
// due: the Reconcile the event started superseded it, and its own Result (here: done) decides.
//
// A marker key scheduled with the same delay after a's schedule comes due after it, and the single
// worker takes keys in order: by the marker's second Reconcile, a stale run of a would have begun.
func TestEventSupersedesAScheduledRequeue(t *testing.T) {
	const d = time.Second
	for _, tc := range []struct {
		name  string
		res   Result
		err   error
		needs string
	}{
		{"RequeueAfter", Result{RequeueAfter: d}, nil, "its RequeueAfter"},
		{"Requeue", Result{Requeue: true}, nil, "its Requeue's backoff"},
		{"error", Result{}, errors.New("fails once"), "its error's backoff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A run whose put is reconciled only after a's schedule came due (a machine stalled for
			// a whole d) proves nothing either way: it is run again, a few times at most.
			for attempt := 1; !supersedeOnce(t, tc.res, tc.err, tc.needs, d); attempt++ {
				if attempt == 3 {
					t.Fatalf("in %d runs, the put's Reconcile of a never began before a's schedule came due", attempt)
				}
			}
		})
	}
}

// supersedeOnce runs TestEventSupersedesAScheduledRequeue's scenario once; it reports false, having
// checked nothing, when the put's Reconcile began after a's schedule came due.
func supersedeOnce(t *testing.T, res Result, rerr error, needs string, d time.Duration) bool {
	t.Helper()
	_, c := setup(t)
	putIntent(t, c, "a", 1, 0)
	const a, marker = testPrefix + "a", testPrefix + "zz-marker"
	p := newProbe(t)
	p.behave = func(_ context.Context, cl call, n int) (Result, error) {
		switch {
		case cl.key == a && n == 1:
			return res, rerr
		case cl.key == marker && n == 1:
			return Result{RequeueAfter: d}, nil
		}
		return Result{}, nil
	}
	ctrl := p.start(t, c, Options{BaseBackoff: d, MaxBackoff: d})
	first := p.until(t, "a's first Reconcile", func(cl call) bool { return cl.key == a })
	due := first[len(first)-1].end.Add(d) // a's schedule comes due after this
	ctrl.Enqueue(marker)                  // reconciled after a's first Reconcile returned: due later
	p.until(t, "the marker's first Reconcile", func(cl call) bool { return cl.key == marker })

	rev := putIntent(t, c, "a", 2, 0)
	ev := p.until(t, "the put's Reconcile of a", func(cl call) bool { return cl.key == a && cl.rev == rev })
	if late := ev[len(ev)-1].start.Sub(due); late > 0 {
		t.Logf("the put's Reconcile began %v after a's schedule came due: nothing to check", late)
		ctrl.Stop()
		return false
	}
	p.until(t, "the marker's second Reconcile", func(cl call) bool { return cl.key == marker })
	if n := p.countOf(a); n != 2 {
		t.Fatalf("a reconciled %d times, want 2: the put's Reconcile returned done, yet %s ran it again",
			n, needs)
	}
	return true
}

// awaitNotFollowing waits until ctrl's cache says it no longer follows the store (no event tells).
func awaitNotFollowing(t *testing.T, ctrl *Controller) {
	t.Helper()
	natstest.Poll(t, testTimeout, "the cache to notice it no longer follows", func() (bool, string) {
		return !ctrl.Cache().Following(), "following"
	})
}

// A key deleted while the controller's connection to NATS is down, or while stated restarts, gets no
// DELETE: the cache learns it from the snapshot it installs once it follows again, and the key is
// reconciled as gone (and a key created meanwhile as present).
func TestDeleteDuringAnOutageIsReconciledAsGone(t *testing.T) {
	t.Run("NATS link", func(t *testing.T) {
		env, ac := setup(t)
		putIntent(t, ac, "a", 1, 0)
		putIntent(t, ac, "b", 2, 0)
		link := natstest.NewCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
		nc, err := client.Connect(link.URL(), "coordinator", nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := client.New(nc, "coordinator", client.WithRequestTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		p := newProbe(t)
		ctrl := p.start(t, c, Options{})
		p.barrier(t, "start")

		link.Cut()
		awaitNotFollowing(t, ctrl)
		deleteKey(t, ac, "a")
		rev := putIntent(t, ac, "c", 3, 0)
		link.Mend()
		awaitGoneAndNew(t, p, rev)
	})
	t.Run("stated restart", func(t *testing.T) {
		dir := t.TempDir()
		env := testenv.Start(t, testenv.Options{DataDir: dir})
		ac, err := client.New(env.Connect(t, "coordinator"), "coordinator")
		if err != nil {
			t.Fatal(err)
		}
		putIntent(t, ac, "a", 1, 0)
		putIntent(t, ac, "b", 2, 0)
		p := newProbe(t)
		ctrl := p.start(t, ac, Options{})
		p.barrier(t, "start")

		if err := env.Server.Stop(ctxT(t)); err != nil { // closes the store and the watches (SHUTDOWN)
			t.Fatal(err)
		}
		awaitNotFollowing(t, ctrl)
		// While no stated answers, the store changes (as a restore or an offline tool would change it).
		st, err := store.Open(filepath.Join(dir, "state-store.db"), store.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Delete(ctxT(t), admin, wire.DeleteRequest{Namespace: testNS, Key: testPrefix + "a"}); err != nil {
			t.Fatal(err)
		}
		e, err := st.Put(ctxT(t), admin, wire.PutRequest{Namespace: testNS, Key: testPrefix + "c",
			Schema: MediaIntentSchema, Document: intentDoc(3)})
		if err != nil {
			t.Fatal(err)
		}
		snc, err := nats.Connect(env.URL, nats.Name("stated"))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(st, snc, server.Options{Principals: testenv.DefaultPrincipals})
		if err == nil {
			err = srv.Start()
		}
		if err != nil {
			snc.Close()
			st.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_ = srv.Stop(ctx)
			snc.Close()
		})
		awaitGoneAndNew(t, p, e.Revision)
	})
}

// awaitGoneAndNew waits for a Reconcile of intents/a that finds it gone and one of intents/c that
// finds it at revision rev.
func awaitGoneAndNew(t *testing.T, p *probe, rev uint64) {
	t.Helper()
	var gone, added bool
	p.until(t, "a reconciled as gone and c as present", func(cl call) bool {
		switch cl.key {
		case testPrefix + "a":
			gone = gone || !cl.present
		case testPrefix + "c":
			added = added || cl.present && cl.rev == rev
		}
		return gone && added
	})
	if _, ok := p.ctrl.Cache().Get(testPrefix + "a"); ok {
		t.Fatal("the cache still holds the deleted key")
	}
}

// An event storm on one key starves no other: a key enqueued while the hot key storms is reconciled
// after at most one more Reconcile of the hot key (the queue is FIFO and holds a key once), and the
// periodic resync still reaches every key.
func TestEventStormOnOneKeyStarvesNoOther(t *testing.T) {
	_, c := setup(t)
	for i, k := range []string{"hot", "b", "c", "d"} {
		putIntent(t, c, k, i, 0)
	}
	const hot = testPrefix + "hot"
	type bCall struct {
		rev uint64
		hot int // Reconciles of the hot key begun by then
	}
	bCalls := make(chan bCall, 4096)
	p := newProbe(t)
	p.behave = func(_ context.Context, cl call, _ int) (Result, error) {
		if cl.key == testPrefix+"b" {
			bCalls <- bCall{cl.rev, p.countOf(hot)}
		}
		return Result{}, nil
	}
	ctrl := p.start(t, c, Options{ResyncEvery: 50 * time.Millisecond})
	p.barrier(t, "start")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	ctx := ctxT(t)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Put(ctx, wire.PutRequest{Namespace: testNS, Key: hot, Schema: MediaIntentSchema,
				Document: intentDoc(i)}); err != nil {
				t.Errorf("put hot: %v", err)
				return
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for range 3 {
		ctrl.Enqueue(hot) // storm through Enqueue too
	}

	// The periodic resync reaches every key, storm or not.
	seen := map[string]int{}
	p.until(t, "two periodic Reconciles of b, c and d", func(cl call) bool {
		seen[cl.key]++
		return seen[testPrefix+"b"] >= 2 && seen[testPrefix+"c"] >= 2 && seen[testPrefix+"d"] >= 2
	})
	if seen[hot] == 0 {
		t.Fatal("the hot key was not reconciled during its storm")
	}

	// A change of b waits behind at most one Reconcile of the hot key.
	e, err := c.Put(ctxT(t), wire.PutRequest{Namespace: testNS, Key: testPrefix + "b", Schema: MediaIntentSchema, Document: intentDoc(7)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Cache().WaitForRevision(ctxT(t), e.Revision); err != nil { // b is enqueued by now
		t.Fatal(err)
	}
	h0 := p.countOf(hot)
	for {
		bc := recv(t, bCalls, "b's Reconcile of its change")
		if bc.rev != e.Revision {
			continue
		}
		if bc.hot-h0 > 1 {
			t.Fatalf("%d Reconciles of the hot key began between b's change and b's Reconcile, want at most 1", bc.hot-h0)
		}
		break
	}
}
