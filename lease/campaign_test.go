package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

type campaignResult struct {
	l   *lease.Lease
	err error
}

// standby starts Campaign for o on its own connection and returns its result channel and a channel
// signalled each time it waits for the key.
func standby(t *testing.T, env *testenv.Env, ctx context.Context, o lease.Options) (<-chan campaignResult, <-chan struct{}) {
	waiting, onWait := notifier[struct{}]()
	res := make(chan campaignResult, 1)
	c := newClient(t, env)
	go func() {
		l, err := lease.Campaign(ctx, c, lease.WithHooks(o, lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		res <- campaignResult{l, err}
	}()
	return res, waiting
}

// TestCampaignClaimsAfterRelease: a standby waiting on a held lease claims it as soon as the holder
// releases, long before the holder's TTL would have run out.
func TestCampaignClaimsAfterRelease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	a := claim(t, newClient(t, env), opts(key, "transcoder-a-1", time.Minute))
	res, waiting := standby(t, env, ctx, opts(key, "transcoder-a-2", time.Minute))
	recv(t, waiting, "the standby to wait")
	aRev := a.Revision()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, res, "the standby's claim") // within testTimeout, a quarter of the holder's TTL
	if r.err != nil {
		t.Fatalf("Campaign: %v", r.err)
	}
	t.Cleanup(func() { releaseNow(t, r.l) })
	if !r.l.Held() || r.l.Revision() <= aRev {
		t.Fatalf("standby's lease: held %v revision %d (holder's was %d)", r.l.Held(), r.l.Revision(), aRev)
	}
	e, ok := get(t, admin, key)
	if !ok || decodeLease(t, e).Holder != "transcoder-a-2" || e.Revision != r.l.Revision() {
		t.Fatalf("lease entry %+v %v, want transcoder-a-2's", e, ok)
	}
}

// TestCampaignClaimsAfterExpiry: a standby claims once the holder stops renewing and its entry
// expires; by then the holder knows it lost, and its Release leaves the new holder's entry alone.
func TestCampaignClaimsAfterExpiry(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	admin := newClient(t, env)
	ctx := ctxT(t)
	a := claim(t, newClient(t, env), opts(key, "transcoder-a-1", time.Second))
	res, waiting := standby(t, env, ctx, opts(key, "transcoder-a-2", time.Second))
	recv(t, waiting, "the standby to wait")
	lease.PauseRenewals(a)
	r := recv(t, res, "the standby's claim after the expiry")
	if r.err != nil {
		t.Fatalf("Campaign: %v", r.err)
	}
	t.Cleanup(func() { releaseNow(t, r.l) })
	if a.Held() {
		t.Fatal("the old holder still counts its lease as held after the standby claimed it")
	}
	closed(t, a.Lost(), "the old holder's Lost")
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release by the old holder: %v", err)
	}
	e, ok := get(t, admin, key)
	if !ok || decodeLease(t, e).Holder != "transcoder-a-2" || e.Revision != r.l.Revision() {
		t.Fatalf("lease entry %+v %v after the old holder's Release, want transcoder-a-2's", e, ok)
	}
}

// TestCampaignFreeKey: with no holder, Campaign claims at once, without watching.
func TestCampaignFreeKey(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t)
	res, waiting := standby(t, env, ctx, opts(key, "transcoder-a-1", time.Second))
	r := recv(t, res, "Campaign")
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { releaseNow(t, r.l) })
	if len(waiting) != 0 {
		t.Fatal("Campaign waited on a free key")
	}
}

// TestCampaignContextEnds: a standby gives up when its context ends.
func TestCampaignContextEnds(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	claim(t, newClient(t, env), opts(key, "transcoder-a-1", time.Minute))
	ctx, cancel := context.WithCancel(ctxT(t))
	res, waiting := standby(t, env, ctx, opts(key, "transcoder-a-2", time.Minute))
	recv(t, waiting, "the standby to wait")
	cancel()
	r := recv(t, res, "Campaign to return")
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("Campaign after cancel: %v %v", r.l, r.err)
	}
}

// TestCampaignRefused: a campaign the store refuses for good returns the error.
func TestCampaignRefused(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	alice, err := clientFor(t, env, "alice")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lease.Campaign(ctxT(t), alice, opts(key, "alice-1", time.Second))
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Fatalf("campaign by a non-admin in a service namespace: %v, want PERMISSION_DENIED", err)
	}
}
