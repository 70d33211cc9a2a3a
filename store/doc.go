// Package store is the coordination plane's durable state store engine: documents keyed by
// (namespace, key) with per-namespace revisions, compare-and-set, fencing guards, TTL leases whose
// expiry watchers see, namespace policy, quotas, and watches that start with an atomic snapshot and then
// deliver ordered, acknowledged updates (SPEC.md sections 1 to 8, 10 and 13).
//
// Commits are serial and group the writers: every mutation (put, delete, lease expiry, keepalive)
// queues; whoever commits (the caller itself when no commit is running, else the committer goroutine
// once the running one ends) takes the queued mutations (up to Options.MaxBatch at a time, oldest
// first), checks each against the state as it will be after the ones before it, writes them in one
// bbolt transaction with their audit records, commits (fsync), and only then applies them to memory,
// fans the updates out and answers the callers. The committer goroutine also expires leases when their
// deadline comes. Reads and watch snapshots are served from an ordered in-memory index and never touch
// the disk.
//
// The engine knows no network. Transports (the NATS server, tests, benchmarks) call it with the caller's
// policy.Principal; the engine enforces the namespace policy, so every transport enforces the same rules.
// Errors are *wire.Error values carrying SPEC codes: match them with errors.Is(err, wire.ErrConflict).
//
// Entries returned by Get, List, Put and Watch, and the entries of watch messages, share their
// documents with the store's memory (no copy per read): treat every wire.Entry.Document the store hands
// out as read-only, and copy it before changing it. A context that ends while a write is queued returns
// its error, and the write may still commit, as with a reply lost on a network; a context that has
// already ended queues nothing.
package store
