package coordinator

import (
	"encoding/json"
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// An intent another client wrote with its priority as 5.0 (an integer to JSON and to the store's
// schema, SPEC: "All integers are JSON numbers") is a valid stored intent: the typed updates must
// read it, merge and write it back, not fail on it.
func TestUpdatesReadIntegersWrittenAsDecimals(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	doc := `{"role":"publish","desired":true,"source_id":"front-door","media_kind":"video","priority":5.0,` +
		`"recording_mode":"disabled","parameters":{"cv-worker":{"fps":5.0}}}`
	if _, err := c.Client().Put(ctx, wire.PutRequest{Namespace: svcNS, Key: intentKey, Schema: schema.MediaIntentV1,
		Document: json.RawMessage(doc)}); err != nil {
		t.Fatalf("the store refused the intent: %v", err)
	}
	off, err := c.SetDesired(ctx, svcNS, intentKey, false)
	if err != nil {
		t.Fatalf("SetDesired on an intent with priority 5.0: %v", err)
	}
	got := intentOf(t, off)
	if got.Desired || got.Priority == nil || *got.Priority != 5 || string(got.Parameters["cv-worker"]) != `{"fps":5.0}` {
		t.Fatalf("after SetDesired: %s", off.Document)
	}
	in := frontDoor()
	in.Parameters = params(t, "transcoder-a", `{"preset":"fast"}`)
	e, err := c.PutIntent(ctx, svcNS, intentKey, in)
	if err != nil {
		t.Fatalf("PutIntent over an intent with priority 5.0: %v", err)
	}
	if got := intentOf(t, e); string(got.Parameters["cv-worker"]) != `{"fps":5.0}` {
		t.Fatalf("PutIntent lost another service's parameters: %s", e.Document)
	}
	for _, bad := range []string{`5.5`, `"5"`} {
		if _, err := decodeIntent(&wire.Entry{Document: json.RawMessage(`{"role":"subscribe","desired":true,"source_id":"s","media_kind":"video","priority":` + bad + `}`)}); err == nil {
			t.Fatalf("decodeIntent took priority %s", bad)
		}
	}
}
