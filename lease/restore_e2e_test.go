package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
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
