package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// Options configure a Store. Start from DefaultOptions; Open validates them once.
type Options struct {
	// Bounds are the limits of SPEC section 8. Default: wire.DefaultBounds().
	Bounds wire.Bounds
	// ServerID is reported by Info. Default: a random id made at Open.
	ServerID string
	// Version is reported by Info. Default: "dev".
	Version string
	// Logger receives the engine's logs. Default: slog.Default().
	Logger *slog.Logger
	// Clock gives the time used for timestamps and lease deadlines. Default: the wall clock as read
	// at Open, advanced from then on by CLOCK_BOOTTIME (see anchoredClock): a wall clock stepped while
	// the store runs moves neither its deadlines nor its stamps, and one stepped while it was stopped
	// (on the same boot) moves its lease deadlines with it at the next Open.
	Clock func() time.Time
	// Settings maps a namespace to the backend that holds its entries instead of the database
	// (settings-backed namespaces, SPEC section 6). Default: none.
	Settings map[string]SettingsBackend
	// AuditRetention is the number of audit records kept; older ones are pruned behind a checkpoint
	// that carries the hash of the last pruned record, so the kept chain stays verifiable.
	// Default: DefaultAuditRetention.
	AuditRetention int
	// MaxBatch bounds how many mutations share one commit. Default: 1024.
	MaxBatch int
	// InMemory runs the engine with no disk at all: nothing survives Close. For benchmarks that
	// isolate the engine's own cost and for tests of the memory path. Default: false.
	InMemory bool
	// OpenTimeout bounds how long Open waits for the database file lock. Default: 2 s.
	OpenTimeout time.Duration
	// Observer receives engine events for metrics. Default: none.
	Observer Observer
}

// Observer receives engine events, for metrics. Its methods are called on the engine's hot paths
// (Committed from the committer, WatchClosed under the watch registry's lock): they must be cheap and
// must not block or call back into the Store.
type Observer interface {
	// Committed reports one successful commit: how many changes it carried and how long the
	// database transaction took (fsync included).
	Committed(changes int, took time.Duration)
	// CommitFailed reports a commit the disk refused.
	CommitFailed()
	// WatchClosed reports a watch closed by the server, with its reason.
	WatchClosed(reason wire.CloseReason)
}

type nopObserver struct{}

func (nopObserver) Committed(int, time.Duration) {}
func (nopObserver) CommitFailed()                {}
func (nopObserver) WatchClosed(wire.CloseReason) {}

// DefaultAuditRetention is the default number of audit records kept.
const DefaultAuditRetention = 4096

// auditPruneSlack is how far the audit log may grow past its retention before a prune runs, so pruning
// is amortised over many commits.
const auditPruneSlack = 1024

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{
		Bounds:         wire.DefaultBounds(),
		Version:        "dev",
		AuditRetention: DefaultAuditRetention,
		MaxBatch:       1024,
		OpenTimeout:    2 * time.Second,
	}
}

// withDefaults fills zero fields with defaults and validates the result.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.Bounds == (wire.Bounds{}) {
		o.Bounds = d.Bounds
	}
	if err := o.Bounds.Validate(); err != nil {
		return o, err
	}
	if o.ServerID == "" {
		o.ServerID = "stated-" + randomHex(6)
	}
	if o.Version == "" {
		o.Version = d.Version
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock, _ = defaultClock()
	}
	if o.AuditRetention == 0 {
		o.AuditRetention = d.AuditRetention
	}
	if o.AuditRetention < 1 {
		return o, fmt.Errorf("store: AuditRetention must be positive, got %d", o.AuditRetention)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = d.MaxBatch
	}
	if o.MaxBatch < 1 {
		return o, fmt.Errorf("store: MaxBatch must be positive, got %d", o.MaxBatch)
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.OpenTimeout == 0 {
		o.OpenTimeout = d.OpenTimeout
	}
	for ns, b := range o.Settings {
		if !wire.ValidNamespace(ns) {
			return o, fmt.Errorf("store: settings namespace %q is not a valid namespace", ns)
		}
		if ns == string(wire.KindSystem) {
			return o, fmt.Errorf("store: the system namespace cannot be settings-backed")
		}
		if b == nil {
			return o, fmt.Errorf("store: settings namespace %q has no backend", ns)
		}
	}
	return o, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
