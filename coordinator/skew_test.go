package coordinator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
	"github.com/keeppeek/coordination/worker"
)

// TestFleetUnderClockSkew: a state server whose clock is minutes off the worker's and the
// coordinator's changes nothing of who is alive. A worker's heartbeats carry its own clock
// (sent_at_ms), its entry's deadline is the server's, and the fleet view judges liveness by the
// entry's existence alone, never by comparing the server's expires_at_ms with the coordinator's
// clock: a running worker stays Alive across many of its entry's TTLs (with the server behind, a
// deadline read against the coordinator's clock would be minutes past), and one that stops leaves
// the view once its entry expires (with the server ahead, that deadline would be minutes ahead).
func TestFleetUnderClockSkew(t *testing.T) {
	for _, sk := range []struct {
		name   string
		offset time.Duration
	}{{"store-ahead-10m", 10 * time.Minute}, {"store-behind-10m", -10 * time.Minute}} {
		t.Run(sk.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{ClockOffset: sk.offset})
			c := newCoordinator(t, env, "coordinator")
			ctx := ctxT(t)
			v, err := c.WatchFleet(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()

			// 200 ms heartbeats: the entry's TTL is 1 s (three intervals, at least a second).
			w, err := worker.New(worker.Options{Conn: env.Connect(t, "alice"), Principal: "alice", WorkerID: "w1",
				Service: "transcoder-a", HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(context.Background())
			var runErr error
			stopped := make(chan struct{})
			go func() { runErr = w.Run(runCtx); close(stopped) }()
			defer func() { stop(); <-stopped }()

			awaitView(t, v, "w1 ready", func() bool {
				wk, ok := v.Worker("alice", "w1")
				return ok && wk.Status == wire.StatusReady
			})
			first, _ := v.Worker("alice", "w1")
			// The skew is real: the deadline the view shows is on the server's clock.
			if off := time.Until(time.UnixMilli(first.ExpiresAtMs)); off < sk.offset-testTimeout || off > sk.offset+testTimeout {
				t.Fatalf("expires_at_ms %d is %v from the test's clock, want about %v", first.ExpiresAtMs, off, sk.offset)
			}
			sys := func() uint64 {
				res, err := c.Client().List(ctx, wire.ListRequest{Namespace: string(wire.KindSystem), KeyPrefix: workersPrefix})
				if err != nil {
					t.Fatalf("list system/%s: %v", workersPrefix, err)
				}
				return res.Revision
			}
			rev0 := sys()

			// Keepalives push the deadline on, by the server's clock, over three of the entry's TTLs.
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			timeout := time.After(testTimeout)
			for {
				e, err := c.Client().Get(ctx, string(wire.KindSystem), wire.WorkerKey("alice", "w1"))
				if err != nil {
					t.Fatalf("w1's entry while it heartbeats: %v", err)
				}
				if e.ExpiresAtMs >= first.ExpiresAtMs+3000 {
					break
				}
				select {
				case <-tick.C:
				case <-timeout:
					t.Fatalf("w1's deadline stuck at %d (first %d)", e.ExpiresAtMs, first.ExpiresAtMs)
				}
			}
			// Nothing expired meanwhile (an expiry advances the system revision; a later heartbeat
			// would then have put the entry again), and the view still holds the worker.
			if rev := sys(); rev != rev0 {
				t.Fatalf("system revision moved from %d to %d while w1 heartbeated: its entry expired", rev0, rev)
			}
			if wk, ok := v.Worker("alice", "w1"); !ok || wk.Revision != first.Revision || !v.Alive("alice", "w1") {
				t.Fatalf("w1 in the view after three TTLs: %+v, %v, alive %v (revision was %d)", wk, ok, v.Alive("alice", "w1"), first.Revision)
			}
			if fleet, err := c.Fleet(ctx); err != nil || len(fleet) != 1 || fleet[0].WorkerID != "w1" {
				t.Fatalf("Fleet while w1 heartbeats: %+v, %v", fleet, err)
			}

			// The worker stops: its entry expires a TTL after its last heartbeat, and the view drops it.
			stop()
			<-stopped
			if runErr != nil {
				t.Fatalf("Run: %v", runErr)
			}
			awaitView(t, v, "w1 gone once it stopped", func() bool { return !v.Alive("alice", "w1") })
			if fleet, err := c.Fleet(ctx); err != nil || len(fleet) != 0 {
				t.Fatalf("Fleet after w1 stopped: %+v, %v", fleet, err)
			}
		})
	}
}
