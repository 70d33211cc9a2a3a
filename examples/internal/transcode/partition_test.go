package transcode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/internal/splittest"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// The tests of this file run the state server on the near node of a two-node NATS cluster whose route
// a test cuts (or freezes) and mends, the active transcoder on the far node (a healthy connection that
// reaches nothing of the state server while the route is parted), its standby on the near node, and
// the media server simulator on either node:
//   - far: the old holder can still command the media server, the standby cannot;
//   - near: the standby can, the old holder cannot (as a holder that died, but alive after the mend).

// splitTx is the cluster, the simulator and the coordinator (on the near node).
type splitTx struct {
	*splittest.Env
	sim   *sim.Sim
	admin *client.Client
	coord *coordinator.Coordinator
}

func splitConnect(t *testing.T, e *splittest.Env, node int, principal string) *nats.Conn {
	t.Helper()
	return e.Connect(t, node, principal, client.Connect)
}

func startSplitTx(t *testing.T, simNode int) *splitTx {
	t.Helper()
	e := splittest.Start(t, splittest.Options{Principals: []policy.Principal{{ID: "coordinator", Admin: true}, {ID: "media"}, {ID: svc, Admin: true}}})
	s := sim.New(splitConnect(t, e, simNode, "media"), sim.Options{Sources: []sim.SourceConfig{{SourceID: src}}, ReadyDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	admin, err := client.New(splitConnect(t, e, splittest.Near, "coordinator"), "coordinator", client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	return &splitTx{Env: e, sim: s, admin: admin, coord: co}
}

// splitTranscoder runs a transcoder connected to node only, whose events go to events.
func (s *splitTx) transcoder(t *testing.T, node int, id string, events func(transcode.Event)) *transcode.Transcoder {
	t.Helper()
	tr, err := transcode.New(transcode.Config{Conn: splitConnect(t, s.Env, node, svc), Principal: svc, WorkerID: id, Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Capabilities: simtest.FastTracker, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
	return tr
}

// status reads the intent's status from the store.
func (s *splitTx) status(t *testing.T) (reconciler.ObservedStatus, bool) {
	e, err := s.admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
	if err != nil {
		return reconciler.ObservedStatus{}, false
	}
	var st reconciler.ObservedStatus
	return st, json.Unmarshal(e.Document, &st) == nil
}

// onePublication reports the one publication of the variant, READY, when there is exactly one.
func (s *splitTx) onePublication() (sim.PublicationInfo, bool) {
	pubs := s.sim.Publications()
	if len(pubs) != 1 || pubs[0].VariantID != variant {
		return sim.PublicationInfo{}, false
	}
	v, ok := s.sim.Capabilities().Variant(src, "video", variant)
	return pubs[0], ok && v.State == capabilities.StateReady && v.Publisher == svc
}

// settled reports, when it is so, that there is exactly one publication of the intent, READY, and that
// the status names it, active, with holder as its holder.
func (s *splitTx) settled(t *testing.T, holder string) (string, bool) {
	p, ok := s.onePublication()
	st, sok := s.status(t)
	what := fmt.Sprintf("publications %v; status %+v", s.sim.Publications(), st)
	return what, ok && sok && st.State == reconciler.StateActive && st.PublicationID == p.ID && st.Holder == holder
}

// A transcoder holds an intent's lease on the far side of a route partition, its standby on the
// state server's side. The holder stops holding (Held false) before the standby claims; from the loss
// on it sends no media command but the stop of its own publication (stopPublication: ended by its id
// whether or not the lease is still held), and none at all once that is answered. After the mend
// there is exactly one publication of the variant, the standby's (the lease holder's), and the status
// names it; the former holder stays a standby.
func TestTranscoderAcrossARoutePartition(t *testing.T) {
	for _, p := range splittest.Partitions {
		for _, simNode := range splittest.Sides {
			t.Run(p.Name+"/sim-"+simNode.Name, func(t *testing.T) {
				s := startSplitTx(t, simNode.Node)
				var farTr, nearTr *transcode.Transcoder
				var mu sync.Mutex
				var heldAtTakeover bool
				claimed := make(chan struct{}, 8)
				standby := make(chan struct{}, 64)
				farTr = s.transcoder(t, splittest.Far, "tx-far", func(transcode.Event) {})
				if _, err := s.coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 15*time.Second, "tx-far's publication READY and reported", func() bool { _, ok := s.settled(t, "tx-far"); return ok })
				oldPub, _ := s.onePublication()
				nearTr = s.transcoder(t, splittest.Near, "tx-near", func(e transcode.Event) {
					switch e.Kind {
					case "lease claimed":
						if len(farTr.Holds()) != 0 {
							mu.Lock()
							heldAtTakeover = true
							mu.Unlock()
						}
						claimed <- struct{}{}
					case "standby":
						select {
						case standby <- struct{}{}:
						default:
						}
					}
				})
				select {
				case <-standby:
				case <-time.After(15 * time.Second):
					t.Fatal("tx-near did not find the lease held within 15 s")
				}
				before := len(s.sim.Commands())

				p.Apart(s.Env, t)
				waitFor(t, 10*time.Second, "tx-far stops holding", func() bool { return len(farTr.Holds()) == 0 })
				select {
				case <-claimed:
				case <-time.After(15 * time.Second):
					t.Fatal("tx-near did not claim the lease within 15 s of the partition")
				}
				mu.Lock()
				if heldAtTakeover {
					t.Error("tx-far still held the lease when tx-near claimed it")
				}
				mu.Unlock()
				if simNode.Node == splittest.Far {
					// tx-far ends its own publication, which it reaches; the standby cannot start one.
					waitFor(t, 10*time.Second, "tx-far's publication ended", func() bool { return len(s.sim.Publications()) == 0 })
				}
				// The status is the new holder's and tells what it can see: sim-far, nothing published
				// (the source is offline to its stale snapshot); sim-near, its own publication.
				waitFor(t, 10*time.Second, "tx-near's status while parted", func() bool {
					st, ok := s.status(t)
					if !ok || st.Holder != "tx-near" {
						return false
					}
					if simNode.Node == splittest.Far {
						return st.PublicationID == "" && st.State == reconciler.StatePending
					}
					p, ok := s.onePublication()
					return ok && p.ID != oldPub.ID && st.PublicationID == p.ID && st.State == reconciler.StateActive
				})
				// A while of tx-far's reconciles holding nothing: its capability tracker fetches every
				// 100 ms, resyncs enqueue it. No media command but the one stop of its publication.
				partedCommands := func() []sim.CommandRecord { return s.sim.Commands()[before:] }
				if simNode.Node == splittest.Far {
					simtest.Throughout(t, 2*time.Second, func() (string, bool) {
						for _, c := range partedCommands() {
							if c.Command != capabilities.CommandStopPublication || !jsonHas(c.Body, "publication_id", oldPub.ID) {
								return fmt.Sprintf("a media command while the route is parted, but the stop of %s: %s %s", oldPub.ID, c.Command, c.Body), false
							}
						}
						return "", true
					})
				}
				if n := len(partedCommands()); simNode.Node == splittest.Far && n != 1 {
					t.Errorf("tx-far sent %d stops of its publication while parted, want 1", n)
				}
				s.Mend(t)
				var what string
				if !simtest.Within(20*time.Second, func() (ok bool) { what, ok = s.settled(t, "tx-near"); return ok }) {
					t.Fatalf("after the mend, not one publication of tx-near's named by the status within 20 s: %s", what)
				}
				if got := nearTr.Holds(); len(got) != 1 {
					t.Errorf("tx-near holds %v", got)
				}
				if got := farTr.Holds(); len(got) != 0 {
					t.Errorf("tx-far holds %v after the mend", got)
				}
				newPub, _ := s.onePublication()
				if newPub.ID == oldPub.ID {
					t.Errorf("the publication after the mend is tx-far's %s", oldPub.ID)
				}
				// Stable: tx-far, back in touch, neither takes the variant over nor stops it.
				after := len(s.sim.Commands())
				simtest.Throughout(t, 2*time.Second, func() (string, bool) {
					what, ok := s.settled(t, "tx-near")
					return "after the mend: " + what, ok
				})
				for _, c := range s.sim.Commands()[after:] {
					if c.Command == capabilities.CommandStartPublication {
						t.Errorf("a start_publication once settled: %s", c.Body)
					}
				}
				var d wire.LeaseDocument
				if e, err := s.admin.Get(t.Context(), ns, "leases/front-door-video-browser-h264-720p"); err != nil {
					t.Fatal(err)
				} else if _ = json.Unmarshal(e.Document, &d); d.Holder != "tx-near" {
					t.Errorf("the lease's holder is %q", d.Holder)
				}
			})
		}
	}
}

// jsonHas reports whether the JSON object body has field equal to the string want.
func jsonHas(body []byte, field, want string) bool {
	var m map[string]any
	return json.Unmarshal(body, &m) == nil && m[field] == want
}
