package main_test

import (
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// After a restore (a new epoch, SPEC section 4) a Cache resyncs to the restored state, says so with
// Epoch, and a writer waiting for a revision of the old epoch is told that it is void rather than left
// waiting, or told later that an unrelated write of the new epoch reached that number.
func TestE2ECacheAcrossARestore(t *testing.T) {
	s, ctx := startWith(t, "")
	writer := goClient(t, s, "coordinator")
	reader := goClient(t, s, "coordinator")
	put := func(key string) wire.Entry {
		t.Helper()
		for {
			e, err := writer.Put(ctx, wire.PutRequest{Namespace: "service/tx", Key: key, Schema: wire.SchemaLease, Document: []byte(leaseDoc)})
			if err == nil {
				return e
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			// Still reconnecting after a restart: a retry pause, not a synchronisation.
			t.Logf("put %s: %v; again", key, err)
			time.Sleep(20 * time.Millisecond)
		}
	}
	put("items/a")
	backup := s.OfflineBackup()

	cache, err := reader.NewCache(ctx, client.CacheOptions{Namespace: "service/tx", KeyPrefix: "items/", CheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	oldEpoch := cache.Epoch()
	var mine wire.Entry
	for _, k := range []string{"items/b", "items/c", "items/d"} {
		mine = put(k)
	}
	if err := cache.WaitForRevisionIn(ctx, oldEpoch, mine.Revision); err != nil {
		t.Fatal(err)
	}
	// A wait for a revision the old epoch never reaches, across the restore.
	waited := make(chan error, 1)
	go func() { waited <- cache.WaitForRevision(ctx, mine.Revision+100) }()

	s.Restore(backup)

	select {
	case err := <-waited:
		if !errors.Is(err, client.ErrEpochChanged) {
			t.Fatalf("a wait across the restore returned %v, want ErrEpochChanged", err)
		}
	case <-ctx.Done():
		t.Fatal("a wait across the restore never returned")
	}
	newEpoch := cache.Epoch()
	if newEpoch == oldEpoch || newEpoch == "" {
		t.Fatalf("epoch %q after the restore, was %q", newEpoch, oldEpoch)
	}
	if _, held := cache.Get("items/d"); held || cache.Revision() >= mine.Revision {
		t.Fatalf("after the restore the cache holds items/d %v at revision %d", held, cache.Revision())
	}
	// The writer's revision of the old epoch is void, however far the new epoch goes.
	for _, k := range []string{"items/x", "items/y", "items/z"} {
		put(k)
	}
	if err := cache.WaitForRevisionIn(ctx, oldEpoch, mine.Revision); !errors.Is(err, client.ErrEpochChanged) {
		t.Fatalf("WaitForRevisionIn(old epoch, %d) = %v, want ErrEpochChanged", mine.Revision, err)
	}
}
