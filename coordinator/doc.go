// Package coordinator is what a coordinator program uses to say what the media plane should do and
// to see who is there to do it. It writes desired state (keeppeek.media-intent.v1 intents in
// service/<id> or user/<id> namespaces, keeppeek.preference.v1 preferences in user/<id> or group/<id>
// namespaces) and reads the worker fleet the state server keeps in system/workers/ from heartbeats
// (SPEC sections 11 and 13).
//
// Every write is validated locally first, against the same schema registry the server uses
// (store/schema), so a bad document never reaches the server and its error is the registry's
// *wire.Error with code SCHEMA_INVALID. Writes then go through client.Update, the reread-merge-retry
// primitive: create-only when the key is missing, compare-and-set on the revision that was read
// otherwise, and on CONFLICT read again and merge again. A coordinator never retries a blind write
// after a conflict: that would discard another writer's state. PutIntent merges per service: the
// caller's document wins, but parameters entries of services the caller did not name stay as they
// are, because another coordinator may own them. UpdateIntent hands the caller the current intent
// for its own merge.
//
// Writes are owned by the principal of the client: intents in service/<id> and preferences in
// group/<id> need an admin principal; a user principal may write its own user/<id> namespace only.
// The fleet view (Fleet, WatchFleet) reads the system namespace, which only admin principals may
// read: a coordinator that wants it must connect as an admin principal (anyone else gets
// PERMISSION_DENIED).
//
// Every call that reaches the store blocks until it is answered, within its ctx (and, when ctx has no
// deadline, the client's request timeout per request). Its error is then the store's *wire.Error
// (errors.Is(err, wire.ErrConflict), wire.ErrPermissionDenied, ...), one the coordinator made
// locally (a *wire.Error too: INVALID_ARGUMENT for a namespace or key that breaks the identifier
// rules, SCHEMA_INVALID for a document), or, when no reply came (ctx ended, the NATS connection
// closed), the transport's, which carries no code (wire.CodeOf(err) is ""): see store/client for
// what that means for a write.
//
// State asks for an outcome; it grants nothing. An intent does not mean a variant exists, and a
// preferred group stored in a user namespace does not make the user a member of that group.
package coordinator
