// Package client is the Go client of the state store's wire contract (SPEC.md sections 5, 7 and 9)
// over NATS.
//
// A Client sends one request per call on `<prefix>.state.v1.<principal>.<op>` and turns a failed
// StateStoreResult into its *wire.Error, so callers write errors.Is(err, wire.ErrConflict).
//
// An error tells whether a write (Put, Delete) may have happened. A *wire.Error (wire.CodeOf(err) is
// not "") is a refusal: the store answered it (SPEC section 5: a failed call changes nothing), or the
// client did not send the request at all (no state server subscribed: UNAVAILABLE; a connection of
// Connect that is down: UNAVAILABLE; too large for NATS: TOO_LARGE). Any other error (ctx ended, the
// connection dropped, a reply that does not decode) means no usable reply came: the write may have
// committed, for instance when the state server was killed after its commit and before its reply.
// Such a write is not to be sent again blindly: read the key back first. A compare-and-set sent again
// after such an error can find CONFLICT with its own earlier success, current_revision then being the
// revision that write got; the entry read back shows whether the document is the one sent.
//
// Update is the reread-merge-retry loop every writer of a shared document needs: read, merge, write
// with expected_revision, and on CONFLICT read again (never a blind write).
//
// Watch is the raw watch primitive: a snapshot, then the updates and the final close in order. Cache is
// what most code wants instead: a watch kept gap-free. It installs the snapshot, applies updates only in
// exact sequence order, acknowledges them (one cumulative ack for the updates of up to 100 ms, or at
// once when half the server's max_pending_updates, at most 16, wait; CacheOptions.AckDelay), and on a
// gap, a close, a reconnect or anything it cannot make sense of, it watches again and swaps the new
// snapshot in whole, so readers never see a cache that is half empty or that has skipped an update. A
// writer waits for its own write with WaitForRevision. Revisions belong to the store's epoch
// (Cache.Epoch): a restore starts a new one, and a wait for a revision of the old epoch ends with
// ErrEpochChanged. A wait that reached its revision asks the store (info) whether its epoch is still
// the cache's, so a restore the cache has not seen yet is never mistaken for progress.
//
// A watch request given up (its context ended) may still register the watch on the server; the client
// waits for its reply in the background and unwatches what it registered. Watch requests of one id go
// one at a time: a request for an id waits (within its context) while an earlier request for it is
// unanswered and, if that one was given up and registered the watch, until its unwatch is answered. So
// a registration nobody waits for never holds the id against a later request, and its unwatch never
// removes a later request's watch. Unwatch, and a Cache's Close, wait the same way for a watch request
// of the id still out, so they never overtake it and leave its watch behind (a program that closes
// its connection right after would leave it registered, with no one to unwatch it). A request that
// gets no reply at all, within the later of its context's deadline and the request timeout, has an
// unknown outcome, as any request without a reply: a later request may then find the id taken
// (WATCH_EXISTS; unwatch, then watch again, as a Cache does).
//
// Over a NATS cluster (stated and its clients on different nodes), a message can be lost while every
// connection stays up: a route between the watcher's node and the state server's cut for a moment
// (the server publishes while its node does not know of the subscriber; nats-server keeps no message
// for an absent subscriber), a node that restarts and takes connections before its routes are up, or
// a node that dies holding messages in flight. A lost watch update shows as a sequence gap at the next
// update of the watch, and a Cache then resyncs; a lost last update shows no gap, and a Cache finds it
// by its liveness check (CacheOptions.CheckInterval), which acknowledges one past the last applied
// update (INVALID_ARGUMENT, "above the highest sent", means nothing was lost; an ack the server takes
// means the update was sent: one not received by then was lost). A raw Watch's user does the same,
// and on a server that bounds idle watches (stated's watch_idle_ms) must ack, any sequence, more often
// than the bound, or the server takes the watch for abandoned and closes it with ACK_TIMEOUT. A
// lost request or reply is a request without a reply (its outcome unknown, as above), and a
// request answered UNAVAILABLE (no responders) was sent nowhere: the client's node knew of no state
// server at that moment, as for a moment after stated reconnected to another node or while the cluster
// re-forms, even though stated runs. Retry it.
//
// The connection must use the principal's inbox prefix `_INBOX.<principal>` (the server's NATS
// permissions allow no other); Connect sets it. Connect also turns off nats.go's reconnect buffer, so a
// request made while the connection is down fails at once with UNAVAILABLE and is never sent later,
// when its caller has long given up on it (a connection of one's own keeps nats.go's default: such a
// request waits in the buffer and may reach the store once the connection is back).
package client
