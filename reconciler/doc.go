// Package reconciler runs a worker's control loop over the state store, in the manner of
// controller-runtime: a one-method Reconciler, the small value types Request and Result, and a
// Controller whose cache and workqueue do the hard parts.
//
// A Controller watches one namespace under a key prefix through a store/client Cache and enqueues a
// key for every change of it (PUT, DELETE, EXPIRE), every key of every snapshot the cache installs
// (at start and after each resync, with the keys the snapshot no longer holds), every key on a
// trigger (the media server's capabilities changed: pass the channel of
// capabilities.Tracker.Subscribe as an Options.Triggers entry) and, optionally, periodically. The
// workqueue deduplicates keys, never runs two Reconciles of one key at once (a key enqueued while it
// is being reconciled is reconciled again after), retries a failed key with per-key exponential
// backoff, honours Result.Requeue and Result.RequeueAfter (a Reconcile that an event starts earlier
// replaces the scheduled one), bounds concurrency and stops cleanly. The queue has no fixed bound,
// never blocks and drops no key until Stop: it holds each key at most once, so it grows with the
// number of distinct keys waiting (those under the prefix, and any others Enqueued), not with the
// number of events.
//
// A Reconcile reads the current entry from Controller.Cache, not from the request, so it acts on the
// latest intent the cache holds; an absent key means the intent is gone. (While the cache does not
// follow the store, Cache().Following() is false and its entries are the last it had; Cache().Err()
// says why when the store refused to watch again, and is nil while the store is merely unreachable.
// Once the NATS connection is closed for good the cache follows nothing more, Cache().Done() is
// closed, and the controller goes on reconciling from the last entries until Stop: a worker.Worker
// stops itself then.)
//
// Cut off from the state server (its NATS connection down, stated restarting, or a parted route of
// a NATS cluster, which leaves the controller's own connection up and tells it nothing), the
// controller receives no change, but it does not pause: a key that a trigger, ResyncEvery, Enqueue or
// a scheduled retry brings is reconciled on the cache's last entries, which may no longer be the
// store's, and its writes fail (UNAVAILABLE at once when no state server is reachable, an unknown
// outcome after a timeout: the write may have been committed), which retries the key with backoff.
// Across a parted route the cache learns it follows nothing only from its liveness check, so
// Following() turns false up to about two Options.CheckInterval and a request timeout after the
// partition began. A Reconcile that must not act on a stale intent checks Following() and returns
// without acting: once the cache follows again it installs a snapshot, and every key in it, and every
// key gone meanwhile, is reconciled once more (each once, on the store's current state), which
// replaces the retries scheduled meanwhile. A write retried after an unknown outcome must be safe to
// repeat (a put of the whole status, or a conditional put whose CONFLICT says it is already done).
// Media intents are decoded with DecodeMediaIntent and checked with MediaIntent.Validate: an intent
// that fails is a worker validation failure (a *ValidationError), reported as an ObservedStatus in
// state "invalid" (InvalidStatus) and never turned into a command. A publish intent without a valid
// recording_mode, in particular, never produces a StartPublication.
//
// A Reconcile that depends on another key (an intent's lease, released by the worker that held it) is
// woken by that key's changes only if the controller watches it: give a KeyPrefix that covers both
// (or none), and have the Reconcile of the other key Enqueue the key it concerns.
//
// Options.Metrics (NewMetrics) gives a controller Prometheus metrics in the manner of
// controller-runtime's: Reconciles by outcome and their duration, the queue's depth, wait and
// retries, and whether the cache follows the store (reconciler_cache_following: 0 says the
// controller reconciles on its last entries).
//
// See the Controller example for a worker's Reconcile.
package reconciler
