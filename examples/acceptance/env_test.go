package acceptance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/capabilities"
	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/reconciler"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

const (
	// waitTimeout bounds every wait of the tests: an event, a watch message, a capability.
	waitTimeout = 10 * time.Second
	// readyDelay is how long the simulator keeps a started publication PENDING: long enough that a
	// viewer subscribing on PENDING would be caught, short enough for a quick suite.
	readyDelay = 500 * time.Millisecond

	leaseSchema      = "keeppeek.lease.v1"
	preferenceSchema = "keeppeek.preference.v1"
	intentSchema     = reconciler.MediaIntentSchema
	statusSchema     = reconciler.ObservedStatusSchema

	videoStream = "video"
	profile720  = "browser-h264-720p"
)

// principals of the one stated of the suite (and of the benchmarks' own).
var principals = []e2e.Principal{
	{ID: "coordinator", Admin: true, Password: "coordinator-pw"},
	{ID: "transcoder-a", Admin: true, Password: "transcoder-a-pw"},
	{ID: "viewer-1", Password: "viewer-1-pw"},
	{ID: "group-client", Password: "group-client-pw"},
	{ID: "mallory", Password: "mallory-pw"},
	{ID: "media", Password: "media-pw", Media: true},
}

func password(id string) string {
	for _, p := range principals {
		if p.ID == id {
			return p.Password
		}
	}
	return ""
}

var discard = slog.New(slog.DiscardHandler)

// env is one running stated, the in-process media simulator connected to it as the media principal,
// and the coordinator's (admin) client.
type env struct {
	stated    *e2e.Stated
	sim       *sim.Sim
	adminConn *nats.Conn
	admin     *client.Client
	coord     *coordinator.Coordinator
}

// startStated starts a stated with the suite's principals (and extra configuration) and waits until
// its store is served.
func startStated(tb testing.TB, extra string) *e2e.Stated {
	tb.Helper()
	s := e2e.NewStated(tb, e2e.Config{Principals: principals, Extra: extra})
	s.Start()
	c := newClient(tb, s, "coordinator")
	deadline := time.Now().Add(waitTimeout)
	for {
		// stated gives no event for "the store is served"; its info feature is the signal.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx)
		cancel()
		if err == nil && slices.Contains(info.Features, wire.FeatureStateStore) {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("stated store not served within %v (last: %+v, %v)\n%s", waitTimeout, info, err, s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newEnv starts stated and the simulator with sources.
func newEnv(tb testing.TB, sources ...string) *env {
	tb.Helper()
	s := startStated(tb, "")
	e := &env{stated: s}
	e.adminConn = connect(tb, s, "coordinator")
	var err error
	if e.admin, err = client.New(e.adminConn, "coordinator"); err != nil {
		tb.Fatal(err)
	}
	if e.coord, err = coordinator.New(e.admin); err != nil {
		tb.Fatal(err)
	}
	e.sim = sim.New(connect(tb, s, "media"), sim.Options{Sources: sim.Sources(sources...), ReadyDelay: readyDelay})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := e.sim.Start(ctx); err != nil {
		tb.Fatalf("start simulator: %v", err)
	}
	tb.Cleanup(e.sim.Stop) // runs before the media connection closes (cleanups are LIFO)
	return e
}

// connect dials stated as principal, with the principal's inbox prefix; the connection closes at cleanup.
func connect(tb testing.TB, s *e2e.Stated, principal string) *nats.Conn {
	tb.Helper()
	nc, err := client.Connect(s.URL(), principal, nats.UserInfo(principal, password(principal)),
		nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatalf("connect %s: %v", principal, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// newClient connects a store client as principal on its own connection.
func newClient(tb testing.TB, s *e2e.Stated, principal string) *client.Client {
	tb.Helper()
	c, err := client.New(connect(tb, s, principal), principal)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// bounded returns a context for one step of a test.
func bounded(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// scenarioTimeout bounds the requests of a whole scenario: its waits for events have bounds of their own
// (waitTimeout each), and the requests between them, taken together, need not fit in one of those on a
// loaded machine.
const scenarioTimeout = 3 * time.Minute

// scenario returns a context for the requests of a whole scenario.
func scenario(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// stamped is a recorded item and when it was recorded.
type stamped[T any] struct {
	At time.Time
	V  T
}

// recorder collects items from callbacks (worker events, cache handlers) and lets a test wait for
// one without polling: every add wakes the waiters.
type recorder[T any] struct {
	mu     sync.Mutex
	items  []stamped[T]
	notify chan struct{}
}

func newRecorder[T any]() *recorder[T] { return &recorder[T]{notify: make(chan struct{})} }

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = append(r.items, stamped[T]{At: time.Now(), V: v})
	close(r.notify)
	r.notify = make(chan struct{})
}

// mark is the number of items recorded so far: a later wait from it sees only newer items.
func (r *recorder[T]) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

func (r *recorder[T]) all() []stamped[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

// waitFor returns the first item at index from or later that satisfies pred, and its index; it fails
// the test after waitTimeout.
func (r *recorder[T]) waitFor(tb testing.TB, from int, what string, pred func(T) bool) (stamped[T], int) {
	tb.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		for i := from; i < len(r.items); i++ {
			if pred(r.items[i].V) {
				it := r.items[i]
				r.mu.Unlock()
				return it, i
			}
		}
		from = len(r.items)
		ch := r.notify
		r.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			items := r.all()
			if len(items) > 40 {
				items = items[len(items)-40:]
			}
			var b []byte
			for _, it := range items {
				b = fmt.Appendf(b, "\n  %s %+v", it.At.Format("15:04:05.000"), it.V)
			}
			tb.Fatalf("timed out after %v waiting for %s; last items:%s", waitTimeout, what, b)
		}
	}
}

// runner runs a worker's Run in a goroutine owned by the test.
type runner struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	tb     testing.TB
}

// run starts fn; the cleanup (or stop) cancels it and waits for it to return. Register it after the
// worker's connection, so that the graceful stop runs while the connection is still up.
func run(tb testing.TB, nc *nats.Conn, fn func(context.Context) error) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{nc: nc, cancel: cancel, done: make(chan error, 1), tb: tb}
	go func() { r.done <- fn(ctx) }()
	tb.Cleanup(r.stop)
	return r
}

// stop stops the worker gracefully and waits for it.
func (r *runner) stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			r.tb.Errorf("worker did not stop within 20 s")
		}
	})
}

// kill simulates a crash in-process, as examples/demo does: the connection drops first (nothing
// more reaches the server, the lease is not released), then the context ends so that the goroutines
// exit. The cleanup still waits for them.
func (r *runner) kill() {
	r.nc.Close()
	r.cancel()
}

// transcoder is a running transcode worker of principal transcoder-a.
type transcoder struct {
	*runner
	id string
	tx *transcode.Transcoder
}

func startTranscoder(tb testing.TB, s *e2e.Stated, workerID, service string, ttl time.Duration, ev *recorder[transcode.Event]) *transcoder {
	tb.Helper()
	nc := connect(tb, s, "transcoder-a")
	tx, err := transcode.New(transcode.Config{Conn: nc, Principal: "transcoder-a", WorkerID: workerID, Service: service,
		LeaseTTL: ttl, HeartbeatInterval: 500 * time.Millisecond, Logger: discard, Events: ev.add})
	if err != nil {
		tb.Fatal(err)
	}
	return &transcoder{runner: run(tb, nc, tx.Run), id: workerID, tx: tx}
}

// isEvent matches a transcoder event of a worker (any when worker is "") for an intent.
func isEvent(kind, worker, intent string) func(transcode.Event) bool {
	return func(e transcode.Event) bool {
		return e.Kind == kind && (worker == "" || e.WorkerID == worker) && e.Intent == intent
	}
}

// publishIntent is a desired publish intent of variant (output profile browser-h264-720p).
func publishIntent(source, variant, recording string) coordinator.MediaIntent {
	in := coordinator.PublishIntent(source, coordinator.MediaKindVideo, recording)
	in.VariantID, in.OutputProfile = variant, profile720
	return in
}

// intentKey is the key the tests store a publish intent of variant under.
func intentKey(source, variant string) string { return "intents/" + source + "-video-" + variant }

// statusKeyOf is the transcoder's observed status key of an intent key.
func statusKeyOf(intentKey string) string { return "status/" + intentKey[len("intents/"):] }

// status reads and decodes an observed status entry.
func status(tb testing.TB, c *client.Client, ns, key string) (reconciler.ObservedStatus, wire.Entry) {
	tb.Helper()
	e, err := c.Get(bounded(tb), ns, key)
	if err != nil {
		tb.Fatalf("get %s %s: %v", ns, key, err)
	}
	var st reconciler.ObservedStatus
	if err := json.Unmarshal(e.Document, &st); err != nil {
		tb.Fatalf("decode status %s: %v", e.Document, err)
	}
	return st, e
}

// command is one command the simulator received, its position and its decoded body.
type command struct {
	Index int
	sim.CommandRecord
	Start     capabilities.StartPublicationRequest // for start_publication
	Subscribe capabilities.SubscribeRequest        // for subscribe
}

// commands returns the commands of kind cmd (from principal, any when "") whose variant_id is
// variant (any when "").
func commands(tb testing.TB, s *sim.Sim, cmd capabilities.Command, principal, variant string) []command {
	tb.Helper()
	var out []command
	for i, r := range s.Commands() {
		if r.Command != cmd || (principal != "" && r.Principal != principal) {
			continue
		}
		c := command{Index: i, CommandRecord: r}
		var v string
		switch cmd {
		case capabilities.CommandStartPublication:
			if err := json.Unmarshal(r.Body, &c.Start); err != nil {
				tb.Fatalf("decode %s body %s: %v", cmd, r.Body, err)
			}
			v = c.Start.VariantID
		case capabilities.CommandSubscribe:
			if err := json.Unmarshal(r.Body, &c.Subscribe); err != nil {
				tb.Fatalf("decode %s body %s: %v", cmd, r.Body, err)
			}
			v = c.Subscribe.VariantID
		}
		if variant == "" || v == variant {
			out = append(out, c)
		}
	}
	return out
}

// publications returns the simulator's live publications of a variant.
func publications(s *sim.Sim, source, variant string) []sim.PublicationInfo {
	var out []sim.PublicationInfo
	for _, p := range s.Publications() {
		if p.SourceID == source && p.VariantID == variant {
			out = append(out, p)
		}
	}
	return out
}

// listAll lists every entry of a namespace (one page: the tests keep namespaces small) and its revision.
func listAll(tb testing.TB, c *client.Client, ns string) client.ListResult {
	tb.Helper()
	res, err := c.List(bounded(tb), wire.ListRequest{Namespace: ns, Limit: wire.MaxListLimit})
	if err != nil {
		tb.Fatalf("list %s: %v", ns, err)
	}
	if res.NextAfterKey != "" {
		tb.Fatalf("list %s: more than one page", ns)
	}
	return res
}

// wantCode fails unless err is a *wire.Error with code.
func wantCode(tb testing.TB, what string, err error, code wire.Code) *wire.Error {
	tb.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		tb.Fatalf("%s: got %v, want %s", what, err, code)
	}
	return we
}

func revisionPtr(r uint64) *int64 { v := int64(r); return &v }

func ttlPtr(d time.Duration) *int64 { v := d.Milliseconds(); return &v }

// median is the middle sample (the mean of the two middle ones for an even count).
func median(samples []time.Duration) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// percentile is the p-th percentile (nearest rank) of samples.
func percentile(samples []time.Duration, p float64) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}
