package main_test

import (
	"errors"
	"testing"
	"time"

	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// A lease's revision, its fencing token, belongs to one epoch (SPEC section 4). After a restore a
// standby may claim the key again at the same revision; the old holder must then neither write through
// the guard nor renew or release (which would hit the new holder's entry): it learns that it lost.
func TestE2ELeaseAcrossARestore(t *testing.T) {
	s, ctx := startWith(t, "")
	a := goClient(t, s, "coordinator")
	b := goClient(t, s, "coordinator")
	const ns, key = "service/elect", "leases/leader"
	claim := func(c *client.Client, holder string) *lease.Lease {
		t.Helper()
		for {
			l, err := lease.Claim(ctx, c, lease.Options{Namespace: ns, Key: key, Holder: holder, TTL: time.Minute})
			if err == nil {
				return l
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // reconnecting after a restart: a retry pause
		}
	}
	// A backup taken while nobody led.
	backup := s.OfflineBackup()
	la := claim(a, "replica-a") // a minute's TTL: no renewal happens during the test
	s.Restore(backup)
	lb := claim(b, "replica-b")
	if lb.Revision() != la.Revision() {
		t.Logf("B holds revision %d, A held %d", lb.Revision(), la.Revision())
	}
	status := func(who string) wire.PutRequest {
		return wire.PutRequest{Key: "status/job", Schema: wire.SchemaObservedStatus,
			Document: []byte(`{"subject_key":"job","state":"active","observed_at_ms":1,"holder":"` + who + `"}`)}
	}
	if _, err := lb.Put(ctx, status("replica-b")); err != nil {
		t.Fatalf("the new holder's guarded write: %v", err)
	}
	if _, err := la.Put(ctx, status("replica-a")); !errors.Is(err, lease.ErrNotHeld) || !errors.Is(err, lease.ErrRestored) {
		t.Fatalf("the old holder's guarded write after the restore: %v, want ErrNotHeld with ErrRestored", err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("the old holder was not told it lost the lease")
	}
	if la.Held() || !errors.Is(la.Err(), lease.ErrRestored) {
		t.Fatalf("old holder: held %v, err %v", la.Held(), la.Err())
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release of the void lease: %v", err)
	}
	e, err := b.Get(ctx, ns, key)
	if err != nil || e.Revision != lb.Revision() || !lb.Held() {
		t.Fatalf("the new holder's entry after the old holder's release: %+v %v (held %v)", e, err, lb.Held())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
