package transcode_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/reconciler"
)

// holderDyingAfterItsStart runs tx-1 alone against a media server that answers commands after 3 s,
// puts the test's intent and waits for tx-1's start_publication to be under way. tx-1 is killed
// (its connection closed: its lease is left to expire) as soon as it has reported the publication
// that start made, before it reconciles anything else. died is closed then.
func holderDyingAfterItsStart(t *testing.T, f *fixture) (died <-chan struct{}) {
	t.Helper()
	nc := f.Connect(t, svc)
	dead := make(chan struct{})
	var once sync.Once
	tx1, err := transcode.New(transcode.Config{Conn: nc, Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Events: func(e transcode.Event) {
			if e.Kind == "status" && strings.Contains(e.Detail, "publication started") {
				once.Do(func() { nc.Close(); close(dead) })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tx1.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.Sim.SetCommandDelay(3 * time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1's start under way", func() bool { return f.Sim.Pending() > 0 })
	return dead
}

// standbyOf runs tx-2 (lease TTL 2 s) and waits until it has seen the intent held by another worker.
func standbyOf(t *testing.T, f *fixture) {
	t.Helper()
	standby := make(chan struct{})
	var once sync.Once
	tx2, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-2", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Events: func(e transcode.Event) {
			if e.Kind == "standby" {
				once.Do(func() { close(standby) })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tx2.Run)
	select {
	case <-standby:
	case <-time.After(10 * time.Second):
		t.Fatal("tx-2 did not stand by")
	}
}

// The intent is deleted while its holder's start_publication is under way, and the holder dies once
// that start has made the publication (reported in the status), before it saw the delete. The
// standby looked at the delete while the holder still held the lease and no status named a
// publication yet: it took "no status" for "nothing to stop" and forgot the intent, and the
// publication held the variant for good.
func TestDeletedWhileTheHolderStartsThenDiesStopsItsPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	died := holderDyingAfterItsStart(t, f)
	standbyOf(t, f)
	if _, err := f.Coord.DeleteIntent(t.Context(), ns, key, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-died:
	case <-time.After(15 * time.Second):
		t.Fatal("tx-1 never reported its publication")
	}
	f.Sim.SetCommandDelay(0)
	waitFor(t, 15*time.Second, "no publication left", func() bool { return len(f.Sim.Publications()) == 0 })
}

// The intent names another output while its holder's start_publication is under way, and the holder
// dies once that start has made the publication. The standby must not claim the new output while
// the old output's lease is held for the intent (its holder may yet publish): in the end the new
// output alone is published, by tx-2, and the old one the dead holder left is stopped.
func TestOutputChangedWhileTheHolderStartsThenDiesStopsItsPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	died := holderDyingAfterItsStart(t, f)
	standbyOf(t, f)
	const other = "browser-h264-480p"
	pointAt(t, f, other)
	select {
	case <-died:
	case <-time.After(15 * time.Second):
		t.Fatal("tx-1 never reported its publication")
	}
	f.Sim.SetCommandDelay(0)
	waitFor(t, 20*time.Second, "only the new variant published, reported active by tx-2", func() bool {
		pubs := f.Sim.Publications()
		var st reconciler.ObservedStatus
		_ = json.Unmarshal([]byte(f.statusOf(t, key)), &st)
		return len(pubs) == 1 && pubs[0].VariantID == other && st.State == reconciler.StateActive && st.Holder == "tx-2" && st.VariantID == other
	})
}

// The holder is killed, the intent withdrawn, and the holder restarted with the same worker id (a
// service manager restarts "tx-1"): the status names a publication of "tx-1", but not of this
// process, which holds nothing. It is stopped once the dead process's lease has expired, as another
// worker would stop it; it was taken for the restarted worker's own and left for good.
func TestWithdrawnWhileTheHolderRestartsStopsItsPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	kill := startTx1(t, f)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1 active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })
	kill()
	if _, err := f.Coord.SetDesired(t.Context(), ns, key, false); err != nil {
		t.Fatal(err)
	}
	f.runTranscoder(t, "tx-1", 2*time.Second)
	waitFor(t, 15*time.Second, "no publication left", func() bool { return len(f.Sim.Publications()) == 0 })
	waitFor(t, 10*time.Second, "the status says stopped", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"stopped"`) })
}

// The intent names another source while its holder tx-1 waits for a slow start_publication, and
// tx-2 starts after the change. Once, tx-2 claimed the new output at once and reported it; tx-1's
// start then returned, and its report of the old output and its "stopped" replaced tx-2's status,
// which tx-2, remembering only what it wrote, never said again: the status of a desired intent said
// "stopped" for good. Now tx-2 finds the old output's lease held for the intent in the store and
// claims the new output only once tx-1 has let the old one go; whichever of the two then holds the
// new output reports it, and the status never stays "stopped".
func TestStatusBuriedByAFormerOutputsHolderIsWrittenAgain(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	var mu sync.Mutex
	var events []transcode.Event
	tx1, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 60 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Events: func(e transcode.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tx1.Run)
	f.Sim.SetCommandDelay(3 * time.Second)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1's start under way", func() bool { return f.Sim.Pending() > 0 })
	f.Sim.SetCommandDelay(0)
	const elsewhere = "back-yard" // a source the media server does not have
	if _, err := f.Coord.UpdateIntent(t.Context(), ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		cur.SourceID = elsewhere
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	f.runTranscoder(t, "tx-2", 60*time.Second)
	newOutputReported := func() bool {
		var st reconciler.ObservedStatus
		_ = json.Unmarshal([]byte(f.statusOf(t, key)), &st)
		return (st.Holder == "tx-1" || st.Holder == "tx-2") && st.State == reconciler.StatePending && strings.Contains(st.Message, elsewhere)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("status: %s", f.statusOf(t, key))
		}
	})
	waitFor(t, 15*time.Second, "tx-1 let the old output go", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == "stopped" {
				return true
			}
		}
		return false
	})
	waitFor(t, 15*time.Second, "the new output's holder reports it", newOutputReported)
	if pubs := f.Sim.Publications(); len(pubs) != 0 {
		t.Fatalf("publications left: %+v", pubs)
	}
}
