package reconciler

import (
	"context"
	"time"
)

// Request names the key to reconcile. It carries no entry: the reconciler reads the current one from
// the controller's Cache, so a request queued before several changes still acts on the latest.
type Request struct {
	// Namespace is the controller's namespace.
	Namespace string
	// Key is the entry's key (under the controller's KeyPrefix), present or not.
	Key string
}

// String returns "namespace/key".
func (r Request) String() string { return r.Namespace + "/" + r.Key }

// Result tells the controller what to do with the key after a Reconcile that returned no error.
// The zero Result means "done until the next change". A Reconcile of the key that begins before a
// requested (or error) retry comes due, started by a change, a trigger or an Enqueue, replaces it:
// what that Reconcile returns decides, and the key is not reconciled once more at the old deadline.
type Result struct {
	// Requeue asks for another Reconcile of the key after its backoff (as after an error, but without
	// logging one). RequeueAfter takes precedence.
	Requeue bool
	// RequeueAfter, when positive, asks for another Reconcile of the key once it has passed, and resets
	// the key's backoff as a success does.
	RequeueAfter time.Duration
}

// Reconciler makes the world match the intent stored under one key. Reconcile is called with a key
// whose entry changed, appeared, disappeared, or may need another look (a trigger, a resync); it must
// be idempotent and read the current state itself (Controller.Cache). The controller never runs two
// Reconciles of one key at once, but runs Reconciles of different keys concurrently (up to
// Options.MaxConcurrent). An error retries the key with per-key exponential backoff, for as long as
// the errors go on (each wait capped at Options.MaxBackoff); a panic is recovered, logged with its
// stack and retried as an error. ctx ends when the controller stops.
type Reconciler interface {
	Reconcile(ctx context.Context, req Request) (Result, error)
}

// Func adapts a function to a Reconciler.
type Func func(ctx context.Context, req Request) (Result, error)

// Reconcile calls f(ctx, req).
func (f Func) Reconcile(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }
