package main

const usageMain = `statectl: the command line of the keeppeek state store (stated).

Usage:
  statectl [global flags] COMMAND [flags] [arguments]

Commands:
  get NS KEY                    print one entry and its document
  put NS KEY SCHEMA [FILE|-]    write an entry; the document comes from FILE, or stdin for - or none
  delete NS KEY                 delete an entry
  ls NS [PREFIX]                list the entries of a namespace (every page)
  watch NS [PREFIX]             print the snapshot, then every update, until Ctrl-C
  info                          print the server's identity, epoch, features and bounds
  workers [PRINCIPAL]           list the live workers, from their heartbeats (admin)
  backup FILE                   write an online backup of the whole store to FILE (admin)
  audit verify                  check the audit log's hash chain (admin)
  bench                         measure the server: CAS latency, writers, fanout, idle memory (admin)
  help [COMMAND]                print this, or a command's usage (so does COMMAND --help)

Global flags, before or after the command; each also from the environment:
  --nats-url URL   NATS server ($STATECTL_NATS_URL; default nats://127.0.0.1:4222)
  --user ID        the principal to act as ($STATECTL_USER; default dev)
  --password PW    its password ($STATECTL_PASSWORD; none for the dev principal; prefer the variable,
                   which is sent only for the user of $STATECTL_USER, or dev: a --user naming another
                   principal needs its own --password)
  --nkey FILE      authenticate with the principal's nkey seed in FILE instead ($STATECTL_NKEY; the
                   principal's configuration has nkey = "U..."; --user still names the principal)
  --tls-ca FILE    PEM CA bundle that verifies the NATS server's certificate, for a private CA
                   ($STATECTL_TLS_CA; default: the system's roots); any --tls-* flag makes the
                   connection TLS, with a nats:// URL too
  --tls-cert FILE  client certificate (PEM) for a server that verifies clients, with --tls-key
                   ($STATECTL_TLS_CERT)
  --tls-key FILE   its private key (PEM) ($STATECTL_TLS_KEY)
  --prefix P       subject prefix ($STATECTL_PREFIX; default kp)
  --timeout D      how long a request may take ($STATECTL_TIMEOUT; default 5s)
  --json           print the wire JSON instead of tables ($STATECTL_JSON=true)

Errors are printed as "statectl: CODE: message", CODE being the SPEC error code when the server
answered one (STATE_STORE_ERROR_CODE_CONFLICT, ...), else USAGE, CONNECTION, TIMEOUT, INTERRUPTED,
AUDIT_BROKEN or ERROR. With --json an error is also one line of JSON on stdout (after what watch
printed; audit verify prints its report instead):
{"request_id":0,"ok":false,"error":{"code":CODE,"message":...,"current_revision":R}}, current_revision
on CONFLICT and GUARD_FAILED only.
Exit status: 0 done; 1 the server answered an error, or another failure; 2 bad usage;
3 no connection (NATS unreachable, wrong credentials, no reply within --timeout; a reachable NATS
with no stated behind it is STATE_STORE_ERROR_CODE_UNAVAILABLE, status 1); 130 interrupted (Ctrl-C,
SIGTERM, or SIGHUP: the terminal closed) before the answer came (for watch --count, before the
count); 141 the reader of the output went away (statectl ... | head -1), as SIGPIPE ends a
process. A put or delete that got no answer (status 3 or 130) may have been committed all the same:
read the entry back before a retry.
Errors never show a login that --nats-url carries (nats://user:password@host): its password or token
is printed as xxxxx.

A key that starts with "-" goes after "--", which ends the flags: statectl get -- user/alice -odd.
`

const usageGet = `Usage: statectl get NS KEY

Print the entry KEY of namespace NS: its fields, then its document pretty-printed. With --json, the
entry as the server sent it (one JSON object). A missing or expired key is
STATE_STORE_ERROR_CODE_NOT_FOUND (exit 1).
`

const usagePut = `Usage: statectl put NS KEY SCHEMA [FILE|-] [flags]

Write the entry KEY of namespace NS with the registered schema SCHEMA. The document, one JSON object
in UTF-8 (a leading byte order mark is dropped), is read from FILE, or from stdin when FILE is - or
absent. Prints the entry as stored (revision, owner, expiry); with --json, the entry.

Flags:
  --expect-revision N   write only if the entry's revision is N (compare-and-set); 0: create only;
                        absent: write whatever the entry's revision
  --ttl D               a lease: the entry expires D after the write (a duration such as 30s, or
                        milliseconds such as 30000; at least 1s; over 24h the server clamps it to
                        24h); 0 or absent: no lease (a lease the entry had is removed)
  --guard KEY=REV       write only if KEY of the same namespace is live at revision REV (fencing)
`

const usageDelete = `Usage: statectl delete NS KEY [flags]

Delete the entry KEY of namespace NS and print the namespace revision of the delete. With --json, the
StateStoreResult {"request_id":0,"ok":true,"revision":R}.

Flags:
  --expect-revision N   delete only if the entry's revision is N (N >= 1)
  --guard KEY=REV       delete only if KEY of the same namespace is live at revision REV (fencing)
`

const usageLs = `Usage: statectl ls NS [PREFIX] [flags]

List the live entries of namespace NS whose key starts with PREFIX, in key order: KEY, REVISION,
SCHEMA, OWNER, EXPIRES, SIZE (document bytes). Every page is read (after_key). With --json, one
StateStoreResult {"request_id":0,"ok":true,"entries":[...],"revision":R} holding every page's
entries, R the namespace revision the last page reported.

Flags:
  --limit N   entries per page, 1 to 256 (default: the server's, 100)
`

const usageWorkers = `Usage: statectl workers [PRINCIPAL]

List the live workers (every principal's, or PRINCIPAL's), as the server keeps them from their
heartbeats in the system namespace (workers/<principal>/<worker_id>), ordered by principal and worker
id: PRINCIPAL, WORKER, SERVICE, STATUS (starting, ready, draining, stopping), LEASES (how many leases its
heartbeats list: what it says it holds; the lease entries are the authority), INTERVAL (its heartbeat
interval), FIRST SEEN and EXPIRES (the server's clock: the entry expires three intervals after the
last heartbeat, unless another comes). Every page is read; a worker that appears or expires meanwhile
may be missing or listed. With --json, one object {"workers":[{"principal","worker_id","service",
"status","interval_ms","leases":[...],"first_seen_ms","expires_at_ms","revision"}]}. The system
namespace is readable by admin principals only: anyone else gets STATE_STORE_ERROR_CODE_PERMISSION_DENIED.
`

const usageWatch = `Usage: statectl watch NS [PREFIX] [flags]

Watch the entries of namespace NS whose key starts with PREFIX: print the snapshot, then every update
(PUT, DELETE, EXPIRE) and close as it arrives, acknowledging each update once printed. On a sequence
gap, a close, or a NATS reconnect it says so, watches again and prints the new snapshot; so it does
when a check, made every 5s while nothing comes, finds that the server no longer has the watch (a
stated restarted behind an external NATS server) or that an update it sent was lost. With --json,
one JSON object per line: the snapshot (watch_id, namespace, key_prefix, snapshot_revision, entries),
then the updates and closes as the server sent them; the notices go to stderr.

Runs until Ctrl-C, until --count messages were printed, or for --timeout when that flag is given on
the command line: the watch then ends at the deadline (exit 0, or exit 1 when --count messages had not
come by then; exit 3, TIMEOUT, when no watch had opened) and each request keeps the default 5s bound.
Ctrl-C, SIGTERM or SIGHUP unwatches and exits 0, or 130 (INTERRUPTED) when --count messages had not come.
When its output is a pipe whose reader goes away (statectl watch ... | head -1), it unwatches and
exits 141 without a word, as SIGPIPE would end it, also while it has nothing to print.

Flags:
  --count N   stop after N updates and closes (the snapshots do not count)
`

const usageInfo = `Usage: statectl info

Print the server's id, version, epoch, features and bounds (any principal). With --json, the info
object.
`

const usageBackup = `Usage: statectl backup FILE

Take an online backup of the whole store (one read transaction on the server; admin principals only),
download it in chunks, check its size and sha256, and write FILE atomically (a temporary file in the
same directory, synced, then renamed). An existing FILE must be a regular file, which is replaced (a
symbolic link is followed: the file it points to is replaced); a device, a FIFO or "-" is refused, as
the backup is not written to a stream. Restore it with "stated restore FILE" while stated is stopped.
`

const usageAudit = `Usage: statectl audit verify

Walk the server's hash-chained audit log (admin principals only) and print the report, for example
"OK: 12 records, hash chain intact (head seq 12, hash ab12...)". Exits 1 when the chain is broken
(statectl: AUDIT_BROKEN on stderr). With --json, the report object, broken chain or not.
`

const usageBench = `Usage: statectl bench [flags]

Measure a running stated as admin principals (the defaults are the qualification workload):
  1. serial CAS: --owners keys in NS, each rewritten --rounds times with expected_revision set to its
     previous revision, one at a time: p50, p95, max latency, and stated's mean commit (fsync
     included) from --metrics-url: the disk's share; first, 200 info requests: the round trip's share;
  2. --writers concurrent writers, one connection and key each, --rounds CAS each: ops/s, p50, p95,
     and from --metrics-url the changes per commit and the share of the phase stated spent in
     commits (near 100%: commits are the bottleneck);
  3. fanout: --watches watches of one key over --connections connections, each kept by a client
     Cache (acknowledging as a Cache does), --rounds puts: the time from the start of a put until
     the last cache has it: p50, p95;
  4. idle memory: --entries entries written, --idle waited, then stated's RSS from --metrics-url
     with all connections open; then all but one closed, --idle waited, the RSS again.
A request's latency runs from just before it is sent to its reply decoded and checked; a failed
request (a CONFLICT too) fails the bench, it is never a sample. Percentiles are nearest-rank over
every op of the phase: no warm-up is left out.
Every document is the same 2,193-byte keeppeek.media-intent.v1. The keys live in --namespace
(cas/, writers/, fanout/, rss/) and are deleted at the end unless --keep. The bench refuses to start
when those prefixes hold entries it did not write (it deletes only its own).

The watches count against the server's max_watches and max_watches_per_principal (info shows them):
spread them over several admin principals with --admins, or raise the bounds in stated's [bounds]
(against a stated on its defaults, with the one dev principal: --watches 256). The bench checks this
and the namespace's quotas first, and says what does not fit.

Flags:
  --owners N          serial CAS keys (127)
  --rounds N          CAS per owner and per writer, and fanout puts (30; at most 10,000)
  --writers N         concurrent writers (127)
  --connections N     connections the fanout watches spread over (127)
  --watches N         fanout watches (1024)
  --entries N         entries written for the idle memory figure (1000)
  --idle D            wait before reading the memory (2s)
  --metrics-url URL   stated's metrics (http://127.0.0.1:9095/metrics); empty: memory not measured
  --namespace NS      service/<id> or user/<id> (service/bench)
  --admins LIST       admin principals to connect as, comma-separated ID:PASSWORD (or ID); connection
                      i uses the (i mod n)-th (default: --user with --password or --nkey)
  --admins-file FILE  the same list from FILE, one or more per line (# comments): passwords given
                      on the command line are visible to every user of the machine
  --keep              leave the bench's keys in place
`
