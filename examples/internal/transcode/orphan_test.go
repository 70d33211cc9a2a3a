package transcode_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/wire"
)

// killedHolder runs tx-1 alone until its publication is READY and reported active, then kills it
// (its connection closed: nothing more reaches the servers, its lease is not released), and starts
// the standby tx-2.
func killedHolder(t *testing.T, f *fixture) {
	t.Helper()
	kill := startTx1(t, f)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1 active", func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), `"state":"active"`)
	})
	kill()
	standbyOf(t, f) // it has seen the intent, and the dead holder's lease, before anything changes
}

// The holder dies, and then the coordinator withdraws the intent (desired false): the standby, once
// the dead holder's lease has expired, stops the publication the dead holder left and reports it
// stopped. Nobody did: the publication held the variant on the media server for good.
func TestWithdrawnAfterTheHolderDiedStopsItsPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	killedHolder(t, f)
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "no publication left", func() bool { return len(f.Sim.Publications()) == 0 })
	waitFor(t, 10*time.Second, "the status says stopped", func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), `"state":"stopped"`)
	})
	waitFor(t, 10*time.Second, "the lease released", func() bool {
		_, err := f.Admin.Get(t.Context(), ns, transcode.LeaseKey(reconciler.MediaIntent{SourceID: src, MediaKind: "video", VariantID: variant}))
		return wire.CodeOf(err) == wire.CodeNotFound
	})
}

// The holder dies, and then the coordinator deletes the intent: the standby stops the publication
// the dead holder left.
func TestDeletedAfterTheHolderDiedStopsItsPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	killedHolder(t, f)
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "no publication left", func() bool { return len(f.Sim.Publications()) == 0 })
}

// The holder dies, and then the coordinator points the intent at another output variant: the
// standby stops the old variant's publication the dead holder left, and publishes the new one.
func TestOutputChangedAfterTheHolderDiedStopsItsPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	killedHolder(t, f)
	const other = "browser-h264-480p"
	pointAt(t, f, other)
	waitFor(t, 15*time.Second, "only the new variant published, by tx-2", func() bool {
		pubs := f.Sim.Publications()
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return len(pubs) == 1 && pubs[0].VariantID == other && err == nil &&
			strings.Contains(string(e.Document), `"state":"active"`) && strings.Contains(string(e.Document), `"holder":"tx-2"`)
	})
}

// pointAt has the coordinator point the test's intent at another output variant (and profile).
func pointAt(t *testing.T, f *fixture, variant string) {
	t.Helper()
	if _, err := f.Coord.UpdateIntent(t.Context(), ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		cur.VariantID, cur.OutputProfile = variant, variant
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The holder dies while its status says pending (its source is offline: nothing published), and then
// the coordinator withdraws the intent: the standby, once the dead holder's lease has expired, says
// stopped in its place. Nobody did: the withdrawn intent's status went on saying that the dead
// worker was waiting for its source.
func TestWithdrawnAfterAPendingHolderDiedSaysStopped(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	if err := f.Sim.SetOnline(src, false); err != nil {
		t.Fatal(err)
	}
	kill := startTx1(t, f)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1 pending", func() bool {
		st := f.statusOf(t, key)
		return strings.Contains(st, `"state":"pending"`) && strings.Contains(st, `"holder":"tx-1"`)
	})
	kill()
	standbyOf(t, f)
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the status says stopped", func() bool {
		return strings.Contains(f.statusOf(t, key), `"state":"stopped"`)
	})
	waitFor(t, 10*time.Second, "the lease released", func() bool {
		return f.leaseGone(t, transcode.LeaseKey(reconciler.MediaIntent{SourceID: src, MediaKind: "video", VariantID: variant}))
	})
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Fatalf("publications %+v, want none", pubs)
	}
}
