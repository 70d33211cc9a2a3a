package client

import (
	"errors"
	"sync"
	"testing"
)

// Waiters that each learn from info that the store left the cache's epoch all nudge the cache to
// resync. Once the cache has resynced to the new epoch, a nudge about the old one is stale: acting on
// it would drop a watch that follows the right epoch and re-snapshot for nothing (another OnResync,
// another unwatch and watch).
func TestE2EStaleEpochNudgesResyncOnce(t *testing.T) {
	ctx := ctxT(t)
	s, url, writer, backup, last := writtenPastABackup(t, ctx, 10)
	r := newRecorder()
	// No liveness checks, and its NATS server stays up: only the waiters tell the cache of the restore.
	k := newCache(t, devClient(t, url), CacheOptions{Namespace: "service/tx", KeyPrefix: "items/", CheckInterval: -1, Handlers: r.handlers()})
	if err := k.WaitForRevision(ctx, last.Revision); err != nil {
		t.Fatal(err)
	}
	oldEpoch := k.Epoch()
	s.Kill()
	s.Restore(backup)
	newEpoch := epochOf(t, ctx, writer)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			// A revision the cache reached in the old epoch: the wait asks info, which names the new one.
			if err := k.WaitForRevisionIn(ctx, oldEpoch, 1); !errors.Is(err, ErrEpochChanged) {
				t.Errorf("WaitForRevisionIn(old epoch, 1) = %v, want ErrEpochChanged", err)
			}
		})
	}
	wg.Wait()
	// A write of the new epoch, waited for: every nudge sent above has been taken by now or is next.
	mine := putItem(t, ctx, writer, "mine")
	waitInEpoch(t, ctx, k, newEpoch, mine.Revision)
	// A write after that, waited for too: a stale nudge still queued would have been taken before it.
	again := putItem(t, ctx, writer, "again")
	if err := k.WaitForRevision(ctx, again.Revision); err != nil {
		t.Fatal(err)
	}
	if n := k.Resyncs(); n != 1 {
		t.Errorf("the cache resynced %d times for one restore, want 1", n)
	}
	matchesStore(t, ctx, k, writer)
}
