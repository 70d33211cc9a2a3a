package transcode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

const other = "browser-h264-480p" // the output the tests point the intent at

func leaseOf(v string) string {
	return transcode.LeaseKey(reconciler.MediaIntent{SourceID: src, MediaKind: "video", VariantID: v})
}

// noDouble samples the simulator's publications until the test ends and fails it if two ever exist
// at once: one intent, one publication.
func noDouble(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if pubs := f.Sim.Publications(); len(pubs) > 1 {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%+v", pubs))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if len(seen) > 0 {
			t.Errorf("two publications of one intent at once (%d samples), first: %s", len(seen), seen[0])
		}
	})
}

// A worker that starts after the intent was pointed at another output has never seen the old one:
// it took the intent for new, claimed the new output and published it at once, while the old
// output's dead holder's publication still ran (two publications of one intent), and nobody ever
// stopped that one, because the new holder's status replaced the only record of it.
func TestOutputChangedBeforeAWorkerStartedStopsTheOldPublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	killedHolderAlone(t, f)
	noDouble(t, f)
	pointAt(t, f, other)
	f.transcoder(t, "tx-2") // started after the change: it knows only the new output
	waitFor(t, 15*time.Second, "only the new variant published, by tx-2", func() bool {
		pubs := f.Sim.Publications()
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return len(pubs) == 1 && pubs[0].VariantID == other && err == nil &&
			strings.Contains(string(e.Document), `"state":"active"`) && strings.Contains(string(e.Document), `"holder":"tx-2"`)
	})
}

// killedHolderAlone runs tx-1 alone until its publication is reported active, then kills it (its
// lease is left to expire).
func killedHolderAlone(t *testing.T, f *fixture) {
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
}

// A standby whose cache of the intents is behind the store (its updates late: a process that was
// stalled, a watch that vanished) learns from its lease watch that the holder let the old output go
// after the intent changed. It claimed the old output for the intent as its cache still had it and
// published it next to the holder's new one.
func TestStandbyBehindOnTheIntentDoesNotClaimTheOldOutput(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	f.transcoder(t, "tx-1")
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1 active", func() bool {
		e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p")
		return err == nil && strings.Contains(string(e.Document), `"state":"active"`)
	})
	standbyOf(t, f)

	// Another client of the principal ends tx-2's intents watch: its cache keeps the intent as it was
	// until its liveness check (5 s) notices, while its lease watch follows on.
	svcClient, err := client.New(f.Connect(t, svc), svc)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcClient.Unwatch(t.Context(), "intents-tx-2"); err != nil {
		t.Fatal(err)
	}
	leases := make(chan wire.WatchMessage, 64)
	lc, err := f.Admin.NewCache(t.Context(), client.CacheOptions{Namespace: ns, KeyPrefix: "leases/", Handlers: client.Handlers{
		OnPut:    func(e wire.Entry) { leases <- wire.WatchMessage{Kind: wire.UpdatePut, Key: e.Key, Entry: &e} },
		OnDelete: func(k string, _ uint64) { leases <- wire.WatchMessage{Kind: wire.UpdateDelete, Key: k} },
		OnExpire: func(k string, _ uint64) { leases <- wire.WatchMessage{Kind: wire.UpdateExpire, Key: k} },
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	noDouble(t, f)
	commandsBefore := len(f.Sim.Commands())
	pointAt(t, f, other)

	// tx-1 lets the old output go; tx-2 may claim it (it has no newer word of the intent), but must
	// let it go again without acting on it.
	holder := func(e *wire.Entry) string {
		var d wire.LeaseDocument
		_ = json.Unmarshal(e.Document, &d)
		return d.Holder
	}
	timeout := time.After(10 * time.Second)
	claimedByTx2 := false
	for done := false; !done; {
		select {
		case m := <-leases:
			switch {
			case m.Key == leaseOf(other) && m.Kind == wire.UpdatePut && holder(m.Entry) == "tx-1" && !claimedByTx2:
				// tx-1 claimed the new output; tx-2 is yet to react (or never did).
			case m.Key == leaseOf(variant) && m.Kind == wire.UpdatePut && holder(m.Entry) == "tx-2":
				claimedByTx2 = true
			case m.Key == leaseOf(variant) && m.Kind == wire.UpdateDelete && claimedByTx2:
				done = true // tx-2 let it go
			}
		case <-timeout:
			t.Fatalf("tx-2 claimed the old output %v and did not let it go within 10 s", claimedByTx2)
		}
		if !claimedByTx2 {
			// tx-2 not having claimed it at all is as good: wait until tx-1 serves the new output.
			if e, err := f.Admin.Get(t.Context(), ns, "status/front-door-video-browser-h264-720p"); err == nil &&
				strings.Contains(string(e.Document), `"state":"active"`) && strings.Contains(string(e.Document), other) {
				if _, err := f.Admin.Get(t.Context(), ns, leaseOf(variant)); wire.CodeOf(err) == wire.CodeNotFound {
					done = true
				}
			}
		}
	}
	t.Logf("tx-2 claimed the old output and let it go: %v", claimedByTx2)
	for _, c := range f.Sim.Commands()[commandsBefore:] {
		if c.Command == capabilities.CommandStartPublication && strings.Contains(string(c.Body), `"`+variant+`"`) {
			t.Fatalf("start_publication of the old output after the change: %s", c.Body)
		}
	}
	waitFor(t, 15*time.Second, "only the new variant published", func() bool {
		pubs := f.Sim.Publications()
		return len(pubs) == 1 && pubs[0].VariantID == other
	})
}

// A holder whose cache of the intents is behind (its watch died with a killed stated, say) holds
// the output the intent named before it was pointed back at the one a standby remembers. The
// standby, told of the change, found the intent naming the output it had last seen and claimed and
// published it at once, next to the behind holder's publication of the other output, which ran on
// until that holder's cache caught up. Its memory of the intent's output says nothing about what
// another worker holds for the intent now: the store does. Here the test plays the behind holder,
// with the leases it would hold (TestTranscodersAcrossStatedKills met it with a real one).
func TestStandbyWhoseMemoryMatchesTheIntentAgainWaitsForTheOtherOutput(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	holdFor := func(leaseKey string) *lease.Lease {
		l, err := lease.Claim(t.Context(), f.Admin, lease.Options{Namespace: ns, Key: leaseKey, Holder: "tx-behind",
			TTL: time.Minute, Purpose: "publish " + key, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		return l
	}
	first := holdFor(leaseOf(variant))
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	nc := f.Connect(t, svc)
	tr, err := transcode.New(transcode.Config{Conn: nc, Principal: svc, WorkerID: "tx-2", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Events: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)
	ev.waitFor(t, 0, "tx-2 standby on the first output", func(e transcode.Event) bool {
		return e.Kind == "standby" && strings.Contains(e.Detail, leaseOf(variant))
	})

	// Another client of the principal ends tx-2's intents watch: its cache keeps the intent as it
	// was until its liveness check (5 s) or a reconnect, so that it never sees the other output.
	svcClient, err := client.New(f.Connect(t, svc), svc)
	if err != nil {
		t.Fatal(err)
	}
	if err := svcClient.Unwatch(t.Context(), "intents-tx-2"); err != nil {
		t.Fatal(err)
	}
	pointAt(t, f, other)
	second := holdFor(leaseOf(other)) // the holder moves to the other output
	pointAt(t, f, variant)            // and does not see this: it holds the other output on
	ev.mu.Lock()
	from := len(ev.all)
	ev.mu.Unlock()
	commands := len(f.Sim.Commands())
	if err := nc.ForceReconnect(); err != nil { // tx-2 watches again at once, and sees the first output
		t.Fatal(err)
	}
	// The first output's lease goes last (its holder's stop of it was slow, say), so that tx-2 can
	// claim it only after it has caught up: it tells either that claim or that it waits.
	if err := first.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	i := ev.waitFor(t, from, "tx-2 deciding about the first output", func(e transcode.Event) bool {
		return e.Kind == "lease claimed" || e.Kind == "standby" && strings.Contains(e.Detail, leaseOf(other))
	})
	ev.mu.Lock()
	e := ev.all[i]
	ev.mu.Unlock()
	if e.Kind != "standby" {
		t.Fatalf("tx-2 acted on the first output while the other is held for the intent: %s %s", e.Kind, e.Detail)
	}
	for _, c := range f.Sim.Commands()[commands:] {
		if c.Command == capabilities.CommandStartPublication {
			t.Fatalf("start_publication while the other output is held for the intent: %s", c.Body)
		}
	}

	// The behind holder catches up and lets its output go: tx-2 takes the intent over.
	if err := second.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "tx-2 active on the first output", func() bool {
		st := readStatus(t, f)
		pubs := f.Sim.Publications()
		return st.State == reconciler.StateActive && st.VariantID == variant && st.Holder == "tx-2" &&
			len(pubs) == 1 && pubs[0].VariantID == variant
	})
}
