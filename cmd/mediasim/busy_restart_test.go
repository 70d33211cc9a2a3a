package main

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/syncbuf"
)

// A busy mediasim (more changes than milliseconds went by since it started) that is restarted at once
// still hands over to a successor whose generations are above its own (SPEC section 12: generations
// only grow), so a tracker that followed the first installs the second's capabilities. Counting on
// from the clock in milliseconds put the successor behind: the tracker then ignored it and kept the
// old, dead sessions.
func TestMediasimBusyRestartKeepsGenerationsGrowing(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var logs syncbuf.Buffer
	runCtx, stop := context.WithCancel(ctx)
	code := make(chan int, 1)
	started := time.Now()
	go func() {
		code <- run(runCtx, []string{"--nats-url", ns.ClientURL(), "--sources", "front-door", "--ready-delay", "0"}, &logs)
	}()
	// A fetch the first instance received as it stopped is never answered: it waits out FetchTimeout.
	tr := capabilities.NewTracker(nc, capabilities.TrackerOptions{RefetchBackoff: 10 * time.Millisecond, FetchTimeout: 500 * time.Millisecond})
	defer tr.Stop()
	if err := tr.Start(ctx); err != nil {
		t.Fatalf("tracker: %v (logs: %s)", err, logs.String())
	}
	first := tr.Generation()
	session, _, _ := tr.Resolve("front-door")
	cmds, err := capabilities.NewCommands(nc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Each start_publication of the same variant takes the last one over: a change, and one more when
	// it turns READY. Go on until the simulator's generations are well ahead of the clock.
	var gen uint64
	for i := 0; ; i++ {
		if i == 20000 {
			t.Skipf("could not make changes faster than one a millisecond (%d changes in %v)", gen-first, time.Since(started))
		}
		if _, err := cmds.StartPublication(ctx, capabilities.StartPublicationRequest{SessionID: session, StreamID: "video",
			VariantID: "browser-h264-720p", OutputProfile: "browser-h264-720p", RecordingMode: "disabled"}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if err := tr.WaitGeneration(ctx, first+uint64(i)+1); err != nil {
				t.Fatal(err)
			}
			gen = tr.Generation()
			if gen-first > uint64(time.Since(started).Milliseconds())+500 {
				break
			}
		}
	}
	stop()
	if c := <-code; c != 0 {
		t.Fatalf("first instance: exit %d: %s", c, logs.String())
	}
	held := tr.Generation()

	var logs2 syncbuf.Buffer
	runCtx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	code2 := make(chan int, 1)
	go func() {
		code2 <- run(runCtx2, []string{"--nats-url", ns.ClientURL(), "--sources", "front-door"}, &logs2)
	}()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	err = tr.WaitFor(wctx, func(c *capabilities.ServerCapabilities) bool {
		s, ok := c.Source("front-door")
		return ok && s.SessionID != session
	})
	stop2()
	if c := <-code2; c != 0 {
		t.Errorf("second instance: exit %d: %s", c, logs2.String())
	}
	if err != nil {
		t.Fatalf("the tracker never installed the restarted simulator's capabilities (it held generation %d after %d changes; now %d): %v\n%s",
			held, held-first, tr.Generation(), err, logs2.String())
	}
}
