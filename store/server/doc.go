// Package server puts the store engine on NATS (SPEC.md section 9): a nats.go micro service named
// keeppeek-state with one endpoint per operation on <prefix>.state.v1.<principal>.<op>, watch delivery
// on <prefix>.watch.v1.<principal>.<watch_id>, and heartbeats on <prefix>.heartbeat.v1.<principal>.<worker_id>
// kept as server-owned system entries. The principal is read from the subject token, which NATS
// authorization has already enforced; the engine applies the namespace policy to it.
package server
