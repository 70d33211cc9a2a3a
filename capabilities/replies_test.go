package capabilities_test

import (
	"errors"
	"testing"

	"github.com/keeppeek/coordination/capabilities"
)

// A bare reply in the shape of an error ({code, message}) whose code is missing or empty is a
// protocol error: it was never a success. Read as a bare result it made a refused unsubscribe or
// stop_publication look done, and the worker went on believing the publication gone.
func TestBareErrorWithoutACodeIsNoSuccess(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	c, err := capabilities.NewCommands(connect(t, url), "alice")
	if err != nil {
		t.Fatal(err)
	}
	replies := []string{`{"code":"","message":"overloaded"}`, `{"message":"overloaded"}`, `{"code":null,"message":"overloaded"}`, `{"code":""}`}
	srv.answer(t, capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandStopPublication), replies...)
	srv.answer(t, capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandUnsubscribe), replies...)
	for _, r := range replies {
		if err := c.StopPublication(ctxT(t), "pub-1"); err == nil {
			t.Errorf("StopPublication answered %s: success, want a protocol error", r)
		}
		if err := c.Unsubscribe(ctxT(t), "sub-1"); err == nil {
			t.Errorf("Unsubscribe answered %s: success, want a protocol error", r)
		}
	}
}

// A failed reply whose error travels flat beside "ok" ({"ok": false, "code": ..., "message": ...}) keeps
// its code: a flat JSON object is how SPEC writes replies.
func TestFlatErrorBesideOK(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	c, err := capabilities.NewCommands(connect(t, url), "alice")
	if err != nil {
		t.Fatal(err)
	}
	srv.answer(t, capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandStopPublication),
		`{"ok":false,"code":"PUBLICATION_ERROR_CODE_NOT_FOUND","message":"no pub-1"}`, `{"ok":false,"message":"no pub-1"}`)
	if err := c.StopPublication(ctxT(t), "pub-1"); !errors.Is(err, capabilities.ErrPublicationNotFound) {
		t.Errorf("StopPublication answered a flat error = %v, want ErrPublicationNotFound", err)
	}
	if err := c.StopPublication(ctxT(t), "pub-1"); err == nil || capabilities.CodeOf(err) != "" {
		t.Errorf("StopPublication answered not ok without a code = %v, want a protocol error", err)
	}
}

// A bare result may carry a message of its own: it stays a result.
func TestBareResultWithAMessage(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	c, err := capabilities.NewCommands(connect(t, url), "alice")
	if err != nil {
		t.Fatal(err)
	}
	srv.answer(t, capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandSubscribe),
		`{"subscription_id":"sub-1","variant_id":"source","message":"subscribed"}`)
	if r, err := c.Subscribe(ctxT(t), capabilities.SubscribeRequest{SessionID: "s", StreamID: "video"}); err != nil || r.SubscriptionID != "sub-1" {
		t.Errorf("Subscribe answered a result with a message = %+v, %v", r, err)
	}
}

// A reply that says ok and also carries an error code is a protocol error, whether the error is an
// object ({"ok": true, "error": {...}}) or flat beside "ok" ({"ok": true, "code": ...}): it says two
// things, and a refused stop_publication must never be read as done.
func TestOKWithAFlatErrorCodeIsNoSuccess(t *testing.T) {
	url := startNATS(t)
	srv := newCannedServer(t, url)
	c, err := capabilities.NewCommands(connect(t, url), "alice")
	if err != nil {
		t.Fatal(err)
	}
	replies := []string{
		`{"ok":true,"error":{"code":"PUBLICATION_ERROR_CODE_NOT_FOUND","message":"no pub-1"}}`,
		`{"ok":true,"code":"PUBLICATION_ERROR_CODE_NOT_FOUND","message":"no pub-1"}`,
		`{"ok":true,"code":"PUBLICATION_ERROR_CODE_NOT_FOUND"}`,
	}
	srv.answer(t, capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandStopPublication), replies...)
	for _, r := range replies {
		if err := c.StopPublication(ctxT(t), "pub-1"); err == nil {
			t.Errorf("StopPublication answered %s: success, want a protocol error", r)
		}
	}
	// ok with a message of its own (no code) stays a success.
	srv.answer(t, capabilities.CommandSubject(capabilities.DefaultPrefix, "alice", capabilities.CommandStopPublication), `{"ok":true,"message":"stopped"}`)
	if err := c.StopPublication(ctxT(t), "pub-1"); err != nil {
		t.Errorf(`StopPublication answered {"ok":true,"message":"stopped"}: %v`, err)
	}
}
