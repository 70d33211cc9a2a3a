// Package wire holds the types of the coordination plane's wire contract (SPEC.md): requests, the
// StateStoreResult reply, StateEntry, watch updates and closes, bounds, identifier rules and error
// codes. It defines the contract's field names and imports nothing else of the project, so the engine,
// the server and every client share one definition.
package wire
