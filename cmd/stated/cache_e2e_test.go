package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// TestE2ECacheSurvivesRestart: a client Cache survives NATS reconnects and stated restarts (one clean,
// one SIGKILL) by re-snapshotting, with nothing lost or doubled.
func TestE2ECacheSurvivesRestart(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	readerConn, _ := conn(t, s, "coordinator")
	reader, err := client.New(readerConn, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	applied := map[string]uint64{} // key -> revision, rebuilt from the handlers alone
	cache, err := reader.NewCache(ctx, client.CacheOptions{Namespace: "service/tx", KeyPrefix: "items/", CheckInterval: 200 * time.Millisecond,
		Handlers: client.Handlers{
			OnPut: func(e wire.Entry) {
				mu.Lock()
				defer mu.Unlock()
				if prev, ok := applied[e.Key]; ok && prev >= e.Revision {
					t.Errorf("PUT %s at %d applied after %d: doubled or out of order", e.Key, e.Revision, prev)
				}
				applied[e.Key] = e.Revision
			},
			OnDelete: func(key string, _ uint64) { mu.Lock(); delete(applied, key); mu.Unlock() },
			OnResync: func(snapshot []wire.Entry, _ uint64) {
				mu.Lock()
				defer mu.Unlock()
				clear(applied)
				for _, e := range snapshot {
					applied[e.Key] = e.Revision
				}
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()

	writerConn, _ := conn(t, s, "coordinator")
	writer, _ := client.New(writerConn, "coordinator")
	put := func(i int) wire.Entry {
		t.Helper()
		for {
			e, err := writer.Put(ctx, wire.PutRequest{Namespace: "service/tx", Key: fmt.Sprintf("items/%d", i%20),
				Schema: "keeppeek.lease.v1", Document: json.RawMessage(fmt.Sprintf(`{"holder":"w%d","claimed_at_ms":1}`, i))})
			if err == nil {
				return e
			}
			if ctx.Err() != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			// stated is restarting: the write did not happen or will be seen in the next snapshot
		}
	}
	i := 0
	for round, restart := range []func(){func() { s.Term(); s.Start() }, func() { s.Kill(); s.Start() }, nil} {
		var last wire.Entry
		for range 30 {
			last = put(i)
			i++
		}
		if err := cache.WaitForRevision(ctx, last.Revision); err != nil {
			t.Fatalf("round %d: cache never reached revision %d: %v", round, last.Revision, err)
		}
		want, err := writer.List(ctx, wire.ListRequest{Namespace: "service/tx", KeyPrefix: "items/"})
		if err != nil {
			t.Fatal(err)
		}
		got := cache.List()
		if len(got) != len(want.Entries) {
			t.Fatalf("round %d: cache has %d entries, the store %d", round, len(got), len(want.Entries))
		}
		mu.Lock()
		for j, e := range want.Entries {
			if handled := applied[e.Key]; got[j].Key != e.Key || got[j].Revision != e.Revision || handled != e.Revision {
				mu.Unlock()
				t.Fatalf("round %d: cache %s@%d, handlers %d, store %s@%d", round, got[j].Key, got[j].Revision, handled, e.Key, e.Revision)
			}
		}
		mu.Unlock()
		if restart != nil {
			restart()
		}
	}
	if cache.Resyncs() < 2 {
		t.Fatalf("cache resynced %d times across two restarts", cache.Resyncs())
	}
}
