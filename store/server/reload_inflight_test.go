package server_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// clockGate is a store clock that, once armed, holds the next reading until released: the reading
// the committer takes when it runs a batch (runBatch), after the batch's mutations passed their
// policy checks and were queued.
type clockGate struct {
	armed   atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

func (g *clockGate) now() time.Time {
	if g.armed.CompareAndSwap(true, false) {
		close(g.blocked)
		<-g.release
	}
	return time.Now()
}

// TestSetPrincipalsStopsWritesAlreadyInFlight: a principal's write is in the committer (its policy
// check passed under the old principals) when a reload (SetPrincipals) takes the principal's write
// permission away, or removes the principal. SetPrincipals returns; the write must not then be
// committed and answered OK: a reload that has returned would otherwise still let the principal
// write what it may no longer write.
func TestSetPrincipalsStopsWritesAlreadyInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after []policy.Principal
	}{
		{"demoted", []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "ops"}}},
		{"removed", []policy.Principal{{ID: "coordinator", Admin: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := &clockGate{blocked: make(chan struct{}), release: make(chan struct{})}
			ns := natstest.Start(t, natsserver.Options{})
			opts := store.DefaultOptions()
			opts.Clock = gate.now
			st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), opts)
			if err != nil {
				t.Fatal(err)
			}
			snc, err := nats.Connect(ns.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			srv, err := server.New(st, snc, server.Options{
				Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "ops", Admin: true}}})
			if err == nil {
				err = srv.Start()
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				_ = srv.Stop(ctx)
				snc.Close()
			})
			ops, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(wire.InboxPrefix("ops")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ops.Close)

			gate.armed.Store(true)
			var wg sync.WaitGroup
			var reply wire.Result
			var replyErr error
			wg.Go(func() {
				msg, err := ops.Request(wire.StateSubject(wire.DefaultPrefix, "ops", wire.OpPut),
					[]byte(`{"namespace":"service/x","key":"k","schema":"keeppeek.lease.v1","document":`+lease+`}`), timeout)
				if err != nil {
					replyErr = err
					return
				}
				replyErr = json.Unmarshal(msg.Data, &reply)
			})
			select {
			case <-gate.blocked: // ops's put passed its checks and is in the batch being committed
			case <-time.After(timeout):
				t.Fatal("the put never reached the committer")
			}
			// The reload, beside the held commit. SetPrincipals may wait for the commit under way (the
			// write is then committed before the reload returns, which is fine); if it returns while
			// the commit is still held, the write must not be committed after.
			returned := make(chan error, 1)
			go func() { returned <- srv.SetPrincipals(tc.after) }()
			returnedFirst := false
			select {
			case err := <-returned:
				if err != nil {
					t.Fatal(err)
				}
				returnedFirst = true
				close(gate.release)
			case <-time.After(time.Second): // SetPrincipals waits for the held commit
				close(gate.release)
				if err := <-returned; err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			if replyErr != nil {
				t.Fatalf("ops's put: %v", replyErr)
			}
			if reply.OK && returnedFirst {
				e, gerr := st.Get(context.Background(), policy.Principal{ID: "coordinator", Admin: true},
					wire.GetRequest{Namespace: "service/x", Key: "k"})
				t.Fatalf("ops's put to service/x, in flight when SetPrincipals took ops's write permission away, was committed "+
					"after SetPrincipals returned: reply OK at revision %d; stored: owner %q revision %d (err %v)",
					reply.Entry.Revision, e.Owner, e.Revision, gerr)
			}
			if !reply.OK && (reply.Error == nil || reply.Error.Code != wire.CodePermissionDenied) {
				t.Fatalf("ops's put: %+v, want PERMISSION_DENIED", reply)
			}
		})
	}
}
