package bench

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// atStep returns a Logf that calls fn once, the first time the bench logs a step whose format
// starts with step (Logf runs on Run's goroutine, between the bench's requests).
func atStep(step string, fn func()) func(string, ...any) {
	var once sync.Once
	return func(format string, _ ...any) {
		if strings.HasPrefix(format, step) {
			once.Do(fn)
		}
	}
}

// stalledConfig is smallConfig with a one-second request timeout and s paused (SIGSTOP, resumed at
// the test's cleanup) once the bench logs step.
func stalledConfig(s *e2e.Stated, step string) Config {
	cfg := smallConfig(s)
	cfg.RequestTimeout = time.Second
	cfg.Logf = atStep(step, s.Pause)
	return cfg
}

// Config.RequestTimeout bounds each request even when Run's context has a deadline of its own, as
// go test's and the cleanup's have: the client applies its own timeout only to a context without
// one, so a stalled stated held every request for the whole of the caller's deadline (and each of
// the cleanup's for two minutes).
func TestRunBoundsEachRequestByRequestTimeout(t *testing.T) {
	t.Parallel()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	cfg := stalledConfig(s, "serial CAS:")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("Run against a stalled stated returned only after its context's deadline (%v): the %v request timeout bounded nothing", err, cfg.RequestTimeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run against a stalled stated = %v, want a request's timeout", err)
	}
}

// The fanout's watches open within a bound too: a client.Cache retries a watch that timed out until
// its context ends, so against a stalled stated the bench waited for the caller's whole deadline
// (for ever under statectl, whose context has none).
func TestRunBoundsTheFanoutWatches(t *testing.T) {
	t.Parallel()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	cfg := stalledConfig(s, "fanout: opening")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Run(ctx, cfg)
	if ctx.Err() != nil {
		t.Fatalf("Run against a stalled stated returned only after its context's deadline (%v): the fanout's watches had no bound", err)
	}
	if err == nil || !strings.Contains(err.Error(), "fanout") {
		t.Fatalf("Run against a stalled stated = %v, want the fanout's failure", err)
	}
}

// A run that fails and cannot remove its keys either says so: the caller is told that the keys stay,
// besides the failure itself (still matched with errors.Is).
func TestRunSaysWhenItsCleanupFailed(t *testing.T) {
	t.Parallel()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	cfg := stalledConfig(s, "concurrent writers:")
	_, err := Run(ctxT(t), cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run against a stalled stated = %v, want a request's timeout", err)
	}
	if !strings.Contains(err.Error(), "left behind") {
		t.Errorf("Run failed and could not clean up, but its error does not say the keys were left behind: %v", err)
	}
	s.Resume()
	c := devClient(t, s)
	if l, lerr := c.List(ctxT(t), wire.ListRequest{Namespace: cfg.Namespace, KeyPrefix: serialPrefix}); lerr != nil || len(l.Entries) == 0 {
		t.Fatalf("the serial phase's keys are not there (%v): the test did not make the cleanup fail", lerr)
	}
}

// The commit figures are differences of stated's counters over a phase: a stated restarted meanwhile
// counts from zero again, and the difference is neither that phase's commits nor a count at all. The
// bench refuses to report figures that mix two processes. stated runs behind a NATS server of its
// own, as with an external cluster, so the bench's connections stay up while it restarts.
func TestRunRefusesFiguresAcrossARestart(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t, natsserver.Options{})
	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	s.Start()
	cfg := smallConfig(s)
	cfg.MetricsURL = s.HTTP() + "/metrics"
	cfg.Owners, cfg.Writers, cfg.Rounds = 1, 4, 10
	restarted := false
	cfg.Logf = atStep("concurrent writers:", func() {
		restarted = true
		if code := s.Term(); code != 0 {
			t.Errorf("stated exited %d", code)
		}
		s.Start()
	})
	rep, err := Run(ctxT(t), cfg)
	if !restarted {
		t.Fatalf("the writers phase never started: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "restarted") {
		t.Fatalf("Run across a restart of stated reported %+v (%v), want a refusal naming the restart", rep, err)
	}
}

// Other keys of the namespace may be written while the bench runs (a user/<id> namespace is the
// user's): the fanout's watches then start at a later snapshot revision, which is no failure.
func TestRunFanoutBesideOtherWritesInTheNamespace(t *testing.T) {
	t.Parallel()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	c := devClient(t, s)
	cfg := smallConfig(s)
	var other wire.Entry
	cfg.Logf = atStep("fanout: opening", func() {
		var err error
		other, err = c.Put(ctxT(t), wire.PutRequest{Namespace: cfg.Namespace, Key: "other/x", Schema: wire.SchemaLease,
			Document: json.RawMessage(`{"holder":"someone","claimed_at_ms":1}`)})
		if err != nil {
			t.Error(err)
		}
	})
	if _, err := Run(ctxT(t), cfg); err != nil {
		t.Fatalf("Run beside a write to other/x: %v", err)
	}
	if got, err := c.Get(ctxT(t), cfg.Namespace, "other/x"); err != nil || got.Revision != other.Revision {
		t.Fatalf("other/x after the run: %+v, %v", got, err)
	}
}
