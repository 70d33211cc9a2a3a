package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store/wire"
)

// These tests need no server: the reply mapping, the watch message checks and the cache's sequence
// logic are pure.

func TestParseResultOK(t *testing.T) {
	res, err := parseResult(wire.OpGet, 7, []byte(`{"request_id":7,"ok":true,"entry":{"namespace":"user/alice","key":"k","schema":"s","owner":"alice","revision":3,"created_at_ms":1,"updated_at_ms":2,"document":{"a":1}}}`))
	if err != nil {
		t.Fatalf("parseResult: %v", err)
	}
	if res.Entry == nil || res.Entry.Revision != 3 || string(res.Entry.Document) != `{"a":1}` {
		t.Fatalf("entry = %+v", res.Entry)
	}
}

func TestParseResultErrorCodes(t *testing.T) {
	for _, code := range wire.Codes {
		t.Run(string(code), func(t *testing.T) {
			body := `{"request_id":9,"ok":false,"error":{"code":"` + string(code) + `","message":"m"}}`
			_, err := parseResult(wire.OpPut, 9, []byte(body))
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != code || we.Message != "m" {
				t.Fatalf("err = %#v, want *wire.Error %s", err, code)
			}
			if !errors.Is(err, &wire.Error{Code: code}) {
				t.Fatalf("errors.Is(%v, %s) = false", err, code)
			}
			for _, other := range wire.Codes {
				if other != code && errors.Is(err, &wire.Error{Code: other}) {
					t.Fatalf("errors.Is(%v, %s) = true", err, other)
				}
			}
		})
	}
}

func TestParseResultConflictCarriesCurrentRevision(t *testing.T) {
	for _, cur := range []uint64{0, 41} {
		body := []byte(`{"request_id":1,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_CONFLICT","message":"x","current_revision":` +
			strconv.FormatUint(cur, 10) + `}}`)
		_, err := parseResult(wire.OpPut, 1, body)
		var we *wire.Error
		if !errors.As(err, &we) || !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("err = %v, want CONFLICT", err)
		}
		if we.CurrentRevision == nil || *we.CurrentRevision != cur {
			t.Fatalf("current_revision = %v, want %d", we.CurrentRevision, cur)
		}
	}
}

// TestRepliesTolerateNewFields: a newer server may add fields to replies and updates; the client
// ignores them (requests are what the server decodes strictly).
func TestRepliesTolerateNewFields(t *testing.T) {
	if _, err := parseResult(wire.OpGet, 7, []byte(`{"request_id":7,"ok":true,"surprise":1}`)); err != nil {
		t.Fatalf("reply with a new field: %v", err)
	}
	if _, err := decodeWatchMessage("w", []byte(`{"watch_id":"w","watch_sequence":1,"revision":5,"kind":"DELETE","key":"a","x":1}`)); err != nil {
		t.Fatalf("update with a new field: %v", err)
	}
}

func TestParseResultProtocolErrors(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":                 `nope`,
		"request_id not echoed":    `{"request_id":8,"ok":true}`,
		"request_id 0 on an error": `{"request_id":0,"ok":false,"error":{"code":"STATE_STORE_ERROR_CODE_INVALID_ARGUMENT","message":"m"}}`,
		"not ok, no error":         `{"request_id":7,"ok":false}`,
		"trailing data":            `{"request_id":7,"ok":true} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseResult(wire.OpGet, 7, []byte(body))
			if err == nil {
				t.Fatal("no error")
			}
			if wire.CodeOf(err) != "" {
				t.Fatalf("a protocol error must not pose as a wire error: %#v", err)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	nc := &nats.Conn{} // never used: New only stores it
	if _, err := New(nil, "alice"); err == nil {
		t.Error("New(nil conn) succeeded")
	}
	for _, p := range []string{"", "Alice", "a.b", "-a", strings.Repeat("a", 64)} {
		if _, err := New(nc, p); !errors.Is(err, wire.ErrInvalidArgument) {
			t.Errorf("New(%q) err = %v, want INVALID_ARGUMENT", p, err)
		}
	}
	for _, p := range []string{"", "kp.", ".kp", "k*", "a.>", "k p"} {
		if _, err := New(nc, "alice", WithPrefix(p)); err == nil {
			t.Errorf("WithPrefix(%q) accepted", p)
		}
	}
	if _, err := New(nc, "alice", WithRequestTimeout(0)); err == nil {
		t.Error("WithRequestTimeout(0) accepted")
	}
	c, err := New(nc, "alice", WithPrefix("acme.kp"), WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c.Principal() != "alice" || c.requestSubject(wire.OpPut) != "acme.kp.state.v1.alice.put" ||
		c.watchSubject("w1") != "acme.kp.watch.v1.alice.w1" {
		t.Fatalf("principal %q, subjects %q %q", c.Principal(), c.requestSubject(wire.OpPut), c.watchSubject("w1"))
	}
	if a, b := c.nextID(), c.nextID(); a < 1 || b != a+1 {
		t.Fatalf("request ids %d, %d", a, b)
	}
}

func TestConnectRejectsInvalidPrincipal(t *testing.T) {
	if _, err := Connect("nats://127.0.0.1:1", "not.one.token"); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
	}
}

func TestDecodeWatchMessage(t *testing.T) {
	good := map[string]string{
		"put":    `{"watch_id":"w","watch_sequence":1,"revision":5,"kind":"PUT","key":"a","entry":{"namespace":"user/alice","key":"a","schema":"s","owner":"alice","revision":5,"created_at_ms":1,"updated_at_ms":1,"document":{}}}`,
		"delete": `{"watch_id":"w","watch_sequence":2,"revision":6,"kind":"DELETE","key":"a"}`,
		"expire": `{"watch_id":"w","watch_sequence":3,"revision":7,"kind":"EXPIRE","key":"a"}`,
		"closed": `{"watch_id":"w","kind":"CLOSED","reason":"OVERFLOW","message":"m"}`,
	}
	for name, body := range good {
		if _, err := decodeWatchMessage("w", []byte(body)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]string{
		"not JSON":         `{`,
		"other watch":      `{"watch_id":"x","watch_sequence":1,"revision":5,"kind":"DELETE","key":"a"}`,
		"unknown kind":     `{"watch_id":"w","watch_sequence":1,"revision":5,"kind":"MOVE","key":"a"}`,
		"put no entry":     `{"watch_id":"w","watch_sequence":1,"revision":5,"kind":"PUT","key":"a"}`,
		"delete entry":     `{"watch_id":"w","watch_sequence":1,"revision":5,"kind":"DELETE","key":"a","entry":{"namespace":"user/alice","key":"a","schema":"s","owner":"alice","revision":5,"created_at_ms":1,"updated_at_ms":1,"document":{}}}`,
		"no sequence":      `{"watch_id":"w","revision":5,"kind":"DELETE","key":"a"}`,
		"no key":           `{"watch_id":"w","watch_sequence":1,"revision":5,"kind":"EXPIRE"}`,
		"closed no reason": `{"watch_id":"w","kind":"CLOSED"}`,
	}
	for name, body := range bad {
		if _, err := decodeWatchMessage("w", []byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func entry(key string, rev uint64) *wire.Entry {
	return &wire.Entry{Namespace: "user/alice", Key: key, Schema: "s", Owner: "alice", Revision: rev, Document: []byte(`{}`)}
}

func update(seq, rev uint64, kind wire.UpdateKind, key string) *wire.WatchMessage {
	m := &wire.WatchMessage{WatchID: "w", WatchSequence: seq, Revision: rev, Kind: kind, Key: key}
	if kind == wire.UpdatePut {
		m.Entry = entry(key, rev)
	}
	return m
}

func TestTrackerAppliesOnlyTheNextSequence(t *testing.T) {
	tr := newTracker(&wire.WatchState{WatchID: "w", Namespace: "user/alice", KeyPrefix: "p/", SnapshotRevision: 10})
	steps := []struct {
		m    *wire.WatchMessage
		want verdict
	}{
		{update(1, 11, wire.UpdatePut, "p/a"), apply},
		{update(2, 14, wire.UpdateDelete, "p/a"), apply}, // a revision skip (other keys) is harmless
		{update(3, 15, wire.UpdateExpire, "p/b"), apply},
	}
	for i, s := range steps {
		if v, err := tr.check(s.m); v != s.want {
			t.Fatalf("step %d: verdict %d (%v), want %d", i, v, err, s.want)
		}
	}
	if tr.seq != 3 || tr.rev != 15 {
		t.Fatalf("tracker at seq %d rev %d, want 3 and 15", tr.seq, tr.rev)
	}
}

func TestTrackerResyncs(t *testing.T) {
	base := func() tracker {
		tr := newTracker(&wire.WatchState{WatchID: "w", Namespace: "user/alice", KeyPrefix: "p/", SnapshotRevision: 10})
		if v, err := tr.check(update(1, 11, wire.UpdatePut, "p/a")); v != apply {
			t.Fatalf("first update: %v", err)
		}
		return tr
	}
	wrongNS := update(2, 12, wire.UpdatePut, "p/a")
	wrongNS.Entry.Namespace = "user/bob"
	wrongRev := update(2, 12, wire.UpdatePut, "p/a")
	wrongRev.Entry.Revision = 11
	wrongKey := update(2, 12, wire.UpdatePut, "p/a")
	wrongKey.Entry.Key = "p/b"
	entryOnDelete := update(2, 12, wire.UpdateDelete, "p/a")
	entryOnDelete.Entry = entry("p/a", 12)
	otherWatch := update(2, 12, wire.UpdateDelete, "p/a")
	otherWatch.WatchID = "x"
	for name, m := range map[string]*wire.WatchMessage{
		"gap":                 update(3, 12, wire.UpdatePut, "p/a"),
		"repeat":              update(1, 12, wire.UpdatePut, "p/a"),
		"revision not higher": update(2, 11, wire.UpdatePut, "p/a"),
		"outside prefix":      update(2, 12, wire.UpdatePut, "q/a"),
		"entry of other ns":   wrongNS,
		"entry revision":      wrongRev,
		"entry key":           wrongKey,
		"entry on delete":     entryOnDelete,
		"other watch":         otherWatch,
		"closed":              {WatchID: "w", Kind: wire.UpdateClosed, Reason: wire.CloseOverflow},
		"unknown kind":        {WatchID: "w", WatchSequence: 2, Revision: 12, Kind: "MOVE", Key: "p/a"},
	} {
		tr := base()
		if v, err := tr.check(m); v != resync || err == nil {
			t.Errorf("%s: verdict %d, err %v; want resync", name, v, err)
		}
		if tr.seq != 1 || tr.rev != 11 {
			t.Errorf("%s: a rejected update moved the tracker to seq %d rev %d", name, tr.seq, tr.rev)
		}
	}
}

func TestTrackerSkipsLeftoversOfThePreviousIncarnation(t *testing.T) {
	tr := newTracker(&wire.WatchState{WatchID: "w", Namespace: "user/alice", SnapshotRevision: 10})
	// The old watch's sequence 1, 2 (revisions in the snapshot already) arrive before the new one's.
	for _, m := range []*wire.WatchMessage{update(1, 9, wire.UpdatePut, "a"), update(2, 10, wire.UpdateDelete, "a")} {
		if v, err := tr.check(m); v != skip {
			t.Fatalf("leftover %d: verdict %d (%v), want skip", m.WatchSequence, v, err)
		}
	}
	if v, err := tr.check(update(1, 11, wire.UpdatePut, "a")); v != apply {
		t.Fatalf("first update of the new watch: verdict %d (%v)", v, err)
	}
	// Once this incarnation has applied an update, an old revision is no leftover but an error.
	if v, _ := tr.check(update(2, 10, wire.UpdatePut, "a")); v != resync {
		t.Fatalf("stale revision after the first update: verdict %d, want resync", v)
	}
}

func TestCheckSnapshot(t *testing.T) {
	ok := &wire.WatchState{WatchID: "w", Namespace: "user/alice", KeyPrefix: "p/", SnapshotRevision: 5,
		Entries: []wire.Entry{*entry("p/a", 2), *entry("p/b", 5)}}
	if err := checkSnapshot(ok); err != nil {
		t.Fatalf("good snapshot: %v", err)
	}
	for name, es := range map[string][]wire.Entry{
		"outside prefix": {*entry("q/a", 2)},
		"too new":        {*entry("p/a", 6)},
		"out of order":   {*entry("p/b", 2), *entry("p/a", 3)},
		"repeated":       {*entry("p/a", 2), *entry("p/a", 3)},
		"other ns":       {{Namespace: "user/bob", Key: "p/a", Revision: 1}},
	} {
		ws := *ok
		ws.Entries = es
		if err := checkSnapshot(&ws); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTransient(t *testing.T) {
	for _, err := range []error{wire.Errorf(wire.CodeUnavailable, "x"), wire.Errorf(wire.CodeWatchExists, "x"),
		nats.ErrTimeout, fmt.Errorf("request: %w", context.DeadlineExceeded)} {
		if !transient(err) {
			t.Errorf("transient(%v) = false", err)
		}
	}
	for _, err := range []error{wire.Errorf(wire.CodePermissionDenied, "x"), wire.Errorf(wire.CodeWatchTooBroad, "x"),
		wire.Errorf(wire.CodeInvalidArgument, "x"), nats.ErrConnectionClosed, errors.New("protocol")} {
		if transient(err) {
			t.Errorf("transient(%v) = true", err)
		}
	}
}
