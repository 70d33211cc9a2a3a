package view_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/view"
	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// A viewer on the far side of a route partition, subscribed; the media server (and the variant's
// publisher) on either node. While parted the viewer makes no new subscription (it keeps the one it
// has: a stale snapshot is not a gone variant). With the media server on the viewer's side, the
// intent is withdrawn on the state server's side meanwhile: after the mend the viewer ends its
// subscription and the status says stopped. With it on the state server's side, the intent stays:
// after the mend there is exactly one subscription, the one the status names.
func TestViewerAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		for _, simNode := range splittest.Sides {
			t.Run(p.Name+"/sim-"+simNode.Name, func(t *testing.T) {
				e := splittest.Start(t, splittest.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "media"},
					{ID: "transcoder-a", Admin: true}, {ID: user}}})
				connect := func(node int, principal string) *client.Client {
					c, err := client.New(e.Connect(t, node, principal, client.Connect), principal, client.WithRequestTimeout(time.Second))
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				mediaConn := connect(simNode.Node, "media")
				s := sim.New(mediaConn.Conn(), sim.Options{Sources: sim.Sources(src), ReadyDelay: 50 * time.Millisecond})
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				if err := s.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Stop)
				pub, err := capabilities.NewCommands(connect(simNode.Node, "transcoder-a").Conn(), "transcoder-a")
				if err != nil {
					t.Fatal(err)
				}
				sess, _, _ := s.SessionID(src)
				if _, err := pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
					VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
					t.Fatal(err)
				}
				admin := connect(splittest.Near, "coordinator")
				subs := func() []sim.SubscriptionInfo {
					var out []sim.SubscriptionInfo
					for _, x := range s.Subscriptions() {
						if x.Principal == user {
							out = append(out, x)
						}
					}
					return out
				}
				uc := connect(splittest.Far, user)
				v, err := view.New(view.Config{Conn: uc.Conn(), Principal: user, WorkerID: "viewer-1", Logger: slog.New(slog.DiscardHandler),
					Capabilities: simtest.FastTracker})
				if err != nil {
					t.Fatal(err)
				}
				simtest.Run(t, v.Run)
				key, err := v.Want(t.Context(), src, "video", variant)
				if err != nil {
					t.Fatal(err)
				}
				status := func() reconciler.ObservedStatus {
					en, err := admin.Get(t.Context(), ns, "status/"+key[len("intents/"):])
					var st reconciler.ObservedStatus
					if err == nil {
						_ = json.Unmarshal(en.Document, &st)
					}
					return st
				}
				oneNamed := func() (string, bool) {
					ss, st := subs(), status()
					return fmt.Sprintf("subscriptions %v; status %+v", ss, st),
						len(ss) == 1 && st.State == reconciler.StateActive && st.SubscriptionID == ss[0].ID
				}
				simtest.WaitFor(t, 15*time.Second, "subscribed and reported", func() bool { _, ok := oneNamed(); return ok })
				first := subs()[0].ID
				before := len(s.Commands())

				p.Apart(e, t)
				if simNode.Node == splittest.Far {
					doc, _ := json.Marshal(wire.MediaIntent{Role: wire.RoleSubscribe, Desired: false, SourceID: src, MediaKind: "video", VariantID: variant})
					if _, err := admin.Put(t.Context(), wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaMediaIntent, Document: doc}); err != nil {
						t.Fatal(err)
					}
				}
				// A while parted: the viewer's resyncs and capability fetches (every 100 ms) find
				// nothing new it may act on.
				simtest.Throughout(t, 3*time.Second, func() (string, bool) {
					for _, c := range s.Commands()[before:] {
						if c.Principal == user {
							return fmt.Sprintf("a media command of the viewer while parted: %s %s", c.Command, c.Body), false
						}
					}
					return "", true
				})

				e.Mend(t)
				if simNode.Node == splittest.Far {
					var what string
					if !simtest.Within(20*time.Second, func() bool {
						st := status()
						what = fmt.Sprintf("subscriptions %v; status %+v", subs(), st)
						return len(subs()) == 0 && st.State == reconciler.StateStopped && st.SubscriptionID == ""
					}) {
						t.Fatalf("the withdrawn intent's subscription not ended within 20 s of the mend: %s", what)
					}
					return
				}
				// The status read first may be the one from before the partition; the viewer, its
				// snapshot stale until its tracker fetches again, may say pending for a moment. What
				// counts: never two subscriptions, and the one there is named by the status and held.
				var what string
				if !simtest.Within(20*time.Second, func() (ok bool) {
					if n := len(subs()); n > 1 {
						t.Fatalf("%d subscriptions after the mend", n)
					}
					what, ok = oneNamed()
					id, held := v.Subscription(key)
					return ok && held && id == subs()[0].ID
				}) {
					t.Fatalf("after the mend: %s", what)
				}
				simtest.Throughout(t, 2*time.Second, func() (string, bool) {
					n := len(subs())
					return fmt.Sprintf("%d subscriptions once settled", n), n == 1
				})
				if got := subs()[0].ID; got != first {
					t.Logf("subscribed afresh after the mend: %s (was %s)", got, first)
				}
			})
		}
	}
}
