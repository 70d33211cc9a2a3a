package transcode_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
)

// An intent changed to name a stream the source lacks fails, and the publication of the stream it
// named before is stopped: the failed status names no publication, so nobody would stop it later (a
// standby that stops what a dead holder left reads that status), and it held the variant for good.
func TestIntentNamingAMissingStreamStopsThePublication(t *testing.T) {
	f := setup(t, sim.SourceConfig{SourceID: src})
	startTx1(t, f)
	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1 active", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"active"`) })
	if _, err := f.Coord.UpdateIntent(t.Context(), ns, key, func(cur *coordinator.MediaIntent) (*coordinator.MediaIntent, error) {
		cur.StreamID = "no-such-stream"
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "tx-1 reports failed", func() bool { return strings.Contains(f.statusOf(t, key), `"state":"failed"`) })
	waitFor(t, 10*time.Second, "the publication of the stream no longer named stopped", func() bool { return len(f.Sim.Publications()) == 0 })
}
