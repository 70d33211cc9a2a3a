package server

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/wire"
)

// A watch's updates are held until its snapshot reply has gone out. The client may have the reply, unwatch
// and watch the same id again before the goroutine that sent the reply opens the gate: the updates held
// for the registration it unwatched must not then go out on the subject the new one shares. They carry
// sequences from 1, so a client following SPEC section 7.4 would apply them to its new snapshot (the
// store/client Cache skips them; other clients need not). The test runs the request's steps itself:
// dispatch, the reply (respond, with its after held back), the client's unwatch and new watch, then
// after, as a goroutine descheduled between the reply and after would.
func TestHeldUpdatesOfAnUnwatchedRegistrationStayOffTheNextOne(t *testing.T) {
	const to = 10 * time.Second
	s, _ := newServer(t, natstest.Start(t, natsserver.Options{}), store.DefaultOptions(), Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), to)
		defer cancel()
		_ = s.Stop(ctx)
	})
	nc, err := nats.Connect(s.nc.ConnectedUrl(), nats.CustomInboxPrefix(wire.InboxPrefix("coordinator")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	req := func(op wire.Op, body string) wire.Result {
		t.Helper()
		return natstest.Request(t, nc, "coordinator", op, body, to)
	}
	put := func(key string) uint64 {
		t.Helper()
		r := req(wire.OpPut, fmt.Sprintf(`{"namespace":"service/x","key":%q,"schema":"keeppeek.lease.v1","document":{"holder":"w1","claimed_at_ms":1}}`, key))
		if !r.OK {
			t.Fatalf("put %s: %+v", key, r)
		}
		return r.Entry.Revision
	}
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "w"))
	if err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	put("a")

	// The first watch request, handled as serve does, up to the reply.
	old := &detachedRequest{nc: s.nc, subject: wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpWatch), reply: inbox,
		data: []byte(`{"request_id":1,"watch_id":"w","namespace":"service/x"}`)}
	id, res, after := s.dispatch(wire.OpWatch, old)
	if !res.OK || after == nil {
		t.Fatalf("watch: %+v", res)
	}
	res.RequestID = id
	rev2 := put("a") // committed while the reply is on its way: held in the gate
	// The reply goes out; after has not run yet.
	s.respond(wire.OpWatch, old, time.Now(), res, nil)
	m, err := replies.NextMsg(to)
	if err != nil {
		t.Fatal(err)
	}
	var first wire.Result
	if err := json.Unmarshal(m.Data, &first); err != nil || !first.OK {
		t.Fatalf("first snapshot %s: %v", m.Data, err)
	}

	// The client resyncs: unwatch, watch the same id again.
	if r := req(wire.OpUnwatch, `{"watch_id":"w"}`); !r.OK {
		t.Fatalf("unwatch %+v", r)
	}
	second := req(wire.OpWatch, `{"watch_id":"w","namespace":"service/x"}`)
	if !second.OK || second.Watch.SnapshotRevision != rev2 {
		t.Fatalf("second watch %+v", second)
	}

	after(nil) // the first request's goroutine resumes
	rev3 := put("b")

	m, err = sub.NextMsg(to)
	if err != nil {
		t.Fatal(err)
	}
	var u wire.WatchMessage
	if err := json.Unmarshal(m.Data, &u); err != nil {
		t.Fatal(err)
	}
	if u.Revision <= second.Watch.SnapshotRevision || u.Revision != rev3 {
		t.Fatalf("first message on the new watch (snapshot_revision %d): %s; want the put of b at revision %d: "+
			"the unwatched registration's held update was delivered on the new one", second.Watch.SnapshotRevision, m.Data, rev3)
	}
}
