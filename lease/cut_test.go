package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
)

// linkedClient returns a coordinator client connected through link (client.Connect: no reconnect
// buffer) and its connection.
func linkedClient(t *testing.T, link *natstest.CutLink) (*client.Client, *nats.Conn) {
	t.Helper()
	nc, err := client.Connect(link.URL(), "coordinator", nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "coordinator", client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// A holder whose NATS connection is cut and mended, the state server running on: through a cut
// shorter than the lease's validity it keeps the lease (renewals resume, the standby waits); through a
// longer one it learns the loss by itself before the store expires the entry, the standby gets the
// lease only then, and the former holder, reconnected, neither writes nor releases the new holder's
// entry.
func TestLeaseAcrossACutConnection(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	link := natstest.NewCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	hc, hnc := linkedClient(t, link)
	renewals, onRenewed := notifier[uint64]()
	o := lease.Options{Namespace: ns, Key: "leases/cut", Holder: "holder-a", TTL: 3 * time.Second, RenewEvery: 300 * time.Millisecond}
	a, err := lease.Claim(ctx, hc, lease.WithHooks(o, lease.TestHooks{Renewed: onRenewed}))
	if err != nil {
		t.Fatal(err)
	}
	bo := o
	bo.Holder = "holder-b"
	waiting, onWait := notifier[struct{}]()
	type result struct {
		l   *lease.Lease
		err error
	}
	standby := make(chan result, 1)
	go func() {
		l, err := campaignUntil(ctx, newClient(t, env), lease.WithHooks(bo, lease.TestHooks{Wait: func() { onWait(struct{}{}) }}))
		standby <- result{l, err}
	}()
	defer func() {
		cancel()
		if r := <-standby; r.l != nil {
			_ = r.l.Release(context.Background())
		}
	}()
	recv(t, waiting, "the standby to wait for the key")

	// A short cut: a renewal or two fail, the next ones get through.
	status := hnc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer hnc.RemoveStatusListener(status)
	recv(t, renewals, "a renewal before the cut")
	before := a.Revision()
	link.Cut()
	for hnc.Status() != nats.RECONNECTING {
		recv(t, status, "the holder's connection to drop")
	}
	link.Mend()
	for rev := uint64(0); rev <= before; {
		rev = recv(t, renewals, "a renewal after the cut")
	}
	if !a.Held() {
		t.Fatalf("the lease is not held after a short cut: %v", a.Err())
	}
	select {
	case r := <-standby:
		standby <- r
		t.Fatalf("the standby got the lease (%v) while its holder kept it", r.err)
	default:
	}

	// A long cut: the holder loses the lease by itself, then the standby gets it.
	link.Cut()
	closed(t, a.Lost(), "the holder to learn its lease is lost while cut off")
	if a.Held() {
		t.Fatal("Held after Lost")
	}
	lostAt := a.Revision()
	var b result
	select {
	case b = <-standby:
		standby <- b
	case <-ctx.Done():
		t.Fatal("the standby never got the lease")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if b.l.Revision() <= lostAt {
		t.Fatalf("the standby claimed at %d, the holder's last revision %d", b.l.Revision(), lostAt)
	}
	link.Mend()
	for hnc.Status() != nats.CONNECTED {
		recv(t, status, "the holder's connection to come back")
	}
	if _, err := a.Put(ctx, statusPut("status/x", "active")); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a write of the lost lease: %v, want ErrNotHeld", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of the lost lease: %v", err)
	}
	e, ok := get(t, newClient(t, env), o.Key)
	if !ok || decodeLease(t, e).Holder != bo.Holder || e.Revision != b.l.Revision() {
		t.Fatalf("lease entry %+v %v, want the standby's at %d", e, ok, b.l.Revision())
	}
}
