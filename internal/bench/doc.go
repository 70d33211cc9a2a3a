// Package bench measures a running stated over NATS, the way real clients reach it: through
// store/client, as admin principals. Run drives four phases against one namespace (service/bench by
// default) and returns a Report:
//
//  1. serial compare-and-set: Owners keys (cas/o-NNN, created first, unmeasured), each rewritten
//     Rounds times with expected_revision set to its previous revision, one request at a time over
//     one connection; p50, p95 and max latency, and (with a metrics URL) stated's mean database
//     commit over the phase, from state_commit_duration_seconds: the disk's share of a put; before it,
//     the p50 round trip of 200 info requests: the transport's share;
//  2. concurrent writers: Writers goroutines, each with its own connection and key (writers/w-NNN),
//     Rounds compare-and-sets each, all at once; throughput, p50 and p95, and (with a metrics URL)
//     the changes per stated commit and the share of the phase stated spent in commits (near 100%,
//     commits one after another are the bottleneck);
//  3. fanout: Watches watches of one key (fanout/k) spread over Connections connections, each kept
//     by a client.Cache with its default options (so each acknowledges as a Cache does: one ack for
//     the updates of up to 100 ms), Rounds puts; the time from the start of a put until the last
//     cache holds the update; p50 and p95;
//  4. idle memory: Entries entries (rss/e-NNN, as many digits as Entries-1 needs, at least three) written, Idle waited, then stated's resident set size
//     read from process_resident_memory_bytes on its /metrics (rss-idle-N-conns-MiB, all N
//     connections open); then every connection but one closed, Idle waited, read again (rss-idle-MiB).
//
// A request's latency runs from just before the client sends it to its reply decoded and checked
// (the reply of the request sent, OK); a request that fails fails the run, it is never a sample, and a
// CONFLICT is such a failure. Percentiles are nearest-rank (the smallest latency with at least p of
// them at or below it; no interpolation) over every op of the phase: no warm-up is left out, the first
// ops count as the rest (each phase's keys are created beforehand, unmeasured, over the same
// connections). Report.WriteTable says so above its figures. The writers' ops/s are their ops, every
// one of which succeeded, over the wall time from just before they are let go together until the
// last one finished.
//
// The figures read from the metrics are of one stated process: a run during which it restarted (its
// process_start_time_seconds moved, or a counter went back) fails with ErrRestarted rather than report
// differences of two processes' counters. Every request is bounded by Config.RequestTimeout, whatever
// Run's context allows.
//
// Every document is the same schema-valid keeppeek.media-intent.v1 of exactly DocumentBytes compact
// bytes (Document). The bench removes what it wrote unless Config.Keep is set, and at its start the
// leftovers of an earlier run; it never deletes or overwrites an entry it did not write (one that
// does not hold its document): when its key prefixes in the namespace hold such an entry, it refuses
// to run. `statectl bench` and BenchmarkStated (go test -bench) both run it; neither asserts
// anything about speed.
//
// BenchmarkNATSFloor (go test -bench NATSFloor, beside BenchmarkStated) measures what NATS alone
// costs for the same shapes, with no store, no disk and no JSON decoding: an embedded nats-server in
// a child process, as stated embeds one, with an in-process responder that answers at once, reached
// over loopback TCP by plain nats.go connections. request-rtt-p50-us is 200 requests one at a time,
// answered with a reply of an info reply's size; put-rtt-p50-us and put-rtt-p95-us are Owners x
// Rounds requests one at a time, each of a put request's and reply's size (the bench document in
// both); echo-N-ops/s is N connections sending such requests at once, Rounds each, over the phase's
// wall time; fanout-K-p50-us and fanout-K-p95-us are Rounds requests, each making the responder
// publish a put reply to K subscriptions spread over Connections connections, timed from the
// request's start until the last subscription has its message. They are what BenchmarkStated's
// figures of the same shape cannot do better than: request-rtt-p50-us its own, put-rtt its serial
// CAS (to which stated adds validation and a commit), echo-N-ops/s its writers-N-ops/s (a ceiling
// there), fanout-K its fanout (to which stated adds the put, its fanout and each cache's decoding).
package bench
