package client

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
)

// A NATS server that stops answering without closing anything (its host powered off, a partition,
// stated's process paused with its embedded server) leaves a connection open that only the client's
// own pings can find dead. Connect pings every PingInterval, so a connection stops saying CONNECTED
// within a few intervals (nats.go's own default is 2 minutes, and twice that to give up): a standby
// connected to such a server learns it and reconnects, to another cluster node say, in seconds.
func TestConnectNoticesAServerThatStoppedAnswering(t *testing.T) {
	env := startEnv(t)
	link := natstest.NewCutLink(t, strings.TrimPrefix(env.URL, "nats://"))
	nc, err := Connect(link.URL(), admin.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if nc.Opts.PingInterval != PingInterval {
		t.Fatalf("ping interval %v, want %v", nc.Opts.PingInterval, PingInterval)
	}
	disconnected := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(disconnected)
	link.Freeze()
	start := time.Now()
	// Stale after MaxPingsOutstanding (2) pings unanswered: at most three intervals from now.
	bound := time.Duration(nats.DefaultMaxPingOut+1)*PingInterval + 5*time.Second
	select {
	case <-disconnected:
		t.Logf("the frozen connection was dropped after %v", time.Since(start))
	case <-time.After(bound):
		t.Fatalf("the connection to a server that stopped answering is still %v after %v", nc.Status(), bound)
	}

	// A client with its own ping interval keeps it.
	nc2, err := Connect(env.URL, admin.ID, nats.PingInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	if nc2.Opts.PingInterval != time.Minute {
		t.Fatalf("ping interval %v given, %v kept", time.Minute, nc2.Opts.PingInterval)
	}
}
