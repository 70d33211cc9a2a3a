package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/syncbuf"
	"github.com/keeppeek/coordination/store/policy"
	stateserver "github.com/keeppeek/coordination/store/server"
)

// A server in conflict with another that is still there, stopped while it looks for peers, keeps its
// conflict and does not log the other gone: the look, cut short by Stop, was taken for "nobody else
// answered".
func TestStopDuringAPeerLookKeepsTheConflict(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var logs syncbuf.Buffer
	srv, err := startOn(t, nc, stateserver.Options{PeerCheckInterval: 20 * time.Millisecond,
		Principals: []policy.Principal{{ID: "dev", Admin: true}},
		Logger:     slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// Another server on the same subjects (as micro's $SRV.INFO answers it), which stays there.
	peer, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Close)
	info, _ := json.Marshal(map[string]any{"name": stateserver.ServiceName, "id": "OTHER", "version": "0.1.0",
		"type": "io.nats.micro.v1.info_response", "metadata": map[string]string{"host": "h", "pid": "1"},
		"endpoints": []map[string]any{{"name": "put", "subject": "kp.state.v1.*.put", "queue_group": "q"}}})
	var slow atomic.Bool
	asked := make(chan struct{}, 1)
	if _, err := peer.Subscribe("$SRV.INFO."+stateserver.ServiceName, func(m *nats.Msg) {
		if !slow.Load() {
			_ = m.Respond(info)
			return
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		time.AfterFunc(300*time.Millisecond, func() { _ = m.Respond(info) }) // within the 500 ms window
	}); err != nil {
		t.Fatal(err)
	}
	_ = peer.Flush()
	natstest.Poll(t, 10*time.Second, "the conflict is seen", func() (bool, string) {
		return errors.Is(srv.Conflict(), stateserver.ErrAnotherServer), "no conflict yet"
	})
	slow.Store(true)
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no look for peers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "is gone") || srv.Conflict() == nil {
		t.Fatalf("the other server never left, yet after Stop: Conflict() = %v; log:\n%s", srv.Conflict(), logs.String())
	}
}
