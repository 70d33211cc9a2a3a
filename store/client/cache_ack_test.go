package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// observeAcks returns the applied_sequence of every ack principal sends for watchID, in order, as the
// server receives them: a plain subscriber beside the state service.
func observeAcks(t *testing.T, env *testenv.Env, principal, watchID string) <-chan uint64 {
	t.Helper()
	nc, err := nats.Connect(env.URL, nats.Name("ack observer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	acks := make(chan uint64, 1024)
	_, err = nc.Subscribe(wire.StateSubject(wire.DefaultPrefix, principal, wire.OpAck), func(m *nats.Msg) {
		var req wire.AckRequest
		if err := wire.Decode(m.Data, &req); err != nil || req.AppliedSequence == nil {
			t.Errorf("ack request %s: %v", m.Data, err)
			return
		}
		if req.WatchID == watchID {
			acks <- uint64(*req.AppliedSequence)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return acks
}

// ackedCache starts the state service (with bounds, when set), and a cache of alice's namespace with
// the given ack delay and no liveness checks (they would ack too), watched by observeAcks.
func ackedCache(t *testing.T, bounds *wire.Bounds, delay time.Duration) (*Client, *Cache, <-chan uint64) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{Principals: []policy.Principal{admin, alice, bob}, Bounds: bounds})
	c := newClient(t, env, alice.ID)
	k := newCache(t, c, CacheOptions{Namespace: "user/alice", WatchID: "acked", AckDelay: delay, CheckInterval: -1})
	return c, k, observeAcks(t, env, alice.ID, k.WatchID())
}

func nextAck(t *testing.T, acks <-chan uint64) uint64 {
	t.Helper()
	select {
	case seq := <-acks:
		return seq
	case <-time.After(testTimeout):
		t.Fatal("no ack")
	}
	return 0
}

// acksUntil collects acks until one acknowledges last, checking that each acknowledges more than
// the one before.
func acksUntil(t *testing.T, acks <-chan uint64, last uint64) []uint64 {
	t.Helper()
	var got []uint64
	for len(got) == 0 || got[len(got)-1] < last {
		seq := nextAck(t, acks)
		if len(got) > 0 && seq <= got[len(got)-1] {
			t.Fatalf("ack of %d after %v", seq, got)
		}
		got = append(got, seq)
	}
	if got[len(got)-1] != last {
		t.Fatalf("acks %v go past %d", got, last)
	}
	return got
}

// putApplied puts n preferences one after another, each waited for until the cache applied it, so
// that every update reaches the cache in a batch of its own.
func putApplied(t *testing.T, c *Client, k *Cache, ns string, n int) {
	t.Helper()
	ctx := ctxT(t)
	for i := range n {
		e, err := c.Put(ctx, preference(ns, fmt.Sprintf("k%02d", i), "x"))
		if err != nil {
			t.Fatal(err)
		}
		if err := k.WaitForRevision(ctx, e.Revision); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAckEvery(t *testing.T) {
	for _, c := range []struct {
		bound int64
		want  uint64
	}{{32, 16}, {1000, 16}, {33, 16}, {8, 4}, {4, 2}, {3, 1}, {1, 1}} {
		if got := ackEvery(c.bound); got != c.want {
			t.Errorf("ackEvery(%d) = %d, want %d", c.bound, got, c.want)
		}
	}
}

// A held-back ack covers every update applied meanwhile: with a delay that never elapses, the first
// ack goes out when half of max_pending_updates (32) are applied, and acknowledges all of them.
func TestCacheHoldsBackAcks(t *testing.T) {
	const ns = "user/alice"
	c, k, acks := ackedCache(t, nil, time.Hour)
	putApplied(t, c, k, ns, 16)
	if seq := nextAck(t, acks); seq != 16 {
		t.Fatalf("first ack acknowledges %d, want 16 (one ack for the 16 updates)", seq)
	}
	putApplied(t, c, k, ns, 16)
	if seq := nextAck(t, acks); seq != 32 {
		t.Fatalf("second ack acknowledges %d, want 32", seq)
	}
	if k.Resyncs() != 0 {
		t.Fatalf("%d resyncs", k.Resyncs())
	}
}

// The held-back ack goes out once the delay elapses; a negative delay acks each batch at once.
func TestCacheAckDelay(t *testing.T) {
	for _, delay := range []time.Duration{-1, 20 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			const ns = "user/alice"
			c, k, acks := ackedCache(t, nil, delay)
			putApplied(t, c, k, ns, 3)
			got := acksUntil(t, acks, 3)
			if delay < 0 && fmt.Sprint(got) != "[1 2 3]" {
				t.Fatalf("acks %v, want one per update ([1 2 3])", got)
			}
		})
	}
}

// A server with a small max_pending_updates gets acks often enough: the cache reads the bound from
// info, so held-back acks never make the server close the watch with OVERFLOW.
func TestCacheAcksWithinASmallPendingBound(t *testing.T) {
	b := wire.DefaultBounds()
	b.MaxPendingUpdates = 4
	const ns = "user/alice"
	c, k, acks := ackedCache(t, &b, time.Hour)
	putApplied(t, c, k, ns, 12)
	if got := acksUntil(t, acks, 12); fmt.Sprint(got) != "[2 4 6 8 10 12]" {
		t.Fatalf("acks %v, want one every 2 updates", got)
	}
	if k.Resyncs() != 0 {
		t.Fatalf("%d resyncs: the watch overflowed", k.Resyncs())
	}
}

// A held-back ack goes out before the server's ack deadline, however long AckDelay is: the cache cuts
// it to half of ack_deadline_ms, so the server never closes a healthy cache's watch with ACK_TIMEOUT.
func TestCacheAckDelayStaysWithinTheAckDeadline(t *testing.T) {
	b := wire.DefaultBounds()
	b.AckDeadlineMs = 400
	const ns = "user/alice"
	c, k, acks := ackedCache(t, &b, time.Hour)
	putApplied(t, c, k, ns, 1)
	if seq := nextAck(t, acks); seq != 1 {
		t.Fatalf("ack of %d, want 1", seq)
	}
	// The watch is still live: a later update arrives through it, with no resync.
	putApplied(t, c, k, ns, 1)
	if k.Resyncs() != 0 {
		t.Fatalf("%d resyncs", k.Resyncs())
	}
}
