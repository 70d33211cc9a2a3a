package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/examples/internal/transcode"
)

// An event a worker reported before the tour's KILLED line is told before it, never after: the
// narration tells what happened in the order it happened. (It used to queue the workers' events and
// tell them when the tour next read them, so a standby's event from just before the kill came out
// after the KILLED line.)
func TestNarratorTellsEventsBeforeTheLinesThatFollowThem(t *testing.T) {
	var out bytes.Buffer
	n := newNarrator(&out)
	n.transcoder(transcode.Event{WorkerID: "tx-1", Kind: "capability ready", Intent: "intents/x", Detail: "v READY"})
	n.transcoder(transcode.Event{WorkerID: "tx-2", Kind: "standby", Intent: "intents/x", Detail: "held"})
	_ = n.while(func(say func(string, ...any)) error {
		say("KILLED tx-1")
		return nil
	})
	n.transcoder(transcode.Event{WorkerID: "tx-2", Kind: "standby", Intent: "intents/x", Detail: "held"}) // a repeat: not told
	n.transcoder(transcode.Event{WorkerID: "tx-2", Kind: "lease claimed", Intent: "intents/x", Detail: "at 7"})
	got := lineTexts(t, out.String())
	want := []string{"tx-1: capability ready (v READY)", "tx-2: standby (held)", "KILLED tx-1", "tx-2: lease claimed (at 7)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("narration:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The tour learns who is READY from the same callback.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if id, err := n.waitReady(ctx, "", false); err != nil || id != "tx-1" {
		t.Fatalf("waitReady: %q %v, want tx-1", id, err)
	}
}

// Lines told from many goroutines at once are whole and their timestamps never go backwards.
func TestNarratorTimestampsNeverGoBackwards(t *testing.T) {
	var out bytes.Buffer
	n := newNarrator(&out)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				n.viewer("viewer subscribed", "intents/x", strconv.Itoa(w*1000+i))
				n.say("tour line %d", i)
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8*200*2 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200*2)
	}
	last := -1.0
	for _, l := range lines {
		at := stamp(t, l)
		if at < last {
			t.Fatalf("timestamp %v after %v: %q", at, last, l)
		}
		last = at
	}
}

// After the tour the workers' events are no longer told; the tour's own lines still are.
func TestNarratorHushedTellsOnlyTheTour(t *testing.T) {
	var out bytes.Buffer
	n := newNarrator(&out)
	n.hush()
	n.transcoder(transcode.Event{WorkerID: "tx-2", Kind: "lease claimed", Intent: "intents/x"})
	n.cv("cv subscribed", "intents/y", "model m")
	n.say("done")
	if got := lineTexts(t, out.String()); len(got) != 1 || got[0] != "done" {
		t.Fatalf("narration after the tour: %q", got)
	}
}

// lineTexts returns the narration's lines without their timestamps.
func lineTexts(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	for l := range strings.SplitSeq(strings.TrimSuffix(s, "\n"), "\n") {
		_, text, ok := strings.Cut(l, "s] ")
		if !ok {
			t.Fatalf("line without a timestamp: %q", l)
		}
		out = append(out, text)
	}
	return out
}

// stamp is a narration line's timestamp in seconds.
func stamp(t *testing.T, line string) float64 {
	t.Helper()
	v, _, ok := strings.Cut(strings.TrimPrefix(line, "["), "s]")
	if !ok {
		t.Fatalf("line without a timestamp: %q", line)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		t.Fatalf("timestamp of %q: %v", line, err)
	}
	return f
}

// The tour ends once the viewer and the CV worker have subscribed to the standby's publication:
// subscriptions told before the standby told "publication started" were to the publication it ended,
// and do not count; one of the two subscribing again is not enough.
func TestNarratorWaitsForBothToSubscribeAgain(t *testing.T) {
	var out bytes.Buffer
	n := newNarrator(&out)
	ended, cancel := context.WithCancel(context.Background())
	cancel() // a wait on ended returns at once: nil when the condition holds already, an error if not
	n.viewer("viewer subscribed", "intents/x", "sub-1")
	n.cv("cv subscribed", "intents/y", "model m")
	if err := n.waitSubscribedAgain(ended, "tx-2"); err == nil {
		t.Fatal("the tour ended before the standby started its publication")
	}
	n.transcoder(transcode.Event{WorkerID: "tx-2", Kind: "publication started", Intent: "intents/x", Detail: "v"})
	if err := n.waitSubscribedAgain(ended, "tx-2"); err == nil {
		t.Fatalf("subscriptions to the ended publication counted:\n%s", out.String())
	}
	n.viewer("viewer subscribed", "intents/x", "sub-2")
	if err := n.waitSubscribedAgain(ended, "tx-2"); err == nil {
		t.Fatalf("the tour ended with only the viewer subscribed again:\n%s", out.String())
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- n.waitSubscribedAgain(ctx, "tx-2")
	}()
	n.cv("cv subscribed", "intents/y", "model m")
	if err := <-done; err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
}
