package stated

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natstest"
)

// The embedded NATS server runs in stated's process, and a subscription costs it some 640 bytes for
// the 30 bytes of its SUB line: a principal's one connection subscribing to a million subjects of its
// own inbox (which its permissions allow) held 640 MB of stated's memory, and nothing stopped it at a
// million. A connection now has room for every watch its principal may hold (twice, for re-watches),
// and the server refuses subscriptions past that.
func TestEmbeddedServerBoundsSubscriptionsPerConnection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NATS.Listen = "127.0.0.1:0"
	cfg.Principals = []PrincipalConfig{{ID: "alice", Password: "alice-pw"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ns := natstest.Start(t, embeddedNATSOptions(cfg, natsUsers(cfg, "internal-pw")))
	refused := make(chan error, 1)
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("alice", "alice-pw"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrMaxSubscriptionsExceeded) {
				select {
				case refused <- err:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := cfg.BoundsValue()
	if err != nil {
		t.Fatal(err)
	}
	watches := int(b.MaxWatchesPerPrincipal)
	const tries = 4000
	for i := range tries {
		// A watch subscription each, as store/client's watches make them.
		if _, err := nc.SubscribeSync(fmt.Sprintf("kp.watch.v1.alice.w%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n := int(ns.NumSubscriptions())
	if n >= tries {
		t.Fatalf("one connection holds %d subscriptions: nothing bounds them", n)
	}
	if n < 2*watches {
		t.Fatalf("one connection may hold only %d subscriptions, fewer than twice max_watches_per_principal (%d)", n, watches)
	}
	select {
	case <-refused:
	default:
		t.Fatal("the client was not told that its subscriptions were refused")
	}
	// The connection is still up, and its first subscriptions deliver.
	sub, err := nc.SubscribeSync("kp.watch.v1.alice.w0")
	if err == nil {
		_ = sub.Unsubscribe()
	}
	if err := nc.FlushTimeout(permTimeout); err != nil || !nc.IsConnected() {
		t.Fatalf("the connection after the refusals: %v", err)
	}
}
