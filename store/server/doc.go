// Package server puts the store engine on NATS (SPEC.md section 9): a nats.go micro service named
// keeppeek-state with one endpoint per operation on <prefix>.state.v1.<principal>.<op>, watch delivery
// on <prefix>.watch.v1.<principal>.<watch_id>, and heartbeats on <prefix>.heartbeat.v1.<principal>.<worker_id>
// kept as server-owned system entries. The principal is read from the subject token, which NATS
// authorization has already enforced; the engine applies the namespace policy to it.
//
// No client holds back another (issue 3). The NATS handlers never wait on one client's backlog: acks
// and unwatches wait in a bounded queue per principal (past it, RESOURCE_EXHAUSTED at once; see
// Server.handler); a worker's waiting heartbeat is replaced by its newest, and the principals whose
// workers' heartbeats wait take turns, each with a bounded number waiting (see Server.onHeartbeat);
// other requests run on goroutines of their own, at most Options.MaxConcurrentRequests at once. Watch
// updates are published without waiting for any watcher: one that does not read is cut off by NATS as
// a slow consumer, and its watch closes with OVERFLOW or ACK_TIMEOUT, or is dropped by the sweep of
// Options.Interest. A watch whose client went away on a quiet namespace (no update, so no ack due) is
// dropped by that sweep on an embedded NATS server, or, where NATS cannot be asked, closed with
// ACK_TIMEOUT once no request names it for Options.IdleWatch (off unless set).
package server
