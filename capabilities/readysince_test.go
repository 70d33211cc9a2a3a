package capabilities_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
)

// readySince returns the ReadySince of front-door/video/variantID as the tracker shows it, once
// the variant is READY there.
func readySince(t *testing.T, tr *capabilities.Tracker, variantID string) uint64 {
	t.Helper()
	var since uint64
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		v, ok := c.Variant("front-door", "video", variantID)
		since = v.ReadySince
		return ok && v.State == capabilities.StateReady
	}); err != nil {
		t.Fatalf("%s READY: %v", variantID, err)
	}
	return since
}

// A READY variant's ReadySince survives changes elsewhere and starts over at a takeover (its
// publisher starting it again: PENDING, then READY under a new publication, its subscriptions
// ended), whether the tracker saw the PENDING generation or only the READY one after it. A
// subscriber comparing what it saw when it subscribed with what it sees now finds the takeover
// even when every generation in between went unread.
func TestReadySinceFollowsTakeovers(t *testing.T) {
	e := newEnv(t, sim.Options{})
	tr, _ := e.tracker(capabilities.TrackerOptions{}, nil)
	pub := e.commands("transcoder-a")

	e.publish(pub, "p720")
	first := readySince(t, tr, "p720")
	if first == 0 || first > tr.Generation() {
		t.Fatalf("ReadySince %d of a READY variant at generation %d", first, tr.Generation())
	}
	original := readySince(t, tr, sim.OriginalVariantID)

	// A change elsewhere, every generation seen: nothing starts over.
	if err := e.sim.SetOnline("back-yard", false); err != nil {
		t.Fatal(err)
	}
	if err := tr.WaitGeneration(ctxT(t), e.sim.Generation()); err != nil {
		t.Fatal(err)
	}
	if got := readySince(t, tr, "p720"); got != first {
		t.Fatalf("ReadySince %d after another source went offline, want %d still", got, first)
	}
	if got := readySince(t, tr, sim.OriginalVariantID); got != original {
		t.Fatalf("the source's own variant: ReadySince %d after another source went offline, want %d still", got, original)
	}

	// A takeover the tracker sees step by step.
	e.publish(pub, "p720")
	if err := tr.WaitFor(ctxT(t), func(c *capabilities.ServerCapabilities) bool {
		v, ok := c.Variant("front-door", "video", "p720")
		return ok && v.State == capabilities.StateReady && v.ReadySince != first
	}); err != nil {
		t.Fatalf("a takeover seen step by step left ReadySince %d: %v", first, err)
	}
	second := readySince(t, tr, "p720")
	if second <= first {
		t.Fatalf("ReadySince %d after a takeover, want above %d", second, first)
	}

	// A takeover whose announcements are lost: the tracker only ever installs the READY generation
	// after it, the variant READY from the same publisher on the same session, as before.
	e.sim.SuppressChanged(true)
	e.publish(pub, "p720")
	// The simulator announces nothing now: its state is watched directly.
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(5 * time.Millisecond) {
		if v, ok := e.sim.Capabilities().Variant("front-door", "video", "p720"); ok && v.State == capabilities.StateReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("p720 not READY again after the takeover")
		}
	}
	e.sim.SuppressChanged(false)
	if readySince(t, tr, "p720") != second || tr.Generation() == e.sim.Generation() {
		t.Fatal("the tracker learned of the takeover without an announcement or a fetch")
	}
	tr.Refresh()
	if err := tr.WaitGeneration(ctxT(t), e.sim.Generation()); err != nil {
		t.Fatal(err)
	}
	if got := readySince(t, tr, "p720"); got != tr.Generation() {
		t.Fatalf("ReadySince %d after a takeover hidden in a gap, want the generation installed after it, %d", got, tr.Generation())
	}
	// The tracker cannot tell what else the gap hid: every READY variant starts over.
	if got := readySince(t, tr, sim.OriginalVariantID); got != tr.Generation() {
		t.Fatalf("the source's own variant: ReadySince %d after a gap, want %d", got, tr.Generation())
	}
}
