package reconciler

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/client"
)

// A controller over the real stated binary, killed (SIGKILL) and started again on the same data
// directory several times: after each restart the controller follows again and reconciles every key
// once (its snapshot), the key written just before the kill at its new revision, and no key more
// than once for one restart; a key written after the restart is reconciled at its revision.
func TestControllerAcrossStatedKills(t *testing.T) {
	const pw = "pw"
	s := e2e.NewStated(t, e2e.Config{Principals: []e2e.Principal{{ID: "coordinator", Admin: true, Password: pw}}})
	s.Start()
	connect := func() *client.Client {
		nc, err := client.Connect(s.URL(), "coordinator", nats.UserInfo("coordinator", pw), nats.ReconnectWait(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := client.New(nc, "coordinator", client.WithRequestTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	writer := connect()
	for i, k := range []string{"a", "b", "c"} {
		putIntent(t, writer, k, i, 0)
	}
	p := newProbe(t)
	ctrl := p.start(t, connect(), Options{})
	p.barrier(t, "start")
	for round := range 4 {
		rev := putIntent(t, writer, "a", 10+round, 0)
		p.until(t, "a at its new revision", func(c call) bool { return c.key == testPrefix+"a" && c.rev == rev })
		s.Kill()
		awaitNotFollowing(t, ctrl)
		if round%2 == 1 {
			time.Sleep(2 * time.Second) // an outage longer than a few resync attempts: its length is the point
		}
		s.Start()
		seen := p.until(t, "every key after the restart", func(call) bool {
			return ctrl.Cache().Following()
		})
		// Whatever the restart brings is reconciled by now or queued: a write after it and its
		// Reconcile mark the end.
		natstest.Poll(t, testTimeout, "the writer reconnected", func() (bool, string) {
			return writer.Conn().IsConnected(), writer.Conn().Status().String()
		})
		rev = putIntent(t, writer, "b", 20+round, 0)
		seen = append(seen, p.until(t, "b at its revision after the restart", func(c call) bool {
			return c.key == testPrefix+"b" && c.rev == rev
		})...)
		seen = append(seen, p.barrier(t, "after-restart-"+string(rune('0'+round)))...)
		count := map[string]int{}
		for _, c := range seen {
			count[c.key]++
		}
		keys := keysOf(seen)
		for _, k := range []string{"a", "c"} {
			if count[testPrefix+k] != 1 {
				t.Errorf("round %d: %s reconciled %d times after the restart, want once: %v", round, k, count[testPrefix+k], keys)
			}
		}
		if n := count[testPrefix+"b"]; n < 1 || n > 2 {
			t.Errorf("round %d: b reconciled %d times after the restart (its snapshot and its write), want 1 or 2: %v", round, n, keys)
		}
		if !slices.Contains(keys, testPrefix+"a") {
			t.Fatalf("round %d: a not reconciled after the restart: %v", round, keys)
		}
	}
}
