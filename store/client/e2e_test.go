package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// End-to-end tests against the real stated binary. An external NATS server without authorization
// (stated then serves its one admin principal, dev) keeps the clients connected across stated's
// restarts, and lets a relay (relay_test.go) stand between a client and stated.

// devID is the principal of a stated configured without principals.
const devID = "dev"

// externalStated starts stated on an in-process NATS server of its own; it returns both.
func externalStated(t *testing.T) (*e2e.Stated, string) {
	t.Helper()
	ns := natstest.Start(t, natsserver.Options{})
	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	s.Start()
	return s, ns.ClientURL()
}

// devClient connects to url as dev; its connection closes at cleanup.
func devClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	nc, err := Connect(url, devID, nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(nc, devID, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// retry runs op until it succeeds or ctx ends: stated may be starting (no responder yet).
func retry[T any](t *testing.T, ctx context.Context, what string, op func() (T, error)) T {
	t.Helper()
	for {
		v, err := op()
		if err == nil {
			return v
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond) // a retry pause while stated starts, not a synchronisation
	}
}

// putItem writes service/tx items/<name>, retrying while stated starts.
func putItem(t *testing.T, ctx context.Context, c *Client, name string) wire.Entry {
	t.Helper()
	return retry(t, ctx, "put "+name, func() (wire.Entry, error) {
		return c.Put(ctx, wire.PutRequest{Namespace: "service/tx", Key: "items/" + name, Schema: wire.SchemaLease,
			Document: json.RawMessage(`{"holder":"w","claimed_at_ms":1}`)})
	})
}

// epochOf asks the store for its epoch, retrying while stated starts.
func epochOf(t *testing.T, ctx context.Context, c *Client) string {
	t.Helper()
	return retry(t, ctx, "info", func() (string, error) {
		info, err := c.Info(ctx)
		if err == nil && info.Epoch == "" {
			err = errors.New("no epoch yet")
		}
		return info.Epoch, err
	})
}

// writtenPastABackup starts stated on a NATS server of its own, writes items/a, takes an offline
// backup, then writes n more items (b0, b1, ...): restoring the backup brings service/tx back below
// revisions a client has seen. It returns stated, the NATS URL, the writer's client, the backup and
// the last entry written.
func writtenPastABackup(t *testing.T, ctx context.Context, n int) (*e2e.Stated, string, *Client, string, wire.Entry) {
	t.Helper()
	s, url := externalStated(t)
	writer := devClient(t, url)
	putItem(t, ctx, writer, "a")
	backup := s.OfflineBackup()
	var last wire.Entry
	for i := range n {
		last = putItem(t, ctx, writer, fmt.Sprint("b", i))
	}
	return s, url, writer, backup, last
}

// matchesStore fails unless the cache holds exactly what the store lists under its prefix.
func matchesStore(t *testing.T, ctx context.Context, k *Cache, c *Client) {
	t.Helper()
	want, err := c.List(ctx, wire.ListRequest{Namespace: k.ns, KeyPrefix: k.prefix, Limit: 256})
	if err != nil {
		t.Fatal(err)
	}
	got := k.List()
	if len(got) != len(want.Entries) {
		t.Fatalf("cache holds %v, the store %v", keys(got), keys(want.Entries))
	}
	for i, e := range want.Entries {
		if got[i].Key != e.Key || got[i].Revision != e.Revision {
			t.Fatalf("cache holds %s, the store %s", got[i].String(), e.String())
		}
	}
}

// A restore, and the restart after it, can fall between the info a cache asks for its epoch and the
// watch it sends: the snapshot is then the restored store's, and must not be labelled with the old
// epoch (a writer of the new epoch would compare its revision with the cache's and wait for the
// wrong thing, or not at all).
func TestE2ECacheLabelsItsSnapshotWithItsOwnEpoch(t *testing.T) {
	ctx := ctxT(t)
	s, url, writer, backup, _ := writtenPastABackup(t, ctx, 5)
	oldEpoch := epochOf(t, ctx, writer)

	watchSeen, release := make(chan struct{}), make(chan struct{})
	var r *relay
	r = startRelay(t, url, relayHooks{before: func(op wire.Op, n int) bool {
		if op == wire.OpWatch && n == 1 {
			close(watchSeen)
			select {
			case <-release:
			case <-r.stopped:
			}
		}
		return true
	}})
	reader := devClient(t, url, WithPrefix(relayPrefix), WithRequestTimeout(testTimeout))
	type result struct {
		k   *Cache
		err error
	}
	started := make(chan result, 1)
	go func() {
		k, err := reader.NewCache(ctx, CacheOptions{Namespace: "service/tx", KeyPrefix: "items/", CheckInterval: -1})
		started <- result{k, err}
	}()
	select {
	case <-watchSeen: // the cache has its epoch from info; its watch request is on the way
	case <-ctx.Done():
		t.Fatal("no watch request")
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	s.Restore(backup)
	newEpoch := epochOf(t, ctx, writer) // the restored store serves: the held watch reaches it
	if newEpoch == oldEpoch {
		t.Fatalf("epoch %q after the restore", newEpoch)
	}
	close(release)
	res := <-started
	if res.err != nil {
		t.Fatal(res.err)
	}
	k := res.k
	defer k.Close()
	if got := k.Epoch(); got != newEpoch {
		t.Fatalf("the cache holds the restored store's snapshot (revision %d, %d entries) under epoch %q, the store is in %q (was %q)",
			k.Revision(), len(k.List()), got, newEpoch, oldEpoch)
	}
	matchesStore(t, ctx, k, writer)
}

// A writer that waits for its write with WaitForRevision (or WaitForRevisionIn, with the epoch it
// read before writing) must not be told its write is in the cache when a restore the cache has not
// seen yet fell before the write: the restored store's revisions start lower, and the cache, still on
// the old epoch, is already past them.
func TestE2EWaitForRevisionAcrossARestoreTheCacheHasNotSeen(t *testing.T) {
	ctx := ctxT(t)
	s, url, writer, backup, last := writtenPastABackup(t, ctx, 10)
	// No liveness checks: nothing tells the cache of the restart (its NATS server stays up, and a
	// killed stated sends no close) but what the wait itself learns.
	k := newCache(t, devClient(t, url), CacheOptions{Namespace: "service/tx", KeyPrefix: "items/", CheckInterval: -1})
	if err := k.WaitForRevision(ctx, last.Revision); err != nil {
		t.Fatal(err)
	}
	oldEpoch := k.Epoch()

	s.Kill()
	s.Restore(backup)
	mine := putItem(t, ctx, writer, "mine") // the restored store's revision 2
	if mine.Revision >= last.Revision {
		t.Fatalf("revision %d after the restore, want one below %d", mine.Revision, last.Revision)
	}
	for name, wait := range map[string]func() error{
		"WaitForRevisionIn": func() error { return k.WaitForRevisionIn(ctx, oldEpoch, mine.Revision) },
		"WaitForRevision":   func() error { return k.WaitForRevision(ctx, mine.Revision) },
	} {
		err := wait()
		if err == nil {
			if _, held := k.Get("items/mine"); !held {
				t.Fatalf("%s(%d) returned nil, and the cache (epoch %q) does not hold the write", name, mine.Revision, k.Epoch())
			}
			continue
		}
		if !errors.Is(err, ErrEpochChanged) {
			t.Fatalf("%s(%d) = %v, want ErrEpochChanged", name, mine.Revision, err)
		}
	}
	// What the wait learned makes the cache resync: it then holds the write, in the new epoch.
	newEpoch := epochOf(t, ctx, writer)
	waitInEpoch(t, ctx, k, newEpoch, mine.Revision)
	if _, held := k.Get("items/mine"); !held {
		t.Fatal("the cache does not hold the write it waited for")
	}
	matchesStore(t, ctx, k, writer)
}

// While OnResync runs for the first snapshot of a new epoch, the cache holds the new entries but the
// handler has not returned: no revision of the new epoch is reached yet. The old epoch's revision,
// higher than the new one's, must not count as one of the new epoch meanwhile: a writer of the new
// epoch would be told its write had reached the handlers before they ran.
func TestE2ENoRevisionOfANewEpochCountsBeforeItsOnResyncReturns(t *testing.T) {
	ctx := ctxT(t)
	s, url, writer, backup, last := writtenPastABackup(t, ctx, 10)
	var k *Cache
	installed := make(chan struct{})
	type seen struct {
		epoch   string
		rev     uint64
		snapRev uint64
		waited  error // what a wait for the handler's own revision returned while it ran
	}
	inNewEpoch := make(chan seen, 1)
	var handlerDone atomic.Bool
	k = newCache(t, devClient(t, url), CacheOptions{Namespace: "service/tx", KeyPrefix: "items/", CheckInterval: 100 * time.Millisecond,
		Handlers: Handlers{OnResync: func(_ []wire.Entry, rev uint64) {
			select {
			case <-installed:
			default:
				return // the first snapshot, before k is set
			}
			if rev >= last.Revision {
				return // still the old epoch
			}
			sn := seen{epoch: k.Epoch(), rev: k.Revision(), snapRev: rev}
			waited := make(chan error, 1)
			go func() {
				err := k.WaitForRevisionIn(ctx, sn.epoch, rev)
				if err == nil && !handlerDone.Load() {
					err = errors.New("returned before OnResync did")
				}
				waited <- err
			}()
			select {
			case sn.waited = <-waited: // too early
			case <-time.After(300 * time.Millisecond): // not an event: the wait must go on
			}
			inNewEpoch <- sn
			handlerDone.Store(true)
		}}})
	close(installed)
	if err := k.WaitForRevision(ctx, last.Revision); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Restore(backup) // the cache's next liveness check finds its watch gone
	var sn seen
	select {
	case sn = <-inNewEpoch:
	case <-ctx.Done():
		t.Fatal("the cache never resynced to the restored store")
	}
	if sn.waited != nil {
		t.Errorf("a wait for revision %d of the new epoch, during its OnResync: %v", sn.snapRev, sn.waited)
	}
	if sn.rev > sn.snapRev {
		t.Errorf("during OnResync of the new epoch's snapshot at revision %d, Epoch %q and Revision %d (the old epoch's)",
			sn.snapRev, sn.epoch, sn.rev)
	}
	if err := k.WaitForRevision(ctx, sn.snapRev); err != nil {
		t.Fatal(err)
	}
	matchesStore(t, ctx, k, writer)
}

// waitInEpoch waits until k holds revision rev of epoch, the store's new one after a restore: while k
// still holds the old epoch, each wait answers ErrEpochChanged and the next waits for k to change.
func waitInEpoch(t *testing.T, ctx context.Context, k *Cache, epoch string, rev uint64) {
	t.Helper()
	for {
		err := k.WaitForRevisionIn(ctx, epoch, rev)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrEpochChanged) {
			t.Fatal(err)
		}
		k.mu.RLock()
		changed := k.changed
		k.mu.RUnlock()
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the cache never moved to the new epoch")
		}
	}
}
