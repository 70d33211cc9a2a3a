package reconciler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// splitEnv is a state server on the near node of a two-node cluster with a route that parts.
type splitEnv struct{ *splittest.Env }

func startSplit(t *testing.T) *splitEnv {
	return &splitEnv{splittest.Start(t, splittest.Options{Principals: []policy.Principal{admin}})}
}

// The tests of this file run the state server on node 1 of a two-node NATS cluster whose route a
// test can cut (or freeze) and mend, and the controller on node 0 (the far side): through a
// partition its connection stays up, and it reaches nothing of the state server. Requests fail at
// once with no responders (a cut route) or time out (a frozen one), and watch updates stop arriving,
// with no status change of its connection to tell.

// client connects the admin principal to node only (no other node learnt of).
func (e *splitEnv) client(t *testing.T, node int) *client.Client {
	t.Helper()
	c, err := client.New(e.Connect(t, node, admin.ID, client.Connect), admin.ID, client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A controller on the far side of a route partition: its cache says it follows nothing (though its
// connection never changed status); a key enqueued meanwhile is reconciled on the cache's last
// entries, as the package doc says; and once the route is back every key is reconciled once more,
// each exactly once and on the store's current state: the one updated, the one created, the one
// deleted (as gone) and the unchanged ones.
func TestControllerAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			e := startSplit(t)
			near := e.client(t, splittest.Near)
			far := e.client(t, splittest.Far)
			for i, k := range []string{"a", "b", "c", "d"} {
				putIntent(t, near, k, i, 0)
			}
			pr := newProbe(t)
			ctrl := pr.start(t, far, Options{CheckInterval: 100 * time.Millisecond})
			pr.barrier(t, "start")
			statuses := far.Conn().StatusChanged()
			defer far.Conn().RemoveStatusListener(statuses)

			p.Apart(e.Env, t)
			revB := putIntent(t, near, "b", 10, 0)
			deleteKey(t, near, "c")
			revE := putIntent(t, near, "e", 11, 0)
			awaitNotFollowing(t, ctrl)
			// Enqueued while the cache is cut off: reconciled on the last entries it had.
			ctrl.Enqueue(testPrefix + "c")
			if c := pr.next(t); c.key != testPrefix+"c" || !c.present {
				t.Fatalf("Reconcile while cut off: %+v, want c on the cache's last entries (present)", c)
			}
			resyncs := ctrl.Cache().Resyncs()

			e.Mend(t)
			want := map[string]call{
				testPrefix + "a": {present: true}, testPrefix + "b": {present: true, rev: revB},
				testPrefix + "c": {present: false}, testPrefix + "d": {present: true},
				testPrefix + "e": {present: true, rev: revE},
			}
			// The resync enqueues every key at once (one worker, FIFO): a barrier enqueued once the
			// new key e was reconciled comes after all of them.
			seen := pr.until(t, "e reconciled as created", func(c call) bool { return c.key == testPrefix+"e" })
			seen = append(seen, pr.barrier(t, "mended")...)
			got := map[string]int{}
			for _, c := range seen {
				got[c.key]++
				w, ok := want[c.key]
				if !ok {
					t.Errorf("unexpected Reconcile of %s after the mend", c.key)
					continue
				}
				if c.present != w.present || w.rev != 0 && c.rev != w.rev {
					t.Errorf("Reconcile of %s after the mend saw present=%v rev=%d, want present=%v rev=%d",
						c.key, c.present, c.rev, w.present, w.rev)
				}
			}
			for k := range want {
				if got[k] != 1 {
					t.Errorf("%s reconciled %d times after the mend, want once", k, got[k])
				}
			}
			if ctrl.Cache().Resyncs() <= resyncs || !ctrl.Cache().Following() {
				t.Fatalf("after the mend: resyncs %d (were %d), following %v", ctrl.Cache().Resyncs(), resyncs, ctrl.Cache().Following())
			}
			select {
			case s := <-statuses:
				t.Fatalf("the far connection went %v: not a route partition", s)
			default:
			}
		})
	}
}

// A Reconcile whose write cannot reach the store across a route partition fails (UNAVAILABLE at once
// after a cut, an unknown outcome after a timeout when frozen) and is retried with backoff, not
// dropped; its retries fail while the partition lasts, and one succeeds once it is mended.
func TestReconcileWriteAcrossARoutePartitionIsRetried(t *testing.T) {
	for _, p := range splittest.Partitions {
		t.Run(p.Name, func(t *testing.T) {
			e := startSplit(t)
			near := e.client(t, splittest.Near)
			far := e.client(t, splittest.Far)
			putIntent(t, near, "a", 1, 0)
			errs := make(chan error, 64)
			pr := newProbe(t)
			armed := make(chan struct{})
			pr.behave = func(ctx context.Context, c call, _ int) (Result, error) {
				select {
				case <-armed:
				default:
					return Result{}, nil
				}
				if c.key != testPrefix+"a" {
					return Result{}, nil
				}
				_, err := far.Put(ctx, wire.PutRequest{Namespace: testNS, Key: "status/a",
					Schema: ObservedStatusSchema, Document: ObservedStatus{SubjectKey: c.key, State: StateActive, ObservedAtMs: 1}.Document()})
				errs <- err
				return Result{}, err
			}
			ctrl := pr.start(t, far, Options{BaseBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
			pr.barrier(t, "start")
			p.Apart(e.Env, t)
			close(armed)
			ctrl.Enqueue(testPrefix + "a")
			for i := range 2 {
				err := recv(t, errs, "a failed write")
				if err == nil {
					t.Fatalf("write %d across the partition succeeded", i+1)
				}
				if p.Name == "cut" && !errors.Is(err, wire.ErrUnavailable) {
					t.Fatalf("write across a cut route: %v, want UNAVAILABLE", err)
				}
			}
			e.Mend(t)
			deadline := time.After(testTimeout)
			for {
				select {
				case err := <-errs:
					if err == nil {
						if _, err := near.Get(ctxT(t), testNS, "status/a"); err != nil {
							t.Fatalf("the status written once the route was back: %v", err)
						}
						return
					}
				case <-deadline:
					t.Fatal("the failed write was never retried to success once the route was back")
				}
			}
		})
	}
}
