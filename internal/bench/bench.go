package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// Principal is an admin principal the bench connects as. An empty Password connects without
// credentials (the dev principal of a stated that has no configured principals).
type Principal struct {
	ID       string
	Password string
}

// Config configures Run. The defaults named below are DefaultConfig's, the qualification workload
// (a zero field is not replaced by its default); Run validates a Config once, before it connects.
type Config struct {
	// URL is the NATS server stated serves on. Default nats://127.0.0.1:4222.
	URL string
	// Principals are admin principals; connection i acts as Principals[i % len(Principals)], so the
	// watches of the fanout phase spread over them (each counts against max_watches_per_principal).
	// The serial phase uses the first. Default: the dev principal.
	Principals []Principal
	// Prefix is the subject prefix. Default "kp".
	Prefix string
	// Namespace receives every key the bench writes: a service/<id> namespace or user/<id> (the
	// bench document's schema is allowed in both). Default service/bench.
	Namespace string
	// RequestTimeout bounds each request, whatever deadline Run's context has, and each scrape of
	// the metrics; a fanout watch's first snapshot (three requests) gets four times as long. Default
	// client.DefaultRequestTimeout (5 s).
	RequestTimeout time.Duration
	// Owners is the number of keys of the serial phase; it runs Owners x Rounds compare-and-sets.
	// Default 127.
	Owners int
	// Rounds is how many compare-and-sets each serial owner and each concurrent writer makes, and how
	// many puts the fanout phase times. Default 30.
	Rounds int
	// Writers is the number of concurrent writers, each with its own key and connection. Default 127.
	Writers int
	// Connections is the number of connections the fanout watches spread over. Default 127. The bench
	// opens max(Writers, Connections) connections.
	Connections int
	// Watches is the number of watches of the fanout key. Default 1,024.
	Watches int
	// Entries is the number of entries written before the idle memory is read. Default 1,000.
	Entries int
	// Idle is how long the bench waits, after writing Entries, before it reads the memory. Default 2 s.
	Idle time.Duration
	// MetricsURL is stated's Prometheus endpoint. Default http://127.0.0.1:9095/metrics. Empty: the
	// idle memory is not measured (the entries are still written).
	MetricsURL string
	// Keep leaves every key the bench wrote in place. Without it the keys of the first three phases
	// are deleted before the idle phase (so the namespace holds exactly Entries bench entries while
	// the memory is read) and the idle phase's entries at the end.
	Keep bool
	// Logf, when set, receives a line of progress per step.
	Logf func(format string, args ...any)
	// NATSOptions are added to the options of every connection the bench opens: TLS files, or the
	// nkey of a principal that has no password.
	NATSOptions []nats.Option
}

// DefaultConfig returns the qualification workload against a local stated with no configured
// principals.
func DefaultConfig() Config {
	return Config{
		URL:            nats.DefaultURL,
		Principals:     []Principal{{ID: "dev"}},
		Prefix:         wire.DefaultPrefix,
		Namespace:      "service/bench",
		RequestTimeout: client.DefaultRequestTimeout,
		Owners:         127,
		Rounds:         30,
		Writers:        127,
		Connections:    127,
		Watches:        1024,
		Entries:        1000,
		Idle:           2 * time.Second,
		MetricsURL:     "http://127.0.0.1:9095/metrics",
	}
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	if c.URL == "" {
		return errors.New("bench: URL is empty")
	}
	if len(c.Principals) == 0 {
		return errors.New("bench: no principals")
	}
	seen := map[string]bool{}
	for _, p := range c.Principals {
		if !wire.ValidPrincipalID(p.ID) {
			return fmt.Errorf("bench: invalid principal id %q", p.ID)
		}
		if seen[p.ID] {
			// Counted twice, it would be reported as two principals and its watches checked as two's.
			return fmt.Errorf("bench: principal %q is given twice", p.ID)
		}
		seen[p.ID] = true
	}
	if !wire.ValidPrefix(c.Prefix) {
		return fmt.Errorf("bench: invalid subject prefix %q", c.Prefix)
	}
	kind, _, ok := wire.ParseNamespace(c.Namespace)
	if !ok || (kind != wire.KindService && kind != wire.KindUser) {
		return fmt.Errorf("bench: namespace %q must be service/<id> or user/<id>", c.Namespace)
	}
	if c.RequestTimeout <= 0 {
		return fmt.Errorf("bench: request timeout must be positive, got %v", c.RequestTimeout)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"owners", c.Owners}, {"rounds", c.Rounds}, {"writers", c.Writers}, {"connections", c.Connections},
		{"watches", c.Watches}, {"entries", c.Entries}} {
		if f.v < 1 {
			return fmt.Errorf("bench: %s must be at least 1, got %d", f.name, f.v)
		}
	}
	if c.Owners > 1000 || c.Writers > 1000 || c.Connections > 1000 || c.Entries > 100000 || c.Rounds > MaxRounds {
		return fmt.Errorf("bench: owners, writers and connections are at most 1,000, rounds at most %d, entries at most 100,000", MaxRounds)
	}
	if c.Idle < 0 {
		return fmt.Errorf("bench: negative idle wait %v", c.Idle)
	}
	if c.MetricsURL != "" {
		if u, err := url.Parse(c.MetricsURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("bench: metrics URL %q is not an http URL", c.MetricsURL)
		}
	}
	return nil
}

// MaxRounds bounds Config.Rounds: the bench keeps every latency it measures (Owners x Rounds of them
// in the serial phase), so a count beyond what it can hold is refused before it connects.
const MaxRounds = 10_000

// ErrConnect marks a failure to connect to NATS (an unreachable server, wrong credentials).
var ErrConnect = errors.New("connect")

// Key prefixes of the phases.
const (
	serialPrefix = "cas/"
	writerPrefix = "writers/"
	fanoutPrefix = "fanout/"
	idlePrefix   = "rss/"
	fanoutKey    = fanoutPrefix + "k"
)

// cleanupTimeout bounds the removal of the bench's keys, which runs even after ctx ended.
const cleanupTimeout = 2 * time.Minute

// runner is one Run.
type runner struct {
	cfg   Config
	doc   []byte
	conns []*client.Client
	info  wire.Info
	// statedStart is the process_start_time_seconds of the stated whose metrics the bench read first
	// (0 before): every later read must come from the same process.
	statedStart float64
}

// Run measures the stated at cfg.URL and returns the report. It fails before writing anything when
// the server's bounds cannot hold the workload (say, Watches beyond what max_watches_per_principal
// allows the given principals, or the entries beyond max_entries_per_namespace or
// max_total_value_bytes; what others store counts too, and the server refuses what the bench could
// not foresee), and when the namespace holds, under the bench's key prefixes, an entry the bench
// did not write. Errors from the server keep their *wire.Error; a failure to connect
// wraps ErrConnect; a restart of stated seen in its metrics wraps ErrRestarted. A run that fails and
// cannot remove its keys either says so in its error.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	doc, err := Document(DocumentBytes)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, doc: doc}
	defer r.close()
	if err := r.connect(); err != nil {
		return nil, err
	}
	if err := r.check(ctx); err != nil {
		return nil, err
	}
	// Leftovers of an earlier run (with Keep, or interrupted) would break create-only seeds. A key
	// under the bench's prefixes that the bench did not write is someone's data: refuse to run
	// rather than delete or overwrite it.
	leftovers, foreign, err := r.listUnder(ctx, serialPrefix, writerPrefix, fanoutPrefix, idlePrefix)
	if err != nil {
		return nil, fmt.Errorf("bench: look for leftovers: %w", err)
	}
	if len(foreign) > 0 {
		more := ""
		if len(foreign) > 3 {
			foreign, more = foreign[:3], fmt.Sprintf(" and %d more", len(foreign)-3)
		}
		return nil, fmt.Errorf("bench: %s holds %s%s, which the bench did not write, under the prefixes it writes and removes (%s, %s, %s, %s); choose another namespace",
			cfg.Namespace, strings.Join(foreign, ", "), more, serialPrefix, writerPrefix, fanoutPrefix, idlePrefix)
	}
	r.logf("removing %d leftovers of earlier runs in %s", len(leftovers), cfg.Namespace)
	if err := r.deleteListed(ctx, leftovers); err != nil {
		return nil, fmt.Errorf("bench: remove leftovers: %w", err)
	}
	if !cfg.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			r.logf("removing the bench's keys")
			cerr := r.deleteUnder(cctx, serialPrefix, writerPrefix, fanoutPrefix, idlePrefix)
			switch {
			case cerr == nil:
			case err == nil:
				rep, err = nil, fmt.Errorf("bench: clean up: %w; the bench's keys in %s may be left behind (the next run removes them)", cerr, cfg.Namespace)
			default:
				// The run's failure stays the error (its code, its exit status); the caller also
				// learns that the keys stay.
				err = fmt.Errorf("%w; the clean up failed too (%v): the bench's keys in %s may be left behind (the next run removes them)", err, cerr, cfg.Namespace)
			}
		}()
	}
	rep = &Report{Namespace: cfg.Namespace, Schema: DocumentSchema, DocumentBytes: len(doc),
		Principals: len(cfg.Principals), ServerVersion: r.info.Version}
	if rep.SerialCAS, err = r.serial(ctx); err != nil {
		return nil, fmt.Errorf("bench: serial CAS: %w", err)
	}
	if rep.Writers, err = r.writers(ctx); err != nil {
		return nil, fmt.Errorf("bench: concurrent writers: %w", err)
	}
	if rep.Fanout, err = r.fanout(ctx); err != nil {
		return nil, fmt.Errorf("bench: fanout: %w", err)
	}
	if rep.Idle, err = r.idle(ctx); err != nil {
		return nil, fmt.Errorf("bench: idle memory: %w", err)
	}
	return rep, nil
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

// connect opens max(Writers, Connections) connections, spread over the principals.
func (r *runner) connect() error {
	n := max(r.cfg.Writers, r.cfg.Connections)
	r.logf("opening %d connections as %d principal(s)", n, len(r.cfg.Principals))
	for i := range n {
		p := r.cfg.Principals[i%len(r.cfg.Principals)]
		opts := []nats.Option{nats.Timeout(r.cfg.RequestTimeout)}
		if p.Password != "" {
			opts = append(opts, nats.UserInfo(p.ID, p.Password))
		}
		opts = append(opts, r.cfg.NATSOptions...)
		nc, err := client.Connect(r.cfg.URL, p.ID, opts...)
		if err != nil {
			return fmt.Errorf("bench: %w: %w", ErrConnect, err)
		}
		c, err := client.New(nc, p.ID, client.WithPrefix(r.cfg.Prefix), client.WithRequestTimeout(r.cfg.RequestTimeout))
		if err != nil {
			nc.Close()
			return err
		}
		r.conns = append(r.conns, c)
	}
	return nil
}

func (r *runner) close() {
	for _, c := range r.conns {
		c.Conn().Close()
	}
}

// bounded returns ctx bounded by the request timeout. The client applies its own timeout only to a
// context without a deadline: under a caller's (go test's, the cleanup's two minutes) a stalled stated
// would otherwise hold each request for all of it.
func (r *runner) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.RequestTimeout)
}

// check reads the server's bounds and refuses a workload they cannot hold.
func (r *runner) check(ctx context.Context) error {
	ictx, cancel := r.bounded(ctx)
	info, err := r.conns[0].Info(ictx)
	cancel()
	if err != nil {
		return fmt.Errorf("bench: info: %w", err)
	}
	r.info = info
	if !slices.Contains(info.Features, wire.FeatureStateStore) {
		return wire.Errorf(wire.CodeUnavailable, "the state store is not served (info lacks %s)", wire.FeatureStateStore)
	}
	b := info.Bounds
	if int64(len(r.doc)) > b.MaxDocumentBytes {
		return fmt.Errorf("bench: the %d-byte document is over the server's max_document_bytes %d", len(r.doc), b.MaxDocumentBytes)
	}
	// The namespace is at its fullest either before the idle phase (the serial, writer and fanout
	// keys) or during it (its entries, plus the earlier keys when they are kept).
	need := int64(max(r.cfg.Owners+r.cfg.Writers+1, r.cfg.Entries))
	if r.cfg.Keep {
		need = int64(r.cfg.Owners + r.cfg.Writers + 1 + r.cfg.Entries)
	}
	if need > b.MaxEntriesPerNamespace {
		return fmt.Errorf("bench: %d entries do not fit in max_entries_per_namespace %d", need, b.MaxEntriesPerNamespace)
	}
	if total := need * int64(len(r.doc)); total > b.MaxTotalValueBytes {
		return fmt.Errorf("bench: %d entries of %d bytes (%d bytes) do not fit in max_total_value_bytes %d",
			need, len(r.doc), total, b.MaxTotalValueBytes)
	}
	if int64(r.cfg.Watches) > b.MaxWatches {
		return fmt.Errorf("bench: %d watches do not fit: the server allows max_watches %d in all; lower --watches or raise [bounds] max_watches",
			r.cfg.Watches, b.MaxWatches)
	}
	perPrincipal := map[string]int64{}
	for j := range r.cfg.Watches {
		perPrincipal[r.conns[j%r.cfg.Connections].Principal()]++
	}
	ids := make([]string, 0, len(perPrincipal))
	for id := range perPrincipal {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if n := perPrincipal[id]; n > b.MaxWatchesPerPrincipal {
			fit := b.MaxWatchesPerPrincipal * int64(min(len(r.cfg.Principals), r.cfg.Connections))
			return fmt.Errorf("bench: %d watches do not fit: principal %s would hold %d but max_watches_per_principal is %d, "+
				"so %d principal(s) hold at most %d; give more admin principals (statectl bench --admins) or raise [bounds] max_watches_per_principal",
				r.cfg.Watches, id, n, b.MaxWatchesPerPrincipal, len(r.cfg.Principals), fit)
		}
	}
	return nil
}

func (r *runner) put(key string, expected *int64) wire.PutRequest {
	return wire.PutRequest{Namespace: r.cfg.Namespace, Key: key, Schema: DocumentSchema, Document: r.doc, ExpectedRevision: expected}
}

// seed creates keys (create only) in parallel and returns their revisions.
func (r *runner) seed(ctx context.Context, keys []string) ([]int64, error) {
	revs := make([]int64, len(keys))
	err := parallel(len(keys), len(r.conns), func(w, i int) error {
		zero := int64(0)
		pctx, cancel := r.bounded(ctx)
		e, err := r.conns[w].Put(pctx, r.put(keys[i], &zero))
		cancel()
		if err != nil {
			return fmt.Errorf("create %s: %w", keys[i], err)
		}
		revs[i] = int64(e.Revision)
		return nil
	})
	return revs, err
}

// listed is a key of the bench's and the revision it was listed at.
type listed struct {
	key string
	rev int64
}

// listUnder lists the entries of the namespace under each prefix: own are the bench's (they hold
// its document, DocumentSchema and r.doc), foreign the keys of every other.
func (r *runner) listUnder(ctx context.Context, prefixes ...string) (own []listed, foreign []string, err error) {
	for _, p := range prefixes {
		after := ""
		for {
			lctx, cancel := r.bounded(ctx)
			page, err := r.conns[0].List(lctx, wire.ListRequest{Namespace: r.cfg.Namespace, KeyPrefix: p, AfterKey: after, Limit: wire.MaxListLimit})
			cancel()
			if err != nil {
				return nil, nil, fmt.Errorf("list %s: %w", p, err)
			}
			for _, e := range page.Entries {
				if r.isBenchEntry(e) {
					own = append(own, listed{e.Key, int64(e.Revision)})
				} else {
					foreign = append(foreign, e.Key)
				}
			}
			if page.NextAfterKey == "" {
				break
			}
			after = page.NextAfterKey
		}
	}
	return own, foreign, nil
}

// deleteListed deletes the listed keys, each at the revision it was listed at, so that an entry
// rewritten since by someone else stays. One rewritten since with the bench's document is the
// bench's own: a write of an interrupted run that committed after the list (its client gave up on
// the reply). It is read again and deleted at its new revision, a few times at most.
func (r *runner) deleteListed(ctx context.Context, own []listed) error {
	return parallel(len(own), max(len(r.conns), 16), func(w, i int) error {
		c, rev := r.conns[w%len(r.conns)], own[i].rev
		for range 5 {
			dctx, cancel := r.bounded(ctx)
			_, err := c.Delete(dctx, wire.DeleteRequest{Namespace: r.cfg.Namespace, Key: own[i].key, ExpectedRevision: &rev})
			cancel()
			switch {
			case err == nil, errors.Is(err, wire.ErrNotFound):
				return nil
			case !errors.Is(err, wire.ErrConflict):
				return fmt.Errorf("delete %s: %w", own[i].key, err)
			}
			gctx, cancel := r.bounded(ctx)
			e, err := c.Get(gctx, r.cfg.Namespace, own[i].key)
			cancel()
			switch {
			case errors.Is(err, wire.ErrNotFound):
				return nil
			case err != nil:
				return fmt.Errorf("delete %s: read it again: %w", own[i].key, err)
			case !r.isBenchEntry(e):
				return nil // someone else's now: it stays
			}
			rev = int64(e.Revision)
		}
		return fmt.Errorf("delete %s: rewritten with the bench's document at every try", own[i].key)
	})
}

// deleteUnder deletes the bench's entries under each prefix and leaves every other alone.
func (r *runner) deleteUnder(ctx context.Context, prefixes ...string) error {
	own, _, err := r.listUnder(ctx, prefixes...)
	if err != nil {
		return err
	}
	return r.deleteListed(ctx, own)
}

// isBenchEntry reports whether e holds what the bench writes: the bench document under its schema.
func (r *runner) isBenchEntry(e wire.Entry) bool {
	if e.Schema != DocumentSchema {
		return false
	}
	var b bytes.Buffer
	return json.Compact(&b, e.Document) == nil && bytes.Equal(b.Bytes(), r.doc)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	width := len(fmt.Sprint(n - 1))
	width = max(width, 3)
	for i := range out {
		out[i] = fmt.Sprintf("%s%0*d", prefix, width, i)
	}
	return out
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
