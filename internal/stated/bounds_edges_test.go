package stated

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/store/wire"
)

// Every bound of the [bounds] table (SPEC section 14) at the edges the configuration accepts: 1 and
// the largest value are taken and reach BoundsValue as written; 0, negative and one past the largest
// are refused naming the bound. With the embedded NATS server the two bounds its messages must carry
// have a lower largest value: max_document_bytes the max_payload less the room the rest of a message
// needs, max_snapshot_bytes the max_payload itself.
func TestBoundsAtTheEdgesTheConfigurationAccepts(t *testing.T) {
	largest := map[string]int64{
		"max_pending_updates": wire.MaxPendingUpdatesLimit,
		"ack_deadline_ms":     wire.MaxAckDeadlineMs,
	}
	embedded := map[string]int64{
		"max_document_bytes": natsserver.MaxPayload - 8192,
		"max_snapshot_bytes": natsserver.MaxPayload,
	}
	for _, name := range boundNames {
		top, ok := largest[name]
		if !ok {
			top = wire.MaxSafeInteger
		}
		for _, v := range []int64{1, top} {
			body := fmt.Sprintf("[nats]\nurl = \"nats://127.0.0.1:4222\"\n[bounds]\n%s = %d\n", name, v)
			c, err := LoadConfig(writeConfig(t, body))
			if err != nil {
				t.Errorf("%s = %d: %v", name, v, err)
				continue
			}
			if b, err := c.BoundsValue(); err != nil || boundOf(t, b, name) != v {
				t.Errorf("%s = %d: bounds %+v %v", name, v, b, err)
			}
			if err := c.checkEmbeddedPayload(); err != nil {
				t.Errorf("%s = %d with an external NATS server: %v", name, v, err)
			}
		}
		for _, v := range []int64{0, -1, top + 1} {
			_, err := LoadConfig(writeConfig(t, fmt.Sprintf("[bounds]\n%s = %d\n", name, v)))
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s = %d: %v, want refused naming the bound", name, v, err)
			}
		}
		// The embedded server: at its max_payload's edge, and one past it refused.
		if edge, limited := embedded[name]; limited {
			for v, ok := range map[int64]bool{edge: true, edge + 1: false} {
				c, err := LoadConfig(writeConfig(t, fmt.Sprintf("[bounds]\n%s = %d\n", name, v)))
				if err != nil {
					t.Fatalf("%s = %d: %v", name, v, err)
				}
				if err := c.checkEmbeddedPayload(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), name)) {
					t.Errorf("%s = %d with the embedded NATS server: %v, want accepted %v", name, v, err, ok)
				}
			}
		}
	}
}

// boundNames are the names of every bound, as the [bounds] table and info spell them.
var boundNames = []string{"max_document_bytes", "max_entries_per_namespace", "max_namespaces", "max_total_value_bytes",
	"max_snapshot_entries", "max_snapshot_bytes", "max_watches", "max_watches_per_principal", "max_pending_updates",
	"ack_deadline_ms", "max_workers_per_principal"}

// boundOf is the bound of b named name.
func boundOf(t *testing.T, b wire.Bounds, name string) int64 {
	t.Helper()
	switch name {
	case "max_document_bytes":
		return b.MaxDocumentBytes
	case "max_entries_per_namespace":
		return b.MaxEntriesPerNamespace
	case "max_namespaces":
		return b.MaxNamespaces
	case "max_total_value_bytes":
		return b.MaxTotalValueBytes
	case "max_snapshot_entries":
		return b.MaxSnapshotEntries
	case "max_snapshot_bytes":
		return b.MaxSnapshotBytes
	case "max_watches":
		return b.MaxWatches
	case "max_watches_per_principal":
		return b.MaxWatchesPerPrincipal
	case "max_pending_updates":
		return b.MaxPendingUpdates
	case "ack_deadline_ms":
		return b.AckDeadlineMs
	case "max_workers_per_principal":
		return b.MaxWorkersPerPrincipal
	}
	t.Fatalf("unknown bound %s", name)
	return 0
}
