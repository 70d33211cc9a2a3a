package server_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/policy"
	stateserver "github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// peerServer makes a state server with a store of its own, over a connection of its own to url,
// serving prefix, and returns it with what Start returned. It is stopped at the test's end.
func peerServer(t *testing.T, url, prefix string, every time.Duration) (*stateserver.Server, error) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return startOn(t, nc, stateserver.Options{Prefix: prefix, PeerCheckInterval: every,
		Principals: []policy.Principal{{ID: "dev", Admin: true}}})
}

// Two stated against one external NATS with the same subject prefix (a second one started by hand,
// or by a deployment while the old instance runs) had NATS hand each request to either, each with a
// store of its own: most requests of a client went to the one whose store was not the first's (and
// a second stated on the first's data directory answered them all UNAVAILABLE). The second one does
// not start, and says which server is in the way; one with another prefix starts, as does one after
// the first stopped.
func TestSecondServerOnTheSameSubjectsDoesNotStart(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	first, err := peerServer(t, ns.ClientURL(), "kp", -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = peerServer(t, ns.ClientURL(), "kp", -1)
	host, _ := os.Hostname()
	if !errors.Is(err, stateserver.ErrAnotherServer) || !strings.Contains(err.Error(), host) {
		t.Fatalf("second Start on the same subjects: %v, want ErrAnotherServer naming host %q", err, host)
	}
	// Every request goes to the first one: the second answers none.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i := range 20 {
		r := request(t, nc, "dev", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+lease+`}`)
		if !r.OK || r.Entry.Revision != uint64(i+1) {
			t.Fatalf("put %d: %+v", i, r)
		}
	}
	if _, err := peerServer(t, ns.ClientURL(), "other", -1); err != nil {
		t.Fatalf("a server on another prefix: %v", err)
	}
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := peerServer(t, ns.ClientURL(), "kp", -1); err != nil {
		t.Fatalf("a server after the first stopped: %v", err)
	}
}

// Two servers that each passed Start's look (the two sides of a NATS cluster split, each given a
// stated, then healed) see each other at their next look: Conflict names the other on both, until
// one stops.
func TestServersThatStartedApartSeeEachOther(t *testing.T) {
	c := natstest.StartCluster(t, natstest.ClusterOptions{Nodes: 2, LinkedRoute: true})
	c.RouteLink().Cut()
	const every = 50 * time.Millisecond
	a, err := peerServer(t, c.URL(0), "kp", every)
	if err != nil {
		t.Fatal(err)
	}
	b, err := peerServer(t, c.URL(1), "kp", every)
	if err != nil {
		t.Fatalf("Start on the other side of a cut route: %v", err)
	}
	if a.Conflict() != nil || b.Conflict() != nil {
		t.Fatalf("a conflict before the route is back: %v, %v", a.Conflict(), b.Conflict())
	}
	c.RouteLink().Mend()
	natstest.Poll(t, 30*time.Second, "both servers see the other", func() (bool, string) {
		ea, eb := a.Conflict(), b.Conflict()
		return errors.Is(ea, stateserver.ErrAnotherServer) && errors.Is(eb, stateserver.ErrAnotherServer),
			"a: " + errString(ea) + "; b: " + errString(eb)
	})
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	natstest.Poll(t, 30*time.Second, "the remaining server sees no other", func() (bool, string) {
		return a.Conflict() == nil, errString(a.Conflict())
	})
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
