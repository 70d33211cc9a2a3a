package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// A watch the server closed is gone and its id free again (SPEC 7.6): a Watch that received the
// CLOSED message must not unwatch that id on Stop, for it may by then name a newer registration.
func TestStopAfterCloseLeavesANewerWatchOfTheSameID(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	old, err := c.Watch(ctx, wire.WatchRequest{WatchID: "same", Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if !env.Store.CloseWatch(alice, "same", wire.CloseOverflow, "test") {
		t.Fatal("the watch was not live")
	}
	if m := recv(t, old.Messages()); m.Kind != wire.UpdateClosed {
		t.Fatalf("message %+v, want CLOSED", m)
	}
	waitClosed(t, old.Messages())
	fresh, err := c.Watch(ctx, wire.WatchRequest{WatchID: "same", Namespace: ns})
	if err != nil {
		t.Fatalf("watch again with the freed id: %v", err)
	}
	defer func() { _ = fresh.Stop(ctxT(t)) }()
	if err := old.Stop(ctx); err != nil {
		t.Fatalf("Stop of the closed watch: %v", err)
	}
	// The newer watch is still live: an ack of its (empty) progress is accepted, and it gets updates.
	if err := c.Ack(ctx, "same", 0); err != nil {
		t.Fatalf("the newer watch is gone after the old one's Stop: %v", err)
	}
	e, err := c.Put(ctx, preference(ns, "k", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, fresh.Messages()); m.Kind != wire.UpdatePut || m.Revision != e.Revision {
		t.Fatalf("newer watch got %+v, want the PUT at %d", m, e.Revision)
	}
	if err := fresh.Stop(ctx); err != nil {
		t.Fatalf("Stop of the newer watch: %v", err)
	}
	if err := c.Ack(ctx, "same", 1); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("ack after the newer watch's Stop: %v, want NOT_FOUND", err)
	}
}

// A document that is not JSON is INVALID_ARGUMENT (SPEC section 5, check 1) whether the client or
// the server finds it: callers match it with errors.Is like any other answer, and nothing is sent.
func TestPutOfMalformedDocumentIsInvalidArgument(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	for _, doc := range []string{`{"kind":`, `not json`, ``} {
		req := preference(ns, "k", "x")
		req.Document = []byte(doc)
		if _, err := c.Put(ctx, req); !errors.Is(err, wire.ErrInvalidArgument) {
			t.Errorf("put of document %q: %v, want INVALID_ARGUMENT", doc, err)
		}
	}
	if _, err := c.Get(ctx, ns, "k"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("get after the refused puts: %v, want NOT_FOUND", err)
	}
}

// A watch asked for with a context that has already ended is not sent at all: it fails with the
// context's error and leaves nothing on the server, so the id is free for the next request at once.
func TestWatchWithAnEndedContextSendsNothing(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 20 {
		id := fmt.Sprintf("ended-%d", i)
		if _, err := c.Watch(ended, wire.WatchRequest{WatchID: id, Namespace: "user/alice"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("watch with an ended context: %v, want context.Canceled", err)
		}
		w, err := c.Watch(ctx, wire.WatchRequest{WatchID: id, Namespace: "user/alice"})
		if err != nil {
			t.Fatalf("watch %s right after the one given up: %v", id, err)
		}
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	awaitNoWatches(t, env)
}

// A watch request given up registers its watch late, and the client unwatches that registration in
// the background. A new watch of the same id by the same client must not be removed by that late
// unwatch: sent while it is in flight, WATCH_EXISTS, then the caller's unwatch and watch again (as
// the package doc says to) would register a watch that the late unwatch then removes, leaving the
// caller a watch the server no longer holds. The new request waits for the late unwatch instead.
func TestLateUnwatchLeavesANewWatchOfTheSameID(t *testing.T) {
	env := startEnv(t)
	ctx := ctxT(t)
	const ns = "user/alice"
	late := startLateRegistration(t, env, wire.WatchRequest{WatchID: "same", Namespace: ns})
	type result struct {
		w   *Watch
		err error
	}
	second := make(chan result, 1)
	go func() { w, err := late.c.Watch(ctx, late.req); second <- result{w, err} }()
	select {
	case <-late.waiting: // the new request waits for the late unwatch
	case <-ctx.Done():
		t.Fatal("the new watch request never waited for the late unwatch")
	}
	close(late.release)
	res := <-second
	if res.err != nil {
		t.Fatalf("watch after the late unwatch: %v", res.err)
	}
	w := res.w
	defer func() { _ = w.Stop(ctx) }()
	select {
	case <-late.done:
	case <-ctx.Done():
		t.Fatal("the late unwatch was never answered")
	}
	if err := late.c.Ack(ctx, late.req.WatchID, 0); err != nil {
		t.Fatalf("the new watch is gone after the late unwatch of the old one: %v", err)
	}
	e, err := late.c.Put(ctx, preference(ns, "k", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, w.Messages()); m.Kind != wire.UpdatePut || m.Revision != e.Revision {
		t.Fatalf("new watch got %+v, want the PUT at %d", m, e.Revision)
	}
}

// endsAfterFirstCheck is a context that is live when its Err is first asked and ends right after:
// a context that ends between two of the client's checks of it.
type endsAfterFirstCheck struct {
	context.Context
	cancel context.CancelFunc
	once   sync.Once
}

func newEndsAfterFirstCheck(parent context.Context) *endsAfterFirstCheck {
	ctx, cancel := context.WithCancel(parent)
	return &endsAfterFirstCheck{Context: ctx, cancel: cancel}
}

func (c *endsAfterFirstCheck) Err() error {
	err := c.Context.Err()
	c.once.Do(c.cancel)
	return err
}

// A watch request given up is reaped when its late reply says it registered the watch. A later
// request for the same id, itself given up while the first is unanswered (on the wire, or with a
// context that ends before it is sent), must not keep that from happening: sent meanwhile, it would
// be answered WATCH_EXISTS because of the first one's registration, and nobody would unwatch it; the
// watch would hold the id and one of the principal's watch slots, idle, for good.
func TestAWatchRequestGivenUpIsReapedWhenTheNextIsGivenUpToo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second func(t *testing.T, secondSent <-chan struct{}) context.Context
	}{
		{"the next one ends on the wire or while it waits", func(t *testing.T, secondSent <-chan struct{}) context.Context {
			// Bounded: a client that holds the request back while the first is unanswered gives up
			// at the deadline without sending anything.
			ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
			t.Cleanup(cancel)
			go func() {
				select {
				case <-secondSent:
					cancel()
				case <-ctx.Done():
				}
			}()
			return ctx
		}},
		{"the next one ends between the client's checks", func(t *testing.T, _ <-chan struct{}) context.Context {
			return newEndsAfterFirstCheck(ctxT(t))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startEnv(t)
			const ns = "user/alice"
			firstSent, registered, releaseFirst := make(chan struct{}), make(chan struct{}), make(chan struct{})
			secondSent := make(chan struct{})
			var r *relay
			r = startRelay(t, env.URL, relayHooks{
				before: func(op wire.Op, n int) bool {
					switch {
					case op == wire.OpWatch && n == 1:
						close(firstSent) // on the wire: its caller gives up now
					case op == wire.OpWatch && n == 2:
						close(secondSent)
					}
					return true
				},
				after: func(op wire.Op, n int, _ []byte) bool {
					if op == wire.OpWatch && n == 1 { // registered; its reply is held back
						close(registered)
						select {
						case <-releaseFirst:
						case <-r.stopped:
						}
					}
					return true
				},
			})
			c := newClient(t, env, alice.ID, WithPrefix(relayPrefix))
			req := wire.WatchRequest{WatchID: "same", Namespace: ns}
			first, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			go func() {
				<-firstSent
				cancel()
			}()
			if _, err := c.Watch(first, req); !errors.Is(err, context.Canceled) {
				t.Fatalf("first watch: %v, want context.Canceled", err)
			}
			select {
			case <-registered:
			case <-time.After(testTimeout):
				t.Fatal("the first watch request was not answered")
			}
			if w, err := c.Watch(tc.second(t, secondSent), req); err == nil {
				_ = w.Stop(ctxT(t))
				t.Fatal("the second watch succeeded with a context that ended before any reply")
			}
			close(releaseFirst)
			awaitNoWatches(t, env)
			// And the id is free for the next caller.
			w, err := c.Watch(ctxT(t), req)
			if err != nil {
				t.Fatalf("watch after both were given up: %v", err)
			}
			if err := w.Stop(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A put whose document is too large for a NATS message is TOO_LARGE (SPEC section 8), as the server
// would answer it: the server's max_document_bytes always fits max_payload (stated refuses bounds
// that do not), so a request NATS cannot carry holds a document over the bound. Callers match it with
// errors.Is like any other answer, and nothing is sent.
func TestPutOverTheNATSPayloadIsTooLarge(t *testing.T) {
	env := startEnv(t)
	c := newClient(t, env, alice.ID)
	ctx := ctxT(t)
	const ns = "user/alice"
	req := preference(ns, "k", strings.Repeat("x", int(c.Conn().MaxPayload())))
	_, err := c.Put(ctx, req)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeTooLarge || !strings.Contains(we.Message, "max_payload") {
		t.Fatalf("put of a document over max_payload: %#v, want a *wire.Error TOO_LARGE naming max_payload", err)
	}
	if _, err := c.Get(ctx, ns, "k"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("get after the refused put: %v, want NOT_FOUND", err)
	}
}
