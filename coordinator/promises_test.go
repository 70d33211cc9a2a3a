package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// Tests of promises the doc comments make that no other test checked.

// The intent carries no lease: PutIntent over an intent that had a TTL drops it, even when the
// document is the same (PutIntent doc).
func TestPutIntentDropsALease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	doc, err := encodeIntent(new(frontDoor()))
	if err != nil {
		t.Fatal(err)
	}
	ttl := int64(60000)
	leased, err := c.Client().Put(ctx, wire.PutRequest{Namespace: svcNS, Key: intentKey, Schema: schema.MediaIntentV1,
		Document: doc, TTLMs: &ttl})
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision <= leased.Revision || e.TTLMs != 0 || e.ExpiresAtMs != 0 {
		t.Fatalf("PutIntent of the same document over a leased intent: %+v, want a write without a lease", e)
	}
	if got := mustGet(t, c, svcNS, intentKey); got.TTLMs != 0 || got.Revision != e.Revision {
		t.Fatalf("stored %+v, want the entry without a lease", got)
	}
}

// UpdateIntent refuses a nil function, and an error of fn ends it, returned as it is, without a
// write (UpdateIntent doc).
func TestUpdateIntentFunctionErrors(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	created, err := c.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateIntent(ctx, svcNS, intentKey, nil); err == nil {
		t.Fatal("UpdateIntent with a nil function succeeded")
	}
	mine := errors.New("the merge refuses")
	calls := 0
	_, err = c.UpdateIntent(ctx, svcNS, intentKey, func(cur *MediaIntent) (*MediaIntent, error) {
		calls++
		cur.Desired = false
		return cur, mine
	})
	if !errors.Is(err, mine) || calls != 1 {
		t.Fatalf("UpdateIntent whose fn fails = %v after %d calls, want fn's error after one", err, calls)
	}
	if e := mustGet(t, c, svcNS, intentKey); e.Revision != created.Revision {
		t.Fatalf("a failed UpdateIntent wrote: %+v", e)
	}
}

// DeleteIntent with an expected revision above 2^53-1 is INVALID_ARGUMENT and deletes nothing; on
// a key holding an intent at another revision it is CONFLICT (DeleteIntent doc).
func TestDeleteIntentExpectedRevisionBounds(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	created, err := c.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteIntent(ctx, svcNS, intentKey, wire.MaxSafeInteger+1)
	wantCode(t, err, wire.CodeInvalidArgument, "DeleteIntent above 2^53-1")
	_, err = c.DeleteIntent(ctx, svcNS, intentKey, created.Revision+1)
	wantCode(t, err, wire.CodeConflict, "DeleteIntent at a revision the intent does not have")
	if e := mustGet(t, c, svcNS, intentKey); e.Revision != created.Revision {
		t.Fatalf("a refused DeleteIntent changed the entry: %+v", e)
	}
}

// PutPreference does not replace another schema's entry (ErrWrongSchema), and an equal preference is
// not written again (PutPreference doc).
func TestPutPreferenceWrongSchemaAndIdempotence(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	alice := newCoordinator(t, env, "alice")
	ctx := ctxT(t)
	const ns = "user/alice"
	intent, err := alice.PutIntent(ctx, ns, "intents/cam", SubscribeIntent("front-door", MediaKindVideo))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.PutPreference(ctx, ns, "intents/cam", Preference{Kind: "layout"}); !errors.Is(err, ErrWrongSchema) {
		t.Fatalf("PutPreference over an intent = %v, want ErrWrongSchema", err)
	}
	if e := mustGet(t, alice, ns, "intents/cam"); e.Revision != intent.Revision || e.Schema != schema.MediaIntentV1 {
		t.Fatalf("the intent changed: %+v", e)
	}
	pref := Preference{Kind: "layout", Layout: "grid"}
	first, err := alice.PutPreference(ctx, ns, "prefs/layout", pref)
	if err != nil {
		t.Fatal(err)
	}
	again, err := alice.PutPreference(ctx, ns, "prefs/layout", pref)
	if err != nil || again.Revision != first.Revision {
		t.Fatalf("an equal preference: %+v, %v; want the stored entry at revision %d", again, err, first.Revision)
	}
}

// New refuses a nil client; Client returns the one given (New, Client docs).
func TestNewAndClient(t *testing.T) {
	if c, err := New(nil); err == nil || c != nil {
		t.Fatalf("New(nil) = %v, %v", c, err)
	}
	cl := mustOfflineClient(t)
	c, err := New(cl)
	if err != nil || c.Client() != cl {
		t.Fatalf("New: %v, client %p want %p", err, c.Client(), cl)
	}
}

// The fleet view hands out copies: the caller owns what Workers, Worker and Holder return, and
// changing it changes nothing in the view (Workers doc).
func TestFleetViewHandsOutCopies(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	heartbeat(t, env.Connect(t, "alice"), "alice", wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", IntervalMs: 60000,
		Status: wire.StatusReady, Leases: []string{"leases/a"}})
	v, err := c.WatchFleet(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = v.Close() }()
	awaitView(t, v, "w1", func() bool { return v.Alive("alice", "w1") })
	ws := v.Workers()
	ws[0].Leases[0] = "leases/changed"
	w, _ := v.Worker("alice", "w1")
	w.Leases[0] = "leases/changed"
	h, _ := v.Holder("leases/a")
	h.Leases[0] = "leases/changed"
	if got, ok := v.Holder("leases/a"); !ok || got.Leases[0] != "leases/a" {
		t.Fatalf("changing what the view handed out changed the view: %+v, %v", got, ok)
	}
}

// WatchFleet returns WATCH_TOO_BROAD at once for a fleet over the snapshot bound, while Fleet, which
// pages, lists it (WatchFleet, FleetView docs).
func TestWatchFleetTooBroad(t *testing.T) {
	bounds := wire.DefaultBounds()
	bounds.MaxSnapshotEntries = 1
	env := testenv.Start(t, testenv.Options{Bounds: &bounds})
	c := newCoordinator(t, env, "coordinator")
	nc := env.Connect(t, "alice")
	for _, id := range []string{"w1", "w2"} {
		heartbeat(t, nc, "alice", wire.Heartbeat{WorkerID: id, Service: "transcoder-a", IntervalMs: 60000,
			Status: wire.StatusReady, Leases: []string{}})
	}
	ctx := ctxT(t)
	deadline := time.Now().Add(testTimeout)
	for { // heartbeats become entries asynchronously: no event tells, poll, bounded
		fleet, err := c.Fleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(fleet) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fleet = %+v, want both workers", fleet)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v, err := c.WatchFleet(ctx); !errors.Is(err, wire.ErrWatchTooBroad) {
		if v != nil {
			_ = v.Close()
		}
		t.Fatalf("WatchFleet over the snapshot bound = %v, want WATCH_TOO_BROAD", err)
	}
}

// Fleet shows each worker's current deadline, which heartbeats that change nothing push forward
// without an update (Worker.ExpiresAtMs doc).
func TestFleetShowsTheCurrentDeadline(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	nc := env.Connect(t, "alice")
	hb := wire.Heartbeat{WorkerID: "w1", Service: "transcoder-a", Sequence: 1, IntervalMs: 60000, Status: wire.StatusReady, Leases: []string{}}
	heartbeat(t, nc, "alice", hb)
	ctx := ctxT(t)
	v, err := c.WatchFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = v.Close() }()
	awaitView(t, v, "w1", func() bool { return v.Alive("alice", "w1") })
	first, _ := v.Worker("alice", "w1")
	deadline := time.Now().Add(testTimeout)
	for { // a keepalive sends no update: poll Fleet, bounded
		hb.Sequence++
		heartbeat(t, nc, "alice", hb)
		fleet, err := c.Fleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(fleet) == 1 && fleet[0].ExpiresAtMs > first.ExpiresAtMs {
			if fleet[0].Revision != first.Revision {
				t.Fatalf("a keepalive changed the revision: %+v after %+v", fleet[0], first)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fleet = %+v: the deadline never moved past %d", fleet, first.ExpiresAtMs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WatchFleet retries while no state server answers, until its ctx ends, and then returns ctx's error
// (WatchFleet doc).
func TestWatchFleetRetriesUntilItsContextEnds(t *testing.T) {
	nc, err := client.Connect(natstest.Start(t, natsserver.Options{}).ClientURL(), "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := coordinatorOn(t, nc, "coordinator")
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if v, err := c.WatchFleet(ctx); !errors.Is(err, context.DeadlineExceeded) {
		if v != nil {
			_ = v.Close()
		}
		t.Fatalf("WatchFleet while no state server answers = %v, want its ctx's deadline", err)
	}
}

// ValidateIntent cannot know the server's max_document_bytes (ValidateIntent doc): a document over
// it is TOO_LARGE at the server, checked before the schema; here it passes if it is valid, and is
// SCHEMA_INVALID if it also breaks the schema.
func TestValidateIntentKnowsNoDocumentBound(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	big := frontDoor()
	big.Parameters = params(t, "transcoder-a", `{"notes":"`+strings.Repeat("a few words ", 1700)+`"}`) // ~20 KB
	if err := c.ValidateIntent(svcNS, big); err != nil {
		t.Fatalf("ValidateIntent of a valid intent over the server's bound = %v, want nil", err)
	}
	_, err := c.PutIntent(ctx, svcNS, intentKey, big)
	wantCode(t, err, wire.CodeTooLarge, "PutIntent over the server's bound")
	bad := big
	bad.RecordingMode = ""
	wantCode(t, c.ValidateIntent(svcNS, bad), wire.CodeSchemaInvalid, "ValidateIntent of an invalid intent over the bound")
	doc, err := encodeIntent(&bad)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Client().Put(ctx, wire.PutRequest{Namespace: svcNS, Key: intentKey, Schema: schema.MediaIntentV1, Document: doc})
	wantCode(t, err, wire.CodeTooLarge, "the server, for the invalid intent over its bound")
}

// SetDesired that changes the flag writes without a lease, as every UpdateIntent write: an intent
// stored with a TTL no longer expires (SetDesired doc).
func TestSetDesiredWritesWithoutALease(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	doc, err := encodeIntent(new(frontDoor()))
	if err != nil {
		t.Fatal(err)
	}
	ttl := int64(60000)
	if _, err := c.Client().Put(ctx, wire.PutRequest{Namespace: svcNS, Key: intentKey, Schema: schema.MediaIntentV1,
		Document: doc, TTLMs: &ttl}); err != nil {
		t.Fatal(err)
	}
	e, err := c.SetDesired(ctx, svcNS, intentKey, false)
	if err != nil {
		t.Fatal(err)
	}
	want := frontDoor()
	want.Desired = false
	if got := intentOf(t, e); e.TTLMs != 0 || got.Desired || got.VariantID != want.VariantID || *got.Priority != *want.Priority {
		t.Fatalf("SetDesired(false) stored %+v %s, want the same intent, not desired, without a lease", e, e.Document)
	}
}

// A NATS connection closed for good is returned at once by WatchFleet, not retried until ctx ends
// (WatchFleet doc); and a view whose connection closes closes Changes while Err stays nil (FleetView.Err
// and Changes docs).
func TestWatchFleetOverAClosedConnection(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "coordinator")
	c := coordinatorOn(t, nc, "coordinator")
	v, err := c.WatchFleet(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	nc.Close()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for open := true; open; {
		select {
		case _, open = <-v.Changes():
		case <-timer.C:
			t.Fatal("Changes not closed after the connection closed")
		}
	}
	if v.Following() || v.Err() != nil {
		t.Fatalf("a view whose connection closed: Following %v, Err %v; want false, nil", v.Following(), v.Err())
	}

	ctx, cancel := context.WithTimeout(ctxT(t), testTimeout)
	defer cancel()
	start := time.Now()
	if v2, err := c.WatchFleet(ctx); !errors.Is(err, nats.ErrConnectionClosed) {
		if v2 != nil {
			_ = v2.Close()
		}
		t.Fatalf("WatchFleet over a closed connection = %v, want nats.ErrConnectionClosed", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("WatchFleet over a closed connection waited for its ctx (%v)", time.Since(start))
	}
}
