package wire

import "encoding/json"

// Worker statuses of SPEC section 11.
const (
	StatusStarting = "starting"
	StatusReady    = "ready"
	StatusDraining = "draining"
	StatusStopping = "stopping"
)

// Heartbeat bounds of SPEC section 11.
const (
	MinHeartbeatIntervalMs     = 100
	MaxHeartbeatIntervalMs     = 60000
	DefaultHeartbeatIntervalMs = 1000
)

// Heartbeat is what a worker publishes on its heartbeat subject.
type Heartbeat struct {
	WorkerID   string   `json:"worker_id"`
	Service    string   `json:"service"`
	Sequence   int64    `json:"sequence"`
	SentAtMs   int64    `json:"sent_at_ms"`
	IntervalMs int64    `json:"interval_ms"`
	Status     string   `json:"status"`
	Leases     []string `json:"leases"`
}

// Validate checks the rules of SPEC section 11; IntervalMs 0 means the default.
func (h *Heartbeat) Validate() error {
	if !ValidWatchID(h.WorkerID) {
		return Errorf(CodeInvalidArgument, "invalid worker_id %q", h.WorkerID)
	}
	if !ValidPrincipalID(h.Service) {
		return Errorf(CodeInvalidArgument, "invalid service %q", h.Service)
	}
	// Every integer of the contract is a JSON number from 0 to 2^53-1 (SPEC, preamble): a larger one
	// is not what another client can read back exactly, so the heartbeat breaks a rule.
	if h.Sequence < 0 || h.Sequence > MaxSafeInteger || h.SentAtMs < 0 || h.SentAtMs > MaxSafeInteger {
		return Errorf(CodeInvalidArgument, "sequence and sent_at_ms must be between 0 and 2^53-1")
	}
	if h.IntervalMs != 0 && (h.IntervalMs < MinHeartbeatIntervalMs || h.IntervalMs > MaxHeartbeatIntervalMs) {
		return Errorf(CodeInvalidArgument, "interval_ms %d is outside 100 to 60000", h.IntervalMs)
	}
	switch h.Status {
	case StatusStarting, StatusReady, StatusDraining, StatusStopping:
	default:
		return Errorf(CodeInvalidArgument, "invalid status %q", h.Status)
	}
	for _, l := range h.Leases {
		if !ValidKey(l) {
			return Errorf(CodeInvalidArgument, "invalid lease key %q", l)
		}
	}
	return nil
}

// EffectiveInterval is IntervalMs, or the default when it is 0.
func (h *Heartbeat) EffectiveInterval() int64 {
	if h.IntervalMs == 0 {
		return DefaultHeartbeatIntervalMs
	}
	return h.IntervalMs
}

// WorkerStatus is the document of a keeppeek.worker-status.v1 entry, kept by the server at
// system/workers/<principal>/<worker_id>.
type WorkerStatus struct {
	WorkerID    string   `json:"worker_id"`
	Service     string   `json:"service"`
	Principal   string   `json:"principal"`
	Status      string   `json:"status"`
	IntervalMs  int64    `json:"interval_ms"`
	Leases      []string `json:"leases"`
	FirstSeenMs int64    `json:"first_seen_ms"`
}

// UnmarshalJSON decodes a worker status as json.Unmarshal does, but reads its integers as the store's
// schema reads them (see Integer).
func (w *WorkerStatus) UnmarshalJSON(b []byte) error {
	type plain WorkerStatus // without this method
	var aux struct {
		*plain
		IntervalMs  json.RawMessage `json:"interval_ms"`
		FirstSeenMs json.RawMessage `json:"first_seen_ms"`
	}
	aux.plain = (*plain)(w)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	return setIntegers("WorkerStatus", []integerField{{"interval_ms", aux.IntervalMs, &w.IntervalMs},
		{"first_seen_ms", aux.FirstSeenMs, &w.FirstSeenMs}})
}

// WorkerKey is the system key of a worker's status entry.
func WorkerKey(principal, workerID string) string { return WorkersPrefix(principal) + workerID }

// WorkersPrefix is the prefix of every worker-status key of principal in the system namespace.
func WorkersPrefix(principal string) string { return "workers/" + principal + "/" }
