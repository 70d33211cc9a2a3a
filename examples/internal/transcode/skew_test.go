package transcode_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// The state server's clock is minutes off the transcoders' (they and the media server run on the
// test's clock): the holder keeps its output, with one publication, across many lease TTLs while the
// standby waits, and once the holder dies the standby takes over with one publication again. Nothing
// of the flow compares a time of the store's clock with a worker's.
func TestFailoverUnderClockSkew(t *testing.T) {
	for _, sk := range []struct {
		name   string
		offset time.Duration
	}{{"store-ahead-10m", 10 * time.Minute}, {"store-behind-10m", -10 * time.Minute}} {
		t.Run(sk.name, func(t *testing.T) {
			f := &fixture{simtest.StartWith(t, testenv.Options{ClockOffset: sk.offset}, []sim.SourceConfig{{SourceID: src}}, svc)}
			noDouble(t, f)
			kill := startTx1(t, f)
			if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
				t.Fatal(err)
			}
			statusKey := "status/front-door-video-browser-h264-720p"
			activeBy := func(holder string) bool {
				e, err := f.Admin.Get(t.Context(), ns, statusKey)
				_, ready := readyPublication(f)
				return err == nil && strings.Contains(string(e.Document), `"state":"active"`) &&
					strings.Contains(string(e.Document), `"holder":"`+holder+`"`) && len(f.Sim.Publications()) == 1 && ready
			}
			waitFor(t, 10*time.Second, "tx-1 active", func() bool { return activeBy("tx-1") })
			standbyOf(t, f)

			// The lease is renewed every TTL/3 (2 s / 3): nine renewals span three TTLs, all tx-1's.
			leaseKey := leaseOf(variant)
			first, err := f.Admin.Get(t.Context(), ns, leaseKey)
			if err != nil {
				t.Fatal(err)
			}
			if off := time.Until(time.UnixMilli(first.ExpiresAtMs)); off < sk.offset-time.Minute || off > sk.offset+time.Minute {
				t.Fatalf("the lease's expires_at_ms is %v from the test's clock, want about %v", off, sk.offset)
			}
			waitFor(t, 15*time.Second, "nine renewals of tx-1's lease", func() bool {
				e, err := f.Admin.Get(t.Context(), ns, leaseKey)
				if err != nil {
					t.Fatalf("tx-1's lease while it runs: %v", err)
				}
				var d wire.LeaseDocument
				if err := json.Unmarshal(e.Document, &d); err != nil || d.Holder != "tx-1" || d.ClaimedAtMs != decodeClaim(t, first) {
					t.Fatalf("the lease changed hands while tx-1 ran: %s", e.Document)
				}
				return e.Revision >= first.Revision+9
			})
			if !activeBy("tx-1") {
				t.Fatal("tx-1 no longer reports its publication active after three TTLs")
			}
			starts := func() (n int) {
				for _, c := range f.Sim.Commands() {
					if c.Command == capabilities.CommandStartPublication {
						n++
					}
				}
				return n
			}
			if n := starts(); n != 1 {
				t.Fatalf("%d publications started while tx-1 held its lease, want 1", n)
			}

			kill()
			waitFor(t, 20*time.Second, "tx-2 active with one publication", func() bool { return activeBy("tx-2") })
		})
	}
}

// decodeClaim returns the claimed_at_ms of the lease entry e.
func decodeClaim(t *testing.T, e wire.Entry) int64 {
	t.Helper()
	var d wire.LeaseDocument
	if err := json.Unmarshal(e.Document, &d); err != nil {
		t.Fatalf("lease document %s: %v", e.Document, err)
	}
	return d.ClaimedAtMs
}
