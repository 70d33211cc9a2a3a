package capabilities_test

import (
	"errors"
	"net"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

// A subscribe or start_publication made while the NATS connection is down is refused at once and
// never sent: nats.go would keep it in its reconnect buffer and send it when the connection comes
// back, after its caller gave up on it, and the media server would then make a subscription or a
// publication that nobody knows of (the publication holding its variant for good).
func TestCommandsThatMakeSomethingAreNotSentWhileDisconnected(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	port := ns.Addr().(*net.TCPAddr).Port
	// One connection for the simulator and the client (nats.go's default reconnect buffer): on
	// reconnect, the simulator's subscriptions are back before anything buffered is sent, so a
	// buffered command would reach it.
	nc := connect(t, ns.ClientURL())
	s := sim.New(nc, sim.Options{Sources: sim.Sources("front-door")})
	if err := s.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	c, err := capabilities.NewCommands(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	sess, _, _ := s.SessionID("front-door")
	status := nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer nc.RemoveStatusListener(status)
	ctx := ctxT(t)
	awaitStatus := func(want nats.Status) {
		t.Helper()
		for {
			select {
			case st := <-status:
				if st == want {
					return
				}
			case <-ctx.Done():
				t.Fatalf("connection not %v", want)
			}
		}
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	awaitStatus(nats.RECONNECTING)
	start := capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video", VariantID: "browser-h264-720p",
		OutputProfile: "browser-h264-720p", RecordingMode: capabilities.RecordingModeDisabled}
	if _, err := c.StartPublication(ctxT(t), start); !errors.Is(err, nats.ErrConnectionReconnecting) {
		t.Errorf("StartPublication while disconnected = %v, want it refused (nats.ErrConnectionReconnecting)", err)
	}
	if _, err := c.SubscribeOrUndo(ctxT(t), capabilities.SubscribeRequest{SessionID: sess, StreamID: "video"}, nil); !errors.Is(err, nats.ErrConnectionReconnecting) {
		t.Errorf("SubscribeOrUndo while disconnected = %v, want it refused (nats.ErrConnectionReconnecting)", err)
	}

	natstest.Start(t, natsserver.Options{Listen: "127.0.0.1:" + strconv.Itoa(port)})
	awaitStatus(nats.CONNECTED)
	// Commands of one kind are served in arrival order: once these are answered, anything buffered
	// before them has been served too.
	start.SessionID = "sess-gone"
	if _, err := c.StartPublication(ctxT(t), start); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Fatalf("StartPublication after the reconnect = %v", err)
	}
	if _, err := c.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: "sess-gone", StreamID: "video"}); !errors.Is(err, capabilities.ErrSourceUnavailable) {
		t.Fatalf("Subscribe after the reconnect = %v", err)
	}
	if pubs, subs := s.Publications(), s.Subscriptions(); len(pubs) != 0 || len(subs) != 0 {
		t.Errorf("after the reconnect the media server holds publications %+v and subscriptions %+v that nobody knows of", pubs, subs)
	}
	if n := len(s.Commands()); n != 2 {
		t.Errorf("the media server received %d commands, want the 2 sent after the reconnect", n)
	}
}
