package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// regState is one state a single-key namespace may be in: the entry's revision (the namespace's, as
// the namespace holds that key only) and its document's holder; rev 0 is "never written".
type regState struct {
	rev    uint64
	holder string
}

// regStates is the set of states a key may be in, given what its only writer was told.
type regStates map[regState]bool

// outcomeLog checks, for one writer of one key, that what the client reported is what the store did:
// a write reported successful committed; a *wire.Error means nothing committed; any other error
// (no reply) may or may not have committed. A read narrows the states to the one it saw, and to what
// the writes still pending (below) may make of it.
//
// A write of unknown outcome stays open after a read: stated answers no reply to a request whose
// client gave up but may still commit it later (store/server's errorResult), so a read that does not
// see it yet does not mean it never lands. Such a write is kept in pending, as its CAS's expected
// revision and its holder, and may apply whenever the key is at that revision; it is dropped once
// every state the key may be in is past that revision.
type outcomeLog struct {
	errorf  func(format string, args ...any)
	ns      string
	states  regStates
	pending regStates
	ops     []string
}

func newOutcomeLog(t *testing.T, ns string) *outcomeLog {
	return &outcomeLog{errorf: t.Errorf, ns: ns, states: regStates{{}: true}, pending: regStates{}}
}

func (o *outcomeLog) fail(format string, args ...any) {
	o.errorf("%s: %s\nhistory:\n%v", o.ns, fmt.Sprintf(format, args...), o.ops)
}

// settle adds to the states every one a pending write may lead to, and forgets the pending writes
// no state can take any more.
func (o *outcomeLog) settle() {
	for grew := true; grew; {
		grew = false
		for s := range o.states {
			for p := range o.pending {
				if next := (regState{p.rev + 1, p.holder}); p.rev == s.rev && !o.states[next] {
					o.states[next] = true
					grew = true
				}
			}
		}
	}
	for p := range o.pending {
		open := false
		for s := range o.states {
			if s.rev <= p.rev {
				open = true
			}
		}
		if !open {
			delete(o.pending, p)
		}
	}
}

// put records a CAS put (expected revision exp, document holder) and what the client said.
func (o *outcomeLog) put(exp uint64, holder string, e wire.Entry, err error) {
	o.ops = append(o.ops, fmt.Sprintf("put(exp %d, %s) -> rev %d, %v", exp, holder, e.Revision, err))
	next := regStates{}
	switch {
	case err == nil:
		if !o.hasRev(exp) || e.Revision != exp+1 {
			o.fail("put reported committed at revision %d from a state %v it cannot have applied to", e.Revision, o.states)
		}
		next[regState{e.Revision, holder}] = true
	case errors.Is(err, wire.ErrConflict):
		var we *wire.Error
		errors.As(err, &we)
		cur := *we.CurrentRevision
		for s := range o.states {
			if s.rev == cur && s.rev != exp {
				next[s] = true
			}
		}
		if len(next) == 0 {
			o.fail("CONFLICT at current revision %d matches none of %v", cur, o.states)
		}
	case wire.CodeOf(err) != "":
		// The client says nothing was written.
		next = o.states
	default:
		// Unknown: either, now or later.
		for s := range o.states {
			next[s] = true
		}
		o.pending[regState{exp, holder}] = true
	}
	if len(next) > 0 {
		o.states = next
	}
	o.settle()
}

func (o *outcomeLog) hasRev(rev uint64) bool {
	for s := range o.states {
		if s.rev == rev {
			return true
		}
	}
	return false
}

// read records a read of the key (rev 0: NOT_FOUND).
func (o *outcomeLog) read(got regState) {
	o.ops = append(o.ops, fmt.Sprintf("get -> %+v", got))
	if !o.states[got] {
		o.fail("read %+v, which none of the reported outcomes allows (%v)", got, o.states)
	}
	o.states = regStates{got: true}
	o.settle()
}

// readBack reads the key until the store answers; it returns the state seen.
func readBack(ctx context.Context, c *Client, ns string) (regState, error) {
	for {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		e, err := c.Get(gctx, ns, "reg")
		cancel()
		if err == nil {
			var d struct {
				Holder string `json:"holder"`
			}
			if err := json.Unmarshal(e.Document, &d); err != nil {
				return regState{}, err
			}
			return regState{e.Revision, d.Holder}, nil
		}
		if errors.Is(err, wire.ErrNotFound) {
			return regState{}, nil
		}
		if ctx.Err() != nil {
			return regState{}, err
		}
		t := time.NewTimer(20 * time.Millisecond) // a retry pause while stated is away, not a synchronisation
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// putWithin puts with a deadline of its own: a request whose reply a kill lost is given up on soon.
func putWithin(ctx context.Context, c *Client, req wire.PutRequest) (wire.Entry, error) {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Put(pctx, req)
}

// Writers run compare-and-set puts through the client while stated is killed (SIGKILL) and started
// again on the same database; its embedded NATS server goes with it, so the writers' connections
// drop in the middle of their requests. What the client reports must be what happened: a write
// reported successful is in the store, a *wire.Error (CONFLICT, UNAVAILABLE) means nothing was
// written, and only an error that is no *wire.Error leaves the outcome open. A writer that retries a
// CAS of unknown outcome and gets CONFLICT can tell its own earlier success by reading the entry back.
func TestE2EWriteOutcomesAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	t.Run("embedded NATS", func(t *testing.T) {
		s := e2e.NewStated(t, e2e.Config{Principals: []e2e.Principal{{ID: "coordinator", Admin: true, Password: "pw"}}})
		s.Start()
		writeAcrossKills(t, s, admin.ID, nats.UserInfo(admin.ID, "pw"))
	})
	t.Run("external NATS", func(t *testing.T) {
		s, _ := externalStated(t)
		writeAcrossKills(t, s, devID)
	})
}

// readerFor connects a client of principal to s.
func readerFor(t *testing.T, s *e2e.Stated, principal string, auth []nats.Option) *Client {
	t.Helper()
	nc, err := Connect(s.URL(), principal, auth...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(nc, principal)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeAcrossKills runs the writers of TestE2EWriteOutcomesAcrossKills against s as principal.
func writeAcrossKills(t *testing.T, s *e2e.Stated, principal string, auth ...nats.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	const writers = 4
	var (
		stop                      = make(chan struct{})
		wg                        sync.WaitGroup
		done                      atomic.Int64
		unknown, certain, retried atomic.Int64
		logs                      []*outcomeLog
	)
	for w := range writers {
		nc, err := Connect(s.URL(), principal, append(auth, nats.ReconnectWait(20*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := New(nc, principal, WithRequestTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ns := fmt.Sprintf("service/kw-%d", w)
		log := newOutcomeLog(t, ns)
		logs = append(logs, log)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			known := uint64(0)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				holder := fmt.Sprintf("w%d-%d", w, n)
				exp := int64(known)
				put := wire.PutRequest{Namespace: ns, Key: "reg", Schema: wire.SchemaLease,
					Document: json.RawMessage(fmt.Sprintf(`{"holder":%q,"claimed_at_ms":1}`, holder)), ExpectedRevision: &exp}
				e, err := putWithin(ctx, c, put)
				log.put(known, holder, e, err)
				done.Add(1)
				switch {
				case err == nil:
					known = e.Revision
					continue
				case wire.CodeOf(err) != "":
					certain.Add(1)
					if errors.Is(err, wire.ErrConflict) {
						var we *wire.Error
						errors.As(err, &we)
						known = *we.CurrentRevision
					}
					continue
				}
				unknown.Add(1)
				if rng.IntN(2) == 0 {
					// Retry the same CAS until it is answered.
					for {
						e, err = putWithin(ctx, c, put)
						log.put(known, holder, e, err)
						if wire.CodeOf(err) == wire.CodeUnavailable && ctx.Err() == nil {
							time.Sleep(20 * time.Millisecond) // a retry pause while stated is away, not a synchronisation
							continue
						}
						if err == nil || wire.CodeOf(err) != "" || ctx.Err() != nil {
							break
						}
					}
					if err == nil {
						known = e.Revision
						continue
					}
					if errors.Is(err, wire.ErrConflict) {
						retried.Add(1)
					}
				}
				st, err := readBack(ctx, c, ns)
				if err != nil {
					t.Errorf("%s: read back: %v", ns, err)
					return
				}
				log.read(st)
				known = st.rev
			}
		})
	}
	waitFor := func(n int64) {
		for done.Load() < n {
			select {
			case <-ctx.Done():
				t.Fatalf("only %d writes in time", done.Load())
			case <-time.After(5 * time.Millisecond): // polling a counter, bounded by ctx
			}
		}
	}
	for range 4 {
		waitFor(done.Load() + 100)
		s.Kill()
		s.Start()
	}
	waitFor(done.Load() + 100)
	close(stop)
	wg.Wait()
	// The store, stated up: each key is in a state its writer's reports allow.
	reader := readerFor(t, s, principal, auth)
	for _, log := range logs {
		st, err := readBack(ctx, reader, log.ns)
		if err != nil {
			t.Fatal(err)
		}
		log.read(st)
	}
	t.Logf("%d writes, %d refused for sure, %d of unknown outcome, %d retried into CONFLICT", done.Load(), certain.Load(), unknown.Load(), retried.Load())
	if unknown.Load() == 0 {
		t.Log("no write was cut by a kill")
	}
}

// Caches on a NATS server that stays up while stated is killed and started again: nothing tells a
// cache that its watch died with stated (no close, no reconnect); its liveness check finds the watch
// gone and it resyncs. Writes go on throughout. Every cache ends equal to the store, its handlers
// replay in revision order with nothing doubled and no resync going back, and WaitForRevision of a
// write made after the restart returns, bounded, once the handlers have run.
func TestE2ECachesAcrossKillsOnAnExternalNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	s, url := externalStated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	const ns = "service/tx"
	prefixes := []string{"a/", "b/"}
	reader := devClient(t, url, WithRequestTimeout(time.Second))
	writer := devClient(t, url, WithRequestTimeout(time.Second))
	var caches []watchedCache
	for i := range 4 {
		w := watchedCache{prefix: prefixes[i%len(prefixes)], r: newRecorder(), mark: &handlerWatermark{}}
		w.k = newCache(t, reader, CacheOptions{Namespace: ns, KeyPrefix: w.prefix, CheckInterval: 100 * time.Millisecond,
			ResyncBackoff: 20 * time.Millisecond, Handlers: w.mark.wrap(w.r.handlers())})
		caches = append(caches, w)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	put := func(key string) (uint64, error) {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		e, err := writer.Put(pctx, wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaLease,
			Document: json.RawMessage(fmt.Sprintf(`{"holder":"w","claimed_at_ms":%d}`, rng.IntN(1000)))})
		return e.Revision, err
	}
	for round := range 3 {
		for i := range 60 {
			_, _ = put(fmt.Sprintf("%sk%d", prefixes[rng.IntN(len(prefixes))], rng.IntN(6)))
			if i == 20 {
				s.Kill()
				s.Start()
			}
		}
		last := map[string]uint64{}
		for _, p := range prefixes {
			last[p] = retry(t, ctx, "sentinel", func() (uint64, error) { return put(p + "sentinel") })
		}
		checkSettled(t, ctx, round, caches, last, writer, ns)
	}
	for i, w := range caches {
		if w.k.Resyncs() == 0 {
			t.Errorf("cache %d never resynced across three kills", i)
		}
	}
}

// watchedCache is a cache under test: its key prefix, a recorder of its handlers' calls and the
// revision its handlers have reached.
type watchedCache struct {
	k      *Cache
	prefix string
	r      *recorder
	mark   *handlerWatermark
}

// checkSettled waits until each cache has reached last[its prefix], with its handlers, and checks
// that the cache and the replay of its handlers' calls both equal the store's list of its prefix.
func checkSettled(t *testing.T, ctx context.Context, round int, caches []watchedCache, last map[string]uint64, writer *Client, ns string) {
	t.Helper()
	for i, w := range caches {
		if err := w.k.WaitForRevision(ctx, last[w.prefix]); err != nil {
			t.Fatalf("round %d cache %d: WaitForRevision(%d): %v (at %d)", round, i, last[w.prefix], err, w.k.Revision())
		}
		if got := w.mark.get(); got < last[w.prefix] {
			t.Fatalf("round %d cache %d: WaitForRevision(%d) returned with the handlers at %d", round, i, last[w.prefix], got)
		}
		want, _ := listAll(t, writer, ns, w.prefix)
		got := w.k.List()
		replayed := w.r.replay(t)
		if len(got) != len(want) || len(replayed) != len(want) {
			t.Fatalf("round %d cache %d (%s): cache %v, handlers %d entries, store %v", round, i, w.prefix, keys(got), len(replayed), keys(want))
		}
		for j, e := range want {
			if h := replayed[e.Key]; !entryEqual(got[j], e) || !entryEqual(h, e) {
				t.Fatalf("round %d cache %d: cache %s, handlers %s, store %s", round, i, got[j].String(), h.String(), e.String())
			}
		}
	}
}

// The outcome model keeps a write of unknown outcome open past a read that does not show it (stated
// may commit a request after its client gave up), and still refuses outcomes no report allows.
func TestOutcomeLogKeepsAnUnansweredWriteOpen(t *testing.T) {
	var failures []string
	model := func() *outcomeLog {
		failures = nil
		o := newOutcomeLog(t, "service/model")
		o.errorf = func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
		return o
	}
	conflict := func(cur uint64) error {
		return &wire.Error{Code: wire.CodeConflict, CurrentRevision: &cur}
	}
	unanswered := context.DeadlineExceeded

	// The history TestE2EWriteOutcomesAcrossKills once saw: a put times out, a read still shows the
	// revision before it, the put commits after all, and the next CAS from that revision conflicts.
	o := model()
	o.put(0, "w-0", wire.Entry{Revision: 1}, nil)
	o.put(1, "w-1", wire.Entry{}, unanswered)
	o.read(regState{1, "w-0"})
	o.put(1, "w-2", wire.Entry{}, conflict(2))
	o.put(2, "w-3", wire.Entry{Revision: 3}, nil)
	o.read(regState{3, "w-3"})
	if len(failures) != 0 {
		t.Fatalf("a late commit of an unanswered write was refused: %v", failures)
	}
	if len(o.pending) != 0 {
		t.Fatalf("pending %v after the key moved past every unanswered write", o.pending)
	}

	// Without an unanswered write, the same conflict is impossible.
	o = model()
	o.put(0, "w-0", wire.Entry{Revision: 1}, nil)
	o.read(regState{1, "w-0"})
	o.put(1, "w-2", wire.Entry{}, conflict(2))
	if len(failures) == 0 {
		t.Fatal("a conflict no write explains was accepted")
	}

	// An unanswered write may land after a read, but not as another holder's document.
	o = model()
	o.put(0, "w-1", wire.Entry{}, unanswered)
	o.read(regState{})
	o.read(regState{1, "w-9"})
	if len(failures) == 0 {
		t.Fatal("a read of a document no write carried was accepted")
	}

	// Once the key is past its expected revision, the unanswered write can no longer land.
	o = model()
	o.put(0, "w-1", wire.Entry{}, unanswered)
	o.read(regState{})
	o.put(0, "w-2", wire.Entry{Revision: 1}, nil)
	o.read(regState{2, "w-1"})
	if len(failures) == 0 {
		t.Fatal("an unanswered write landed on a revision its CAS did not expect")
	}
}
