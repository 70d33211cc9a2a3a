package wire

import "fmt"

// Bounds are the configurable limits of SPEC section 8, keyed on the wire by these names.
type Bounds struct {
	MaxDocumentBytes       int64 `json:"max_document_bytes" toml:"max_document_bytes"`
	MaxEntriesPerNamespace int64 `json:"max_entries_per_namespace" toml:"max_entries_per_namespace"`
	MaxNamespaces          int64 `json:"max_namespaces" toml:"max_namespaces"`
	MaxTotalValueBytes     int64 `json:"max_total_value_bytes" toml:"max_total_value_bytes"`
	MaxSnapshotEntries     int64 `json:"max_snapshot_entries" toml:"max_snapshot_entries"`
	MaxSnapshotBytes       int64 `json:"max_snapshot_bytes" toml:"max_snapshot_bytes"`
	MaxWatches             int64 `json:"max_watches" toml:"max_watches"`
	MaxWatchesPerPrincipal int64 `json:"max_watches_per_principal" toml:"max_watches_per_principal"`
	MaxPendingUpdates      int64 `json:"max_pending_updates" toml:"max_pending_updates"`
	AckDeadlineMs          int64 `json:"ack_deadline_ms" toml:"ack_deadline_ms"`
	// MaxWorkersPerPrincipal is not in SPEC section 8: it caps the live worker-status entries of one
	// principal (system/workers/<principal>/...); a heartbeat of a further worker is dropped, so no
	// principal can fill the system namespace and keep every other principal's workers out of it.
	MaxWorkersPerPrincipal int64 `json:"max_workers_per_principal" toml:"max_workers_per_principal"`
}

// DefaultBounds returns the defaults of SPEC section 8 (and 256 workers per principal).
func DefaultBounds() Bounds {
	return Bounds{
		MaxDocumentBytes:       16384,
		MaxEntriesPerNamespace: 4096,
		MaxNamespaces:          1024,
		MaxTotalValueBytes:     67108864,
		MaxSnapshotEntries:     64,
		MaxSnapshotBytes:       65536,
		MaxWatches:             1024,
		MaxWatchesPerPrincipal: 256,
		MaxPendingUpdates:      32,
		AckDeadlineMs:          30000,
		MaxWorkersPerPrincipal: 256,
	}
}

// Validate reports the first bound that is not a positive number within its range: the JSON integer
// range, or less for the two a server holds memory or time for per watch.
func (b Bounds) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
		max  int64
	}{
		{"max_document_bytes", b.MaxDocumentBytes, MaxSafeInteger},
		{"max_entries_per_namespace", b.MaxEntriesPerNamespace, MaxSafeInteger},
		{"max_namespaces", b.MaxNamespaces, MaxSafeInteger},
		{"max_total_value_bytes", b.MaxTotalValueBytes, MaxSafeInteger},
		{"max_snapshot_entries", b.MaxSnapshotEntries, MaxSafeInteger},
		{"max_snapshot_bytes", b.MaxSnapshotBytes, MaxSafeInteger},
		{"max_watches", b.MaxWatches, MaxSafeInteger},
		{"max_watches_per_principal", b.MaxWatchesPerPrincipal, MaxSafeInteger},
		{"max_pending_updates", b.MaxPendingUpdates, MaxPendingUpdatesLimit},
		{"ack_deadline_ms", b.AckDeadlineMs, MaxAckDeadlineMs},
		{"max_workers_per_principal", b.MaxWorkersPerPrincipal, MaxSafeInteger},
	} {
		if f.v < 1 || f.v > f.max {
			return fmt.Errorf("bound %s must be between 1 and %d, got %d", f.name, f.max, f.v)
		}
	}
	return nil
}

// MaxPendingUpdatesLimit is the largest max_pending_updates: a server keeps the send time of each
// unacknowledged update of every watch.
const MaxPendingUpdatesLimit = 4096

// MaxAckDeadlineMs is the largest ack_deadline_ms: one day, as for a TTL.
const MaxAckDeadlineMs = 86_400_000

// MaxSafeInteger is 2^53-1, the largest integer the contract carries.
const MaxSafeInteger = 1<<53 - 1
