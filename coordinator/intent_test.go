package coordinator

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

const (
	svcNS     = "service/transcoder-a"
	intentKey = "intents/front-door"
)

func frontDoor() MediaIntent {
	in := PublishIntent("front-door", MediaKindVideo, RecordingDisabled)
	in.VariantID = "browser-h264-720p"
	in.OutputProfile = "browser-h264-720p"
	in.Priority = new(100)
	return in
}

func TestPutIntentCreatesThenReplaces(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)

	in := frontDoor()
	in.Parameters = params(t, "transcoder-a", `{"preset":"fast"}`)
	created, err := c.PutIntent(ctx, svcNS, intentKey, in)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.Schema != schema.MediaIntentV1 || created.Owner != "coordinator" || created.Revision == 0 || created.TTLMs != 0 {
		t.Fatalf("created entry %+v", created)
	}
	got := intentOf(t, mustGet(t, c, svcNS, intentKey))
	if got.Role != RolePublish || !got.Desired || got.SourceID != "front-door" || got.MediaKind != MediaKindVideo ||
		got.VariantID != "browser-h264-720p" || got.Priority == nil || *got.Priority != 100 ||
		got.RecordingMode != RecordingDisabled || string(got.Parameters["transcoder-a"]) != `{"preset":"fast"}` {
		t.Fatalf("stored intent %+v", got)
	}

	// Replace: the whole document is the new one; a field it leaves unset is gone.
	next := PublishIntent("front-door", MediaKindVideo, RecordingRequired)
	next.VariantID = "archive-h264-1080p"
	next.Parameters = params(t, "transcoder-a", `{"preset":"slow"}`)
	replaced, err := c.PutIntent(ctx, svcNS, intentKey, next)
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	if replaced.Revision <= created.Revision || replaced.CreatedAtMs != created.CreatedAtMs {
		t.Fatalf("replaced %+v after %+v", replaced, created)
	}
	got = intentOf(t, mustGet(t, c, svcNS, intentKey))
	if got.VariantID != "archive-h264-1080p" || got.OutputProfile != "" || got.Priority != nil ||
		got.RecordingMode != RecordingRequired || string(got.Parameters["transcoder-a"]) != `{"preset":"slow"}` {
		t.Fatalf("replaced intent %+v", got)
	}

	// The same intent again writes nothing.
	again, err := c.PutIntent(ctx, svcNS, intentKey, next)
	if err != nil || again.Revision != replaced.Revision {
		t.Fatalf("idempotent put: %+v, %v; want revision %d", again, err, replaced.Revision)
	}

	// An explicit priority 0 is kept (it is not the same as no priority).
	next.Priority = new(0)
	if _, err := c.PutIntent(ctx, svcNS, intentKey, next); err != nil {
		t.Fatalf("priority 0: %v", err)
	}
	if e := mustGet(t, c, svcNS, intentKey); !bytes.Contains(e.Document, []byte(`"priority":0`)) {
		t.Fatalf("priority 0 missing from %s", e.Document)
	}
}

// invalidIntents are intents the schema registry rejects.
func invalidIntents(t *testing.T) map[string]MediaIntent {
	noMode := frontDoor()
	noMode.RecordingMode = ""
	unknownKind := frontDoor()
	unknownKind.MediaKind = "hologram"
	badRole := frontDoor()
	badRole.Role = "steal"
	notServiceID := frontDoor()
	notServiceID.Parameters = params(t, "Transcoder A", `{}`)
	notObject := frontDoor()
	notObject.Parameters = params(t, "transcoder-a", `5`)
	password := frontDoor()
	password.Parameters = params(t, "transcoder-a", `{"rtsp":{"password":"hunter2"}}`)
	pem := frontDoor()
	pem.Parameters = params(t, "transcoder-a", `{"cert":"-----BEGIN CERTIFICATE-----"}`)
	priority := frontDoor()
	priority.Priority = new(1001)
	badSource := frontDoor()
	badSource.SourceID = "front door"
	noSource := frontDoor()
	noSource.SourceID = ""
	return map[string]MediaIntent{
		"publish without recording_mode":       noMode,
		"unknown media_kind":                   unknownKind,
		"unknown role":                         badRole,
		"parameters property not a service id": notServiceID,
		"parameters entry not an object":       notObject,
		"password inside parameters":           password,
		"PEM block inside parameters":          pem,
		"priority above 1000":                  priority,
		"source_id not an identifier":          badSource,
		"empty source_id":                      noSource,
	}
}

func TestPutIntentRejectsInvalidLocally(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	before, err := c.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if err != nil {
		t.Fatalf("create: %v", err)
	}

	// A coordinator whose connection is closed reaches no server: whatever it answers, it answered
	// locally.
	nc, err := nats.Connect(env.URL, nats.CustomInboxPrefix(wire.InboxPrefix("coordinator")))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	offline := coordinatorOn(t, nc, "coordinator")
	if _, err := offline.PutIntent(ctx, svcNS, "intents/other", frontDoor()); err == nil || wire.CodeOf(err) != "" {
		t.Fatalf("offline put of a valid intent: %v, want a connection error", err)
	}

	for name, in := range invalidIntents(t) {
		t.Run(name, func(t *testing.T) {
			_, err := c.PutIntent(ctx, svcNS, intentKey, in)
			wantCode(t, err, wire.CodeSchemaInvalid, "PutIntent")
			if !errors.Is(err, wire.ErrSchemaInvalid) {
				t.Fatalf("errors.Is(%v, ErrSchemaInvalid) is false", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error echoes a rejected value: %v", err)
			}
			_, err = offline.PutIntent(ctx, svcNS, intentKey, in)
			wantCode(t, err, wire.CodeSchemaInvalid, "offline PutIntent")
			if err := c.ValidateIntent(svcNS, in); !errors.Is(err, wire.ErrSchemaInvalid) {
				t.Fatalf("ValidateIntent: %v", err)
			}
			after := mustGet(t, c, svcNS, intentKey)
			if after.Revision != before.Revision || !bytes.Equal(after.Document, before.Document) {
				t.Fatalf("the rejected intent changed the entry: %+v, was %+v", after, before)
			}
		})
	}

	// Intents live in service and user namespaces only; malformed targets are INVALID_ARGUMENT, and
	// system, which nobody writes, PERMISSION_DENIED (the policy is checked before the schema).
	_, err = offline.PutIntent(ctx, "group/lobby", intentKey, frontDoor())
	wantCode(t, err, wire.CodeSchemaInvalid, "intent in a group namespace")
	_, err = offline.PutIntent(ctx, "system", intentKey, frontDoor())
	wantCode(t, err, wire.CodePermissionDenied, "intent in system")
	_, err = offline.PutIntent(ctx, "foo/x", intentKey, frontDoor())
	wantCode(t, err, wire.CodeInvalidArgument, "malformed namespace")
	_, err = offline.PutIntent(ctx, svcNS, "intents//x", frontDoor())
	wantCode(t, err, wire.CodeInvalidArgument, "malformed key")

	// A bad candidate from UpdateIntent is rejected the same way and writes nothing.
	_, err = c.UpdateIntent(ctx, svcNS, intentKey, func(cur *MediaIntent) (*MediaIntent, error) {
		cur.MediaKind = "smell"
		return cur, nil
	})
	wantCode(t, err, wire.CodeSchemaInvalid, "UpdateIntent with a bad candidate")
	if after := mustGet(t, c, svcNS, intentKey); after.Revision != before.Revision {
		t.Fatalf("a rejected update changed the revision to %d (was %d)", after.Revision, before.Revision)
	}
}

// The typed intent cannot carry a property the schema does not know; a stored document that did
// would not decode, rather than lose the property on rewrite. The registry rejects such a document.
func TestExtraPropertyRejected(t *testing.T) {
	c, err := New(mustOfflineClient(t))
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"role":"subscribe","desired":true,"source_id":"front-door","media_kind":"audio","owner":"mallory"}`)
	wantCode(t, c.reg.Validate(schema.MediaIntentV1, svcNS, doc), wire.CodeSchemaInvalid, "extra property")
	if _, err := decodeIntent(&wire.Entry{Document: doc}); err == nil {
		t.Fatalf("a document with an unknown property decoded")
	}
}

func TestConcurrentUpdateIntentNoLostUpdate(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	a := newCoordinator(t, env, "coordinator")
	b := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	created, err := a.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if err != nil {
		t.Fatalf("create: %v", err)
	}

	// Both read the same revision before either writes: one of them must lose the compare-and-set,
	// reread and merge again.
	var arrived, calls atomic.Int32
	bothRead := make(chan struct{})
	barrier := func(first *bool, cur *MediaIntent) error {
		calls.Add(1)
		if !*first {
			return nil
		}
		*first = false
		if cur == nil {
			return errors.New("intent missing")
		}
		if arrived.Add(1) == 2 {
			close(bothRead)
		}
		select {
		case <-bothRead:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		first := true
		_, errs[0] = a.UpdateIntent(ctx, svcNS, intentKey, func(cur *MediaIntent) (*MediaIntent, error) {
			if err := barrier(&first, cur); err != nil {
				return nil, err
			}
			cur.Priority = new(500)
			return cur, nil
		})
	})
	wg.Go(func() {
		first := true
		_, errs[1] = b.UpdateIntent(ctx, svcNS, intentKey, func(cur *MediaIntent) (*MediaIntent, error) {
			if err := barrier(&first, cur); err != nil {
				return nil, err
			}
			cur.Desired = false
			return cur, nil
		})
	})
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("updates: %v, %v", errs[0], errs[1])
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("merge ran %d times, want 3 (two first reads, one reread after the CONFLICT)", n)
	}
	e := mustGet(t, a, svcNS, intentKey)
	got := intentOf(t, e)
	if got.Priority == nil || *got.Priority != 500 || got.Desired || got.VariantID != "browser-h264-720p" {
		t.Fatalf("after both updates: %+v (a lost update)", got)
	}
	if e.Revision != created.Revision+2 {
		t.Fatalf("revision %d, want %d (two writes)", e.Revision, created.Revision+2)
	}
}

func TestPutIntentKeepsOtherServicesParameters(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	transcoder := newCoordinator(t, env, "coordinator")
	vision := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)

	in := frontDoor()
	in.Parameters = params(t, "transcoder-a", `{"preset":"fast"}`)
	if _, err := transcoder.PutIntent(ctx, svcNS, intentKey, in); err != nil {
		t.Fatal(err)
	}
	// Another coordinator adds its own service's entry (and names no other).
	other := frontDoor()
	other.Parameters = params(t, "cv-worker", `{"model":"people-v2"}`)
	if _, err := vision.PutIntent(ctx, svcNS, intentKey, other); err != nil {
		t.Fatal(err)
	}
	got := intentOf(t, mustGet(t, transcoder, svcNS, intentKey))
	if string(got.Parameters["transcoder-a"]) != `{"preset":"fast"}` || string(got.Parameters["cv-worker"]) != `{"model":"people-v2"}` {
		t.Fatalf("after the second coordinator: %s", got.Parameters)
	}

	// The first coordinator replaces its intent: its own entry changes, the other stays.
	in.Priority = new(7)
	in.Parameters = params(t, "transcoder-a", `{"preset":"slow"}`)
	if _, err := transcoder.PutIntent(ctx, svcNS, intentKey, in); err != nil {
		t.Fatal(err)
	}
	got = intentOf(t, mustGet(t, transcoder, svcNS, intentKey))
	if *got.Priority != 7 || string(got.Parameters["transcoder-a"]) != `{"preset":"slow"}` ||
		string(got.Parameters["cv-worker"]) != `{"model":"people-v2"}` || len(got.Parameters) != 2 {
		t.Fatalf("after the replace: %+v %s", got, got.Parameters)
	}

	// A nil entry removes that service's entry only.
	in.Parameters = params(t, "transcoder-a", "")
	if _, err := transcoder.PutIntent(ctx, svcNS, intentKey, in); err != nil {
		t.Fatal(err)
	}
	got = intentOf(t, mustGet(t, transcoder, svcNS, intentKey))
	if _, ok := got.Parameters["transcoder-a"]; ok || string(got.Parameters["cv-worker"]) != `{"model":"people-v2"}` {
		t.Fatalf("after removing transcoder-a: %s", got.Parameters)
	}
}

func TestSetDesired(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)

	_, err := c.SetDesired(ctx, svcNS, "intents/missing", true)
	wantCode(t, err, wire.CodeNotFound, "SetDesired on a missing key")
	if _, err := c.Client().Get(ctx, svcNS, "intents/missing"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("SetDesired created the missing intent: %v", err)
	}

	in := frontDoor()
	in.Parameters = params(t, "transcoder-a", `{"preset":"fast"}`)
	created, err := c.PutIntent(ctx, svcNS, intentKey, in)
	if err != nil {
		t.Fatal(err)
	}
	off, err := c.SetDesired(ctx, svcNS, intentKey, false)
	if err != nil || off.Revision != created.Revision+1 {
		t.Fatalf("SetDesired(false): %+v, %v", off, err)
	}
	got := intentOf(t, off)
	want := in
	want.Desired = false
	wantDoc, _ := encodeIntent(&want)
	if got.Desired || !bytes.Equal(off.Document, wantDoc) {
		t.Fatalf("after SetDesired(false): %s, want %s", off.Document, wantDoc)
	}
	same, err := c.SetDesired(ctx, svcNS, intentKey, false)
	if err != nil || same.Revision != off.Revision {
		t.Fatalf("SetDesired(false) again: %+v, %v; want no write", same, err)
	}

	// UpdateIntent's "no change" on a missing key writes nothing.
	e, err := c.UpdateIntent(ctx, svcNS, "intents/missing", func(cur *MediaIntent) (*MediaIntent, error) {
		if cur != nil {
			t.Errorf("cur of a missing key: %+v", cur)
		}
		return nil, nil
	})
	if err != nil || e.Revision != 0 {
		t.Fatalf("no-change update of a missing key: %+v, %v", e, err)
	}
}

func TestDeleteIntent(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)

	first, err := c.PutIntent(ctx, svcNS, intentKey, frontDoor())
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.SetDesired(ctx, svcNS, intentKey, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteIntent(ctx, svcNS, intentKey, first.Revision)
	wantCode(t, err, wire.CodeConflict, "delete with a stale revision")
	var we *wire.Error
	if errors.As(err, &we); we.CurrentRevision == nil || *we.CurrentRevision != second.Revision {
		t.Fatalf("CONFLICT carries %v, want current revision %d", we.CurrentRevision, second.Revision)
	}
	if e := mustGet(t, c, svcNS, intentKey); e.Revision != second.Revision {
		t.Fatalf("a refused delete changed the entry: %+v", e)
	}
	rev, err := c.DeleteIntent(ctx, svcNS, intentKey, second.Revision)
	if err != nil || rev != second.Revision+1 {
		t.Fatalf("delete at the current revision: %d, %v", rev, err)
	}
	if _, err := c.Client().Get(ctx, svcNS, intentKey); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	_, err = c.DeleteIntent(ctx, svcNS, intentKey, 0)
	wantCode(t, err, wire.CodeNotFound, "delete of a missing key")

	// Unconditional delete.
	if _, err := c.PutIntent(ctx, svcNS, intentKey, frontDoor()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteIntent(ctx, svcNS, intentKey, 0); err != nil {
		t.Fatalf("unconditional delete: %v", err)
	}

	// A key that holds another schema is neither replaced nor deleted.
	lease := wire.PutRequest{Namespace: svcNS, Key: "leases/front-door", Schema: schema.LeaseV1,
		Document: []byte(`{"holder":"w1","claimed_at_ms":1}`)}
	held, err := c.Client().Put(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteIntent(ctx, svcNS, lease.Key, 0); !errors.Is(err, ErrWrongSchema) {
		t.Fatalf("DeleteIntent of a lease: %v", err)
	}
	if _, err := c.PutIntent(ctx, svcNS, lease.Key, frontDoor()); !errors.Is(err, ErrWrongSchema) {
		t.Fatalf("PutIntent over a lease: %v", err)
	}
	if e := mustGet(t, c, svcNS, lease.Key); e.Revision != held.Revision || e.Schema != schema.LeaseV1 {
		t.Fatalf("the lease changed: %+v", e)
	}
}
