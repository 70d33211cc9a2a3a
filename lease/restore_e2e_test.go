package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// The end-to-end tests of this file run the real stated binary: a restore (SPEC section 10) needs the
// server stopped and started again.

const e2ePassword = "coordinator-pw"

// startStated runs stated with one admin principal, "coordinator".
func startStated(t *testing.T) *e2e.Stated {
	t.Helper()
	s := e2e.NewStated(t, e2e.Config{Principals: []e2e.Principal{{ID: "coordinator", Admin: true, Password: e2ePassword}}})
	s.Start()
	return s
}

// statedClient returns a coordinator client of s on a connection of its own that reconnects for ever.
func statedClient(t *testing.T, s *e2e.Stated) *client.Client {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.UserInfo("coordinator", e2ePassword),
		nats.CustomInboxPrefix(wire.InboxPrefix("coordinator")), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "coordinator", client.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCampaignAcrossARestore: a standby whose claim was refused, in the epoch before a restore, by a
// holder at some revision, must not wait for the restored store to reach that revision (a number of
// the void epoch, SPEC section 4): the restored store has no holder, so the standby claims.
func TestCampaignAcrossARestore(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	holder, standby := statedClient(t, s), statedClient(t, s)
	backup := s.OfflineBackup() // the namespace was never written: its revision is 0

	// The holder's claim gets a revision the restored namespace will not reach during the test.
	for i := range 20 {
		if _, err := holder.Put(ctx, wire.PutRequest{Namespace: ns, Key: "jobs/filler", Schema: wire.SchemaObservedStatus,
			Document: json.RawMessage(fmt.Sprintf(`{"subject_key":"job","state":"active","observed_at_ms":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	la, err := lease.Claim(ctx, holder, opts(key, "replica-a", time.Minute)) // no renewal during the test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseNow(t, la) }) // void after the restore: nothing to delete

	refusals := 0
	o := lease.WithHooks(opts(key, "replica-b", 2*time.Second), lease.TestHooks{Held: func() {
		refusals++
		if refusals == 1 { // refused by replica-a at its revision; the store is restored now
			s.Restore(backup)
		}
	}})
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	lb, err := lease.Campaign(cctx, standby, o)
	if err != nil {
		t.Fatalf("Campaign after a restore that left the lease free: %v (refused %d times)", err, refusals)
	}
	t.Cleanup(func() { releaseNow(t, lb) })
	if !lb.Held() || refusals != 1 {
		t.Fatalf("standby: held %v after %d refusals", lb.Held(), refusals)
	}
	e, err := standby.Get(ctx, ns, key)
	if err != nil || decodeLease(t, e).Holder != "replica-b" || e.Revision != lb.Revision() {
		t.Fatalf("lease entry after the campaign: %+v %v", e, err)
	}
}

// TestCampaignWaitingThroughARestore: a standby already waiting for a held lease (its cache holds the
// holder's entry) when the store is restored to a backup without that entry must claim in the new
// epoch: its cache resyncs to a snapshot without the key, and the standby sees the lease free.
func TestCampaignWaitingThroughARestore(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	holder, standby := statedClient(t, s), statedClient(t, s)
	backup := s.OfflineBackup() // no lease in it

	la, err := lease.Claim(ctx, holder, opts(key, "replica-a", time.Minute)) // no renewal during the test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseNow(t, la) }) // void after the restore: nothing to delete

	refusals, waits := 0, 0
	o := lease.WithHooks(opts(key, "replica-b", 2*time.Second), lease.TestHooks{
		Held: func() { refusals++ },
		Wait: func() {
			if waits++; waits == 1 { // waiting behind replica-a's entry: restore under the wait
				s.Restore(backup)
			}
		},
	})
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	lb, err := lease.Campaign(cctx, standby, o)
	if err != nil {
		t.Fatalf("Campaign waiting through a restore that left the lease free: %v (refused %d times, waited %d)", err, refusals, waits)
	}
	t.Cleanup(func() { releaseNow(t, lb) })
	if !lb.Held() || refusals != 1 || waits != 1 {
		t.Fatalf("standby: held %v after %d refusals and %d waits", lb.Held(), refusals, waits)
	}
	e, err := standby.Get(ctx, ns, key)
	if err != nil || decodeLease(t, e).Holder != "replica-b" || e.Revision != lb.Revision() {
		t.Fatalf("lease entry after the campaign: %+v %v", e, err)
	}
}

// A claim refused after the key looked free (a rival took it first) is followed by a wait for the
// cache to reach the refusal's revision. When a restore comes between, and the cache already holds
// the restored store's epoch, that revision belongs to the old epoch and may never come in the new
// one: Campaign must claim again (the restored store has the key free), not wait for it.
func TestCampaignRefusedJustBeforeARestore(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, rival, standby := statedClient(t, s), statedClient(t, s), statedClient(t, s)
	backup := s.OfflineBackup() // no lease in it, the namespace at a lower revision
	info, err := standby.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	la, err := lease.Claim(ctx, holder, opts(key, "replica-a", time.Minute)) // no renewal during the test
	if err != nil {
		t.Fatal(err)
	}

	var claims, refusals, heldWaits, waits int
	var rivalRev uint64
	o := lease.WithHooks(opts(key, "replica-b", 2*time.Second), lease.TestHooks{
		Wait: func() { // behind replica-a: it releases, and the standby's cache sees the key free
			if waits++; waits == 1 {
				if err := la.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		},
		Claim: func() { // a rival takes the key first: the standby's claim is refused
			if claims++; claims == 1 {
				lr, err := lease.Claim(ctx, rival, opts(key, "replica-c", time.Minute))
				if err != nil {
					t.Errorf("rival claim: %v", err)
					return
				}
				rivalRev = lr.Revision()
				t.Cleanup(func() { releaseNow(t, lr) }) // void after the restore: nothing to delete
			}
		},
		Held: func() {
			if refusals++; refusals == 2 { // the rival's refusal: restore before the wait
				s.Restore(backup)
			}
		},
		HeldWait: func(c *client.Cache) {
			if heldWaits++; heldWaits == 1 {
				// Until the standby's cache holds the restored store's epoch.
				if err := c.WaitForRevisionIn(ctx, info.Epoch, math.MaxUint64); !errors.Is(err, client.ErrEpochChanged) {
					t.Errorf("the standby's cache did not move to the restored epoch: %v", err)
				}
			}
		},
	})
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	lb, err := lease.Campaign(cctx, standby, o)
	if err != nil {
		t.Fatalf("Campaign refused just before a restore that left the key free: %v (claims %d, refusals %d, waits on a refusal %d, rival at %d)",
			err, claims, refusals, heldWaits, rivalRev)
	}
	t.Cleanup(func() { releaseNow(t, lb) })
	if refusals != 2 || heldWaits != 1 || rivalRev == 0 {
		t.Fatalf("claims %d, refusals %d, waits on a refusal %d, rival at %d: not the sequence the test sets up", claims, refusals, heldWaits, rivalRev)
	}
	e, err := standby.Get(ctx, ns, key)
	if err != nil || decodeLease(t, e).Holder != "replica-b" || e.Revision != lb.Revision() || e.Revision >= rivalRev {
		t.Fatalf("lease entry after the campaign: %+v %v (the rival's claim was at %d, before the restore)", e, err, rivalRev)
	}
}

// A restore voids the lease's revision (SPEC section 4), and a new holder's claim in the new epoch
// may reach it. Once the former holder's lease has learned of the restore (Lost, ErrRestored), a
// write fenced with its Guard must fail GUARD_FAILED (SPEC section 5): it was the old revision, which
// the new holder's entry carried, and the write went through.
func TestGuardOfALeaseLostToARestore(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	holder, other := statedClient(t, s), statedClient(t, s)
	backup := s.OfflineBackup() // the namespace was never written: its revision is 0
	o := opts(key, "replica-a", 3*time.Second)
	o.RenewEvery = time.Second // the first renewal after the restore finds the new epoch
	la, err := lease.Claim(ctx, holder, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseNow(t, la) }) // lost to the restore: nothing to delete
	s.Restore(backup)
	lb, err := lease.Claim(ctx, other, opts(key, "replica-b", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseNow(t, lb) })
	if lb.Revision() != la.Revision() {
		t.Fatalf("new holder at %d, former at %d: the test needs them equal", lb.Revision(), la.Revision())
	}
	closed(t, la.Lost(), "the former holder's lease to learn of the restore")
	if !errors.Is(la.Err(), lease.ErrRestored) {
		t.Fatalf("former holder's lease: %v, want ErrRestored", la.Err())
	}
	g := la.Guard()
	_, err = holder.Put(ctx, wire.PutRequest{Namespace: ns, Key: "status/front-door", Schema: wire.SchemaObservedStatus,
		Guard: &g, Document: statusPut("status/front-door", "active").Document})
	if wire.CodeOf(err) != wire.CodeGuardFailed {
		t.Fatalf("former holder's write with its Guard %+v: %v, want GUARD_FAILED", g, err)
	}
	if _, err := other.Get(ctx, ns, "status/front-door"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the former holder wrote: %v", err)
	}
	// The new holder's guard is its own revision and lets its writes through.
	if g := lb.Guard(); g.Key != key || uint64(g.Revision) != lb.Revision() {
		t.Fatalf("new holder's Guard %+v at revision %d", g, lb.Revision())
	}
}

// TestClaimAfterARestoreWaitsOutTheFormerHolder: a holder claimed its lease after the backup, so the
// restored store does not hold it, yet the holder acts on it until it notices the restore (its next
// renewal). A standby that had seen the store before the restore used to claim the key at once, and
// two workers acted on one lease (two publications of one source, in the example transcoders). Claim
// refuses (RestoreWaitError) until a TTL from seeing the change has passed, and Campaign waits it out,
// as they wait for a gone holder's entry to expire: the holder has let go by the time the claim is
// made.
func TestClaimAfterARestoreWaitsOutTheFormerHolder(t *testing.T) {
	s := startStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	holder, standby := statedClient(t, s), statedClient(t, s)
	backup := s.OfflineBackup() // no lease in it
	// The standby has seen the epoch before the restore.
	if _, err := standby.Info(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	la, err := lease.Claim(ctx, holder, opts(key, "replica-a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseNow(t, la) })

	s.Restore(backup)
	if _, ok := standby.SinceEpochChange("no such epoch"); ok {
		t.Fatal("SinceEpochChange reports a change to an epoch never seen")
	}
	// Claim refuses at once, writing nothing, and says when to claim again.
	_, err = lease.Claim(ctx, standby, opts(key, "replica-b", ttl))
	var wait *lease.RestoreWaitError
	if !errors.As(err, &wait) || !errors.Is(err, lease.ErrHeld) || wait.RetryAfter <= 0 || wait.RetryAfter > ttl {
		t.Fatalf("claim just after the restore: %v, want a RestoreWaitError (ErrHeld) with RetryAfter in (0, %v]", err, ttl)
	}
	if _, err := standby.Get(ctx, ns, key); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the refused claim wrote the lease: %v", err)
	}
	// Campaign waits it out.
	lb, err := lease.Campaign(ctx, standby, opts(key, "replica-b", ttl))
	if err != nil {
		t.Fatalf("campaign after the restore: %v", err)
	}
	t.Cleanup(func() { releaseNow(t, lb) })
	select {
	case <-la.Lost():
	default:
		t.Fatal("replica-b claimed the lease while replica-a, which claimed it before the restore, still held it")
	}
	info, err := standby.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if since, ok := standby.SinceEpochChange(info.Epoch); !ok || since < ttl {
		t.Fatalf("SinceEpochChange(%s) = %v, %v: want the change seen at least a TTL (%v) before the claim returned", info.Epoch, since, ok, ttl)
	}
}
