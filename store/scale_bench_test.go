package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// BenchmarkNewWorkerPut measures the put of a new worker's status (a first heartbeat) while its
// principal already has n live workers: the max_workers_per_principal check must not walk them all.
// The store runs in memory (no fsync to drown the figure) on a still clock (no lease expires).
// Compare the sizes within one run: the machine is shared, the figures are noisy.
func BenchmarkNewWorkerPut(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			opts, clk := withClock(DefaultOptions())
			opts.InMemory = true
			opts.Bounds.MaxWorkersPerPrincipal = int64(n) + 1
			opts.Bounds.MaxEntriesPerNamespace = int64(n) + 16
			s, _ := openT(b, opts)
			ctx := ctxT(b)
			for i := range n {
				req := workerPut("alice", fmt.Sprintf("w%d", i))
				req.TTLMs = nil // they stay while the new one comes and goes
				if _, err := s.PutSystem(ctx, "alice", req); err != nil {
					b.Fatal(err)
				}
			}
			fresh := workerPut("alice", "new")
			fresh.TTLMs = i64(MinTTLMs)
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.PutSystem(ctx, "alice", fresh); err != nil {
					b.Fatal(err)
				}
				// It expires (nobody may delete in system): the next put is a new worker again.
				clk.advance(MinTTLMs * time.Millisecond)
				if r := s.submit(ctx, &mutation{kind: mutBarrier}); r.err != nil {
					b.Fatal(r.err)
				}
			}
		})
	}
}

// BenchmarkAckDeadlineLook measures the janitor's look for watches past the ack deadline (every
// 250 ms at most, holding the watch registry's lock, which every commit's fan-out waits for) with n
// live watches, all acknowledged: the look should not grow with the watches that owe no ack.
func BenchmarkAckDeadlineLook(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("watches=%d", n), func(b *testing.B) {
			opts := DefaultOptions()
			opts.InMemory = true
			opts.Bounds.MaxWatches = int64(n)
			opts.Bounds.MaxWatchesPerPrincipal = int64(n)
			s, _ := openT(b, opts)
			ctx := ctxT(b)
			sink := func(Message) {}
			for i := range n {
				req := wire.WatchRequest{WatchID: fmt.Sprintf("w%d", i), Namespace: fmt.Sprintf("service/s%d", i%1000)}
				if _, err := s.Watch(ctx, admin, req, sink); err != nil {
					b.Fatal(err)
				}
			}
			now := monoNow()
			b.ResetTimer()
			for b.Loop() {
				s.watches.expireAcks(now)
			}
		})
	}
}

// BenchmarkPutFanout measures a put that one watch matches while n other watches are live: spread
// over 1,000 other namespaces ("elsewhere"), or in the put's own namespace on other prefixes
// ("same-namespace"). The first should not grow with n; the second does (each watch of the namespace
// is tested against the key: see the report).
func BenchmarkPutFanout(b *testing.B) {
	for _, where := range []string{"elsewhere", "same-namespace"} {
		for _, n := range []int{100, 10_000} {
			b.Run(fmt.Sprintf("%s/watches=%d", where, n), func(b *testing.B) {
				opts := DefaultOptions()
				opts.InMemory = true
				opts.Bounds.MaxWatches = int64(n) + 1
				opts.Bounds.MaxWatchesPerPrincipal = int64(n) + 1
				s, _ := openT(b, opts)
				ctx := ctxT(b)
				const ns = "service/hot"
				sink := func(Message) {}
				for i := range n {
					req := wire.WatchRequest{WatchID: fmt.Sprintf("w%d", i), Namespace: ns, KeyPrefix: fmt.Sprintf("p%d/", i)}
					if where == "elsewhere" {
						req.Namespace, req.KeyPrefix = fmt.Sprintf("service/s%d", i%1000), ""
					}
					if _, err := s.Watch(ctx, admin, req, sink); err != nil {
						b.Fatal(err)
					}
				}
				// The one watch of the key acknowledges every update, so it never overflows.
				var seq int64
				acked := func(m Message) { seq = int64(m.Sequence) }
				if _, err := s.Watch(ctx, admin, wire.WatchRequest{WatchID: "hot", Namespace: ns, KeyPrefix: "k"}, acked); err != nil {
					b.Fatal(err)
				}
				put := putLease(ns, "k")
				b.ResetTimer()
				for b.Loop() {
					mustPut(b, s, admin, put)
					if err := s.Ack(ctx, admin, wire.AckRequest{WatchID: "hot", AppliedSequence: i64(seq)}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
