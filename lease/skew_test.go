package lease_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/wire"
)

// skews are the offsets of the state server's wall clock from its clients' that the skew tests run
// with: minutes either way, as after a VM resume or with NTP off.
var skews = []struct {
	name   string
	offset time.Duration
}{{"store-ahead-10m", 10 * time.Minute}, {"store-behind-10m", -10 * time.Minute}}

// TestFailoverUnderClockSkew: a state server whose clock is minutes off its clients' changes nothing
// of a lease's life, which the holder times on its own monotonic clock from the send of each claim or
// renewal. A holder that renews keeps the lease past several TTLs (a holder that read the store's
// expires_at_ms against its own clock would think it lost at once with the store behind); one that
// stops renewing knows it lost before a standby can claim (with the store ahead, that holder would
// think it held for minutes more: two holders at once), and its late write is refused by the store's
// guard.
func TestFailoverUnderClockSkew(t *testing.T) {
	for _, sk := range skews {
		t.Run(sk.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{ClockOffset: sk.offset})
			admin := newClient(t, env)
			ctx := ctxT(t)
			const ttl = time.Second
			var renewals atomic.Int32
			reached, onReached := notifier[struct{}]()
			o := lease.WithHooks(opts(key, "transcoder-a-1", ttl), lease.TestHooks{Renewed: func(uint64) {
				if renewals.Add(1) == 5 { // RenewEvery is TTL/3: five renewals span more than a TTL
					onReached(struct{}{})
				}
			}})
			before := time.Now()
			a := claim(t, newClient(t, env), o)

			// The skew is real: the entry's deadline is on the store's clock, minutes off the test's.
			e, ok := get(t, admin, key)
			if !ok {
				t.Fatal("no lease entry after the claim")
			}
			want := before.Add(sk.offset).UnixMilli()
			if e.ExpiresAtMs < want || e.ExpiresAtMs > want+int64(testTimeout/time.Millisecond) {
				t.Fatalf("expires_at_ms %d, want about %d (the store's clock %v off the test's)", e.ExpiresAtMs, want, sk.offset)
			}

			recv(t, reached, "five renewals")
			if !a.Held() || a.Err() != nil {
				t.Fatalf("after five renewals (more than a TTL): held %v, err %v", a.Held(), a.Err())
			}

			res, waiting := standby(t, env, ctx, opts(key, "transcoder-a-2", ttl))
			recv(t, waiting, "the standby to wait")
			lease.PauseRenewals(a)
			r := recv(t, res, "the standby's claim after the expiry")
			if r.err != nil {
				t.Fatalf("Campaign: %v", r.err)
			}
			t.Cleanup(func() { releaseNow(t, r.l) })
			// The store expired the entry before the standby's claim could commit; the old holder,
			// timing from its last renewal's send, knew it had lost by then.
			if a.Held() || !isClosed(a.Lost()) {
				t.Fatalf("the old holder still counts the lease held (Lost closed: %v) once the standby claimed it", isClosed(a.Lost()))
			}
			if !errors.Is(a.Err(), lease.ErrLost) {
				t.Fatalf("old holder's Err = %v, want ErrLost", a.Err())
			}
			lease.SkipLocalCheck(a)
			if _, err := a.Put(ctx, statusPut("status/front-door", "active")); !errors.Is(err, wire.ErrGuardFailed) {
				t.Fatalf("the old holder's write after the failover: %v, want GUARD_FAILED", err)
			}
			if _, ok := get(t, admin, "status/front-door"); ok {
				t.Fatal("the old holder wrote after the failover")
			}
		})
	}
}
