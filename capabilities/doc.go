// Package capabilities is the worker side of the media server contract (SPEC.md section 12): the
// ServerCapabilities model, a Tracker that keeps the latest capabilities current, and Commands, a
// client of the media commands subscribe, unsubscribe, start_publication and stop_publication.
//
// State says what should exist; capabilities say what does. A worker resolves an intent's stable
// source_id to the source's current, transient session_id through the Tracker (Resolve), sends
// ordinary commands with that session, and waits for the variant it published to be READY in the
// capabilities (WaitReady) before it reports success or lets anyone subscribe to it.
//
// The Tracker subscribes to `<prefix>.caps.v1.changed` and fetches the whole ServerCapabilities from
// `<prefix>.caps.v1.get` (a reply without a generation, such as a refusal, is a failed fetch): once
// at Start, on every announced generation above the one it holds, and after every NATS reconnect
// (announcements sent while it was disconnected are lost). A fetched snapshot
// older than the one held is ignored, so generations only grow; a fetched snapshot older than the
// highest announced one is fetched again with backoff. A fetch left unanswered does not hold back a
// newer one. Because announcements can be lost and a media server can die without a word, the
// Tracker also fetches every ResyncInterval, and holds its snapshot stale (showing every source
// offline, see Tracker.Stale) once a fetch finds no media server answering, none has confirmed the
// snapshot for StaleAfter, or an answer shows that the media server went back (restarted with its
// generations started over, or a second one answers); Snapshot reads the capabilities and their staleness together, for a
// reconciler that keeps what it holds while they are stale. Readers never poll: WaitFor, WaitVariant and
// WaitReady wake on each installed snapshot, and Subscribe hands out coalesced notifications for
// reconcilers.
//
// A subscriber must notice when the publication it subscribed to is replaced (its publisher, or a
// standby of the same principal, starting the variant again): the media server ends the
// subscriptions, and the variant is PENDING, then READY again, looking as it did. A reconciler reads
// only the latest snapshot and may never read the PENDING one; the Tracker, which installs every
// generation it learns of, marks each READY variant with the generation it has been READY since
// (Variant.ReadySince, not on the wire), starting it over at a takeover and across any gap in what it
// saw. A subscriber keeps the value it saw when it subscribed and subscribes again when it changes.
//
// Commands go to `<prefix>.media.v1.<principal>.<command>` as flat JSON requests; a reply is the
// envelope Reply, `{"ok":true, ...result fields}` or `{"ok":false,"error":{"code":...,"message":...}}`,
// or, as SPEC section 12 writes it, the bare result or the bare `{"code":...,"message":...}`.
// A failed reply becomes a *Error carrying its code, so callers write
// errors.Is(err, capabilities.ErrPublicationConflict). Commands refuses, without sending anything, a
// StartPublication whose recording_mode is missing or unknown: a zero-value StartPublication must
// never reach the media server; nor does a subscribe or start_publication made while the NATS
// connection is down (it is refused, not buffered until the connection is back). A subscribe or
// start_publication whose caller stops waiting is still carried out when the media server gets to
// it: SubscribeOrUndo and StartPublicationOrUndo follow it to its late answer and end what it made,
// and report to their onUndoErr what they could not end (a command never answered made something
// whose id nobody learnt).
//
// This package imports nothing of the state store; capabilities/sim is a media server simulator that
// speaks the same subjects, for tests and demos.
package capabilities
