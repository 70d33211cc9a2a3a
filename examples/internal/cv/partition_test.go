package cv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

func splitConnect(t *testing.T, e *splittest.Env, node int, principal string) *nats.Conn {
	t.Helper()
	return e.Connect(t, node, principal, client.Connect)
}

// A CV worker holds an intent's lease and subscription on the far side of a route partition, a
// standby on the state server's side; the media server (and the variant's publisher) on either node.
// The holder stops emitting once its lease is no longer held, before the standby's claim; it sends
// no media command while parted but the unsubscribe of its own subscription (sim far), and no
// subscribe. After the mend there is exactly one subscription of the principal, named (active) by the
// status with the lease's holder as its holder.
func TestCVAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		for _, simNode := range splittest.Sides {
			t.Run(p.Name+"/sim-"+simNode.Name, func(t *testing.T) {
				e := splittest.Start(t, splittest.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "media"},
					{ID: "transcoder-a", Admin: true}, {ID: "cv", Admin: true}}})
				s := sim.New(splitConnect(t, e, simNode.Node, "media"), sim.Options{Sources: sim.Sources(src), ReadyDelay: 50 * time.Millisecond})
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				if err := s.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Stop)
				pub, err := capabilities.NewCommands(splitConnect(t, e, simNode.Node, "transcoder-a"), "transcoder-a")
				if err != nil {
					t.Fatal(err)
				}
				sess, _, _ := s.SessionID(src)
				if _, err := pub.StartPublication(t.Context(), capabilities.StartPublicationRequest{SessionID: sess, StreamID: "video",
					VariantID: variant, OutputProfile: variant, RecordingMode: "disabled"}); err != nil {
					t.Fatal(err)
				}
				admin, err := client.New(splitConnect(t, e, splittest.Near, "coordinator"), "coordinator", client.WithRequestTimeout(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				co, err := coordinator.New(admin)
				if err != nil {
					t.Fatal(err)
				}
				worker := func(node int, id string, hook func(kind string)) *events {
					ev := &events{}
					w, err := cv.New(cv.Config{Conn: splitConnect(t, e, node, "cv"), Principal: "cv", WorkerID: id, LeaseTTL: 2 * time.Second,
						EventEvery: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Capabilities: simtest.FastTracker,
						Events: func(kind, _, detail string) { ev.add(kind, detail); hook(kind) }})
					if err != nil {
						t.Fatal(err)
					}
					simtest.Run(t, w.Run)
					return ev
				}
				status := func() (reconciler.ObservedStatus, bool) {
					en, err := admin.Get(t.Context(), cvNS, "status/front-door-people")
					var st reconciler.ObservedStatus
					return st, err == nil && json.Unmarshal(en.Document, &st) == nil
				}
				leaseHolder := func() string {
					en, err := admin.Get(t.Context(), cvNS, leaseKey)
					var d wire.LeaseDocument
					if err != nil || json.Unmarshal(en.Document, &d) != nil {
						return ""
					}
					return d.Holder
				}
				settled := func() (string, bool) {
					subs := cvSubs(s)
					st, ok := status()
					h := leaseHolder()
					return fmt.Sprintf("subscriptions %v; status %+v; lease holder %q", subs, st, h),
						len(subs) == 1 && ok && st.State == reconciler.StateActive && st.SubscriptionID == subs[0].ID && h != "" && st.Holder == h
				}

				var far *events
				var farLiveAtTakeover atomic.Bool
				far = worker(splittest.Far, "cv-far", func(string) {})
				in := coordinator.SubscribeIntent(src, "video")
				in.VariantID = variant
				in.Parameters = map[string]json.RawMessage{"cv-a": json.RawMessage(`{"model_profile":"person-detector"}`)}
				if _, err := co.PutIntent(t.Context(), cvNS, intent, in); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 15*time.Second, "cv-far subscribed and reported", func() bool { _, ok := settled(); return ok && leaseHolder() == "cv-far" })
				oldSub := cvSubs(s)[0].ID
				near := worker(splittest.Near, "cv-near", func(kind string) {
					if kind == "cv subscribed" && !far.has("cv lease lost") && !far.has("cv stopped") {
						farLiveAtTakeover.Store(true)
					}
				})
				waitFor(t, 10*time.Second, "cv-far emitting", func() bool { return far.has("detection") })
				before := len(s.Commands())

				p.Apart(e, t)
				if !simtest.Within(10*time.Second, func() bool { return far.has("cv lease lost") || far.has("cv stopped") }) {
					evs := far.snapshot()
					t.Fatalf("cv-far did not stop within 10 s: its last events %v", evs[max(0, len(evs)-8):])
				}
				if simNode.Node == splittest.Near {
					// The standby takes over while parted: its claim comes after the old holder stopped.
					waitFor(t, 15*time.Second, "cv-near subscribed while parted", func() bool { return leaseHolder() == "cv-near" && near.has("cv subscribed") })
				} else {
					waitFor(t, 10*time.Second, "cv-far's subscription ended", func() bool { return len(cvSubs(s)) == 0 })
				}
				if farLiveAtTakeover.Load() {
					t.Error("cv-near subscribed before cv-far stopped emitting")
				}
				mark := len(far.snapshot())
				simtest.Throughout(t, 2*time.Second, func() (string, bool) {
					for _, c := range s.Commands()[before:] {
						if simNode.Node == splittest.Far && c.Principal == "cv" && (c.Command != capabilities.CommandUnsubscribe || !jsonHas(c.Body, "subscription_id", oldSub)) {
							return fmt.Sprintf("a media command while parted, but the unsubscribe of %s: %s %s", oldSub, c.Command, c.Body), false
						}
					}
					return "", true
				})
				for _, ev := range far.snapshot()[mark:] {
					if ev[0] == "detection" || ev[0] == "cv subscribed" {
						t.Errorf("cv-far, parted and without its lease: %s %s", ev[0], ev[1])
					}
				}

				e.Mend(t)
				var what string
				if !simtest.Within(20*time.Second, func() (ok bool) { what, ok = settled(); return ok }) {
					t.Fatalf("after the mend, not one subscription named by the holder's status within 20 s: %s", what)
				}
				simtest.Throughout(t, 2*time.Second, func() (string, bool) { what, ok := settled(); return "after the mend: " + what, ok })
			})
		}
	}
}

// has reports whether an event of kind was told.
func (e *events) has(kind string) bool {
	return slices.ContainsFunc(e.snapshot(), func(ev [2]string) bool { return ev[0] == kind })
}

// snapshot returns the events told so far.
func (e *events) snapshot() [][2]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][2]string(nil), e.list...)
}

// jsonHas reports whether the JSON object body has field equal to the string want.
func jsonHas(body []byte, field, want string) bool {
	var m map[string]any
	return json.Unmarshal(body, &m) == nil && m[field] == want
}
