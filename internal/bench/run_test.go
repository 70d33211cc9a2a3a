package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// smallConfig is a quick workload against s as its dev principal, without the idle memory figure.
func smallConfig(s *e2e.Stated) Config {
	cfg := DefaultConfig()
	cfg.URL, cfg.MetricsURL = s.URL(), ""
	cfg.Owners, cfg.Rounds, cfg.Writers, cfg.Connections, cfg.Watches, cfg.Entries, cfg.Idle = 2, 1, 2, 2, 2, 3, 0
	return cfg
}

// devClient is a client of s as the dev principal, closed at cleanup.
func devClient(t *testing.T, s *e2e.Stated) *client.Client {
	t.Helper()
	nc, err := client.Connect(s.URL(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, "dev")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// namespaceRevision is the revision of ns: it moves with every write, so an unchanged one means
// nothing was written.
func namespaceRevision(t *testing.T, c *client.Client, ns string) uint64 {
	t.Helper()
	l, err := c.List(ctxT(t), wire.ListRequest{Namespace: ns, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	return l.Revision
}

// A key the bench did not write, under one of its prefixes, is the user's: the bench refuses to run
// rather than delete it, and changes nothing (not even its own leftovers).
func TestRunLeavesKeysItDidNotWriteAlone(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	c := devClient(t, s)
	cfg := smallConfig(s)
	lease := json.RawMessage(`{"holder":"someone","claimed_at_ms":1}`)
	mine, err := c.Put(ctxT(t), wire.PutRequest{Namespace: cfg.Namespace, Key: "cas/mine", Schema: wire.SchemaLease, Document: lease})
	if err != nil {
		t.Fatal(err)
	}
	// A leftover of the bench's own, which a run that goes ahead removes.
	doc, err := Document(DocumentBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctxT(t), wire.PutRequest{Namespace: cfg.Namespace, Key: "rss/e-000", Schema: DocumentSchema, Document: doc}); err != nil {
		t.Fatal(err)
	}
	before := namespaceRevision(t, c, cfg.Namespace)
	_, err = Run(ctxT(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "cas/mine") {
		t.Errorf("Run with a key of someone else's under cas/ = %v, want an error naming it", err)
	}
	got, gerr := c.Get(ctxT(t), cfg.Namespace, "cas/mine")
	if gerr != nil || got.Revision != mine.Revision {
		t.Fatalf("the bench removed or rewrote cas/mine: %+v, %v", got, gerr)
	}
	if after := namespaceRevision(t, c, cfg.Namespace); after != before {
		t.Errorf("the refused run wrote: namespace revision %d, was %d", after, before)
	}

	// The bench's own leftovers (an interrupted --keep run) are still removed.
	if _, err := c.Delete(ctxT(t), wire.DeleteRequest{Namespace: cfg.Namespace, Key: "cas/mine"}); err != nil {
		t.Fatal(err)
	}
	keep := cfg
	keep.Keep = true
	if _, err := Run(ctxT(t), keep); err != nil {
		t.Fatalf("Run --keep: %v\n%s", err, s.Logs())
	}
	if _, err := Run(ctxT(t), cfg); err != nil {
		t.Fatalf("Run after a --keep run: %v\n%s", err, s.Logs())
	}
	if l, err := c.List(ctxT(t), wire.ListRequest{Namespace: cfg.Namespace}); err != nil || len(l.Entries) != 0 {
		t.Fatalf("after the run the namespace holds %d entries (%v)", len(l.Entries), err)
	}
}

// The bounds check counts what the namespace holds at its fullest (the earlier phases' keys are gone
// before the idle phase writes, unless Keep) and the bytes as well as the entries, so a workload that
// fits runs and one that does not is refused before anything is written.
func TestRunChecksTheBoundsItWillMeet(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Extra: fmt.Sprintf("[bounds]\nmax_entries_per_namespace = 10\nmax_total_value_bytes = %d\n", 9*DocumentBytes)})
	s.Start()
	c := devClient(t, s)

	// At its fullest the namespace holds 8 entries (the idle phase's), 2+2+1 before: it fits.
	cfg := smallConfig(s)
	cfg.Entries, cfg.Watches, cfg.Connections = 8, 2, 3
	rep, err := Run(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("a workload that fits the bounds was refused: %v", err)
	}
	// Two watches use two of the three connections.
	if rep.Fanout.Watches != 2 || rep.Fanout.Connections != 2 || rep.Fanout.Principals != 1 {
		t.Errorf("fanout reported as %+v, want 2 watches over 2 connections of 1 principal", rep.Fanout)
	}

	// 10 entries fit max_entries_per_namespace but their bytes do not fit max_total_value_bytes.
	before := namespaceRevision(t, c, cfg.Namespace)
	cfg.Entries = 10
	_, err = Run(ctxT(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "max_total_value_bytes") {
		t.Errorf("a workload over max_total_value_bytes: %v, want a refusal naming the bound", err)
	}
	if after := namespaceRevision(t, c, cfg.Namespace); after != before {
		t.Errorf("the refused run wrote: namespace revision %d, was %d", after, before)
	}

	// With Keep every phase's keys stay: 2+2+1+8 do not fit 10 entries.
	cfg.Entries, cfg.Keep = 8, true
	_, err = Run(ctxT(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "max_entries_per_namespace") {
		t.Errorf("a kept workload over max_entries_per_namespace: %v, want a refusal naming the bound", err)
	}
	var we *wire.Error
	if errors.As(err, &we) {
		t.Errorf("a refusal of the bench's own is not a server answer: %v", err)
	}
	if after := namespaceRevision(t, c, cfg.Namespace); after != before {
		t.Errorf("the refused run wrote: namespace revision %d, was %d", after, before)
	}
}

// Metrics of another stated (the default --metrics-url while --nats-url names a second server) are
// refused, not reported as the measured server's memory and commits; the measured server's own are
// used.
func TestRunRefusesAnotherStatedsMetrics(t *testing.T) {
	measured := e2e.NewStated(t, e2e.Config{})
	measured.Start()
	other := e2e.NewStated(t, e2e.Config{})
	other.Start()
	cfg := smallConfig(measured)
	cfg.MetricsURL = other.HTTP() + "/metrics"
	_, err := Run(ctxT(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "not the metrics of the stated") {
		t.Fatalf("Run with another stated's metrics = %v, want a refusal", err)
	}
	cfg.MetricsURL = measured.HTTP() + "/metrics"
	rep, err := Run(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("Run with the measured stated's metrics: %v\n%s", err, measured.Logs())
	}
	if !rep.Idle.Measured || rep.Idle.RSSBytes <= 0 {
		t.Fatalf("idle memory not measured with the right metrics: %+v", rep.Idle)
	}
}

// An interrupted run's CAS whose reply its client gave up on may commit after the clean up listed the
// key: the delete at the listed revision then met a CONFLICT and left the key, though it held the
// bench's document (a hung-up `statectl bench` left cas/o-000 behind). Such a key is read again and
// deleted at its new revision; one rewritten by someone else since stays.
func TestCleanUpDeletesItsOwnKeyRewrittenAfterTheList(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	c := devClient(t, s)
	cfg := smallConfig(s)
	doc, err := Document(DocumentBytes)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, schema string, d json.RawMessage) int64 {
		t.Helper()
		e, err := c.Put(ctxT(t), wire.PutRequest{Namespace: cfg.Namespace, Key: key, Schema: schema, Document: d})
		if err != nil {
			t.Fatal(err)
		}
		return int64(e.Revision)
	}
	ownRev, otherRev := put("cas/o-000", DocumentSchema, doc), put("cas/o-001", DocumentSchema, doc)
	put("cas/o-000", DocumentSchema, doc) // the interrupted CAS, committed after the list
	put("cas/o-001", wire.SchemaLease, json.RawMessage(`{"holder":"someone","claimed_at_ms":1}`))
	r := &runner{cfg: cfg, doc: doc}
	defer r.close()
	if err := r.connect(); err != nil {
		t.Fatal(err)
	}
	if err := r.deleteListed(ctxT(t), []listed{{"cas/o-000", ownRev}, {"cas/o-001", otherRev}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctxT(t), cfg.Namespace, "cas/o-000"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("the bench's key rewritten after the list: %v, want it deleted", err)
	}
	if e, err := c.Get(ctxT(t), cfg.Namespace, "cas/o-001"); err != nil || e.Schema != wire.SchemaLease {
		t.Errorf("someone else's rewrite: %+v, %v, want it kept", e, err)
	}
}
