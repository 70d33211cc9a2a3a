// Package sim is a media server simulator that speaks SPEC.md section 12 over NATS, for tests, examples
// and demos: it answers `<prefix>.caps.v1.get` with its ServerCapabilities, announces every change on
// `<prefix>.caps.v1.changed` (the generation grows by one per change), and serves the media commands
// subscribe, unsubscribe, start_publication and stop_publication on `<prefix>.media.v1.*.<command>`,
// taking the principal from the subject token. A command's reply is the envelope of capabilities.Reply;
// an error reply also carries its code and message at the top level, as SPEC section 12 writes errors.
//
// It behaves like a real media server where that matters to a worker: sources have a stable source_id
// and a transient session_id that changes when a source reconnects (SetOnline); a started publication
// shows as a PENDING variant published by the principal and becomes READY (or FAILED, when injected)
// after Options.ReadyDelay, and may fail later, when told to (FailPublication); a variant another
// principal publishes is a CONFLICT, while its own publisher starting it again takes it over (a new
// publication, the variant PENDING again, its subscriptions ended); a stale session is
// SOURCE_UNAVAILABLE; a source that goes offline loses its publications and subscriptions.
//
// Tests inspect it directly: Capabilities, Publications, Subscriptions and Commands (every command
// received, in order, with its principal, body and outcome, unless Options.KeepCommands bounds the
// record), so a test can assert that a command was never sent.
package sim
