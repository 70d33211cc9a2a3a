package coordinator

import (
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/schema"
	"github.com/keeppeek/coordination/store/wire"
)

// SetDesired promises that an intent which already has the flag is not written again: an intent
// written by another tool (its own key order, a decimal integer, a lease) that already says
// desired=false must keep its revision, document and lease when SetDesired(false) is called.
func TestSetDesiredLeavesAnIntentWithTheFlagAlone(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator")
	ctx := ctxT(t)
	ttl := int64(60000)
	doc := `{"source_id":"front-door","role":"publish","media_kind":"video","desired":false,"recording_mode":"disabled","priority":5.0}`
	stored, err := c.Client().Put(ctx, wire.PutRequest{Namespace: svcNS, Key: intentKey, Schema: schema.MediaIntentV1,
		Document: []byte(doc), TTLMs: &ttl})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.SetDesired(ctx, svcNS, intentKey, false)
	if err != nil {
		t.Fatal(err)
	}
	after := mustGet(t, c, svcNS, intentKey)
	if got.Revision != stored.Revision || after.Revision != stored.Revision || after.TTLMs == 0 {
		t.Fatalf("SetDesired(false) on an intent already not desired wrote it: stored rev %d, returned rev %d, now rev %d ttl %d %s",
			stored.Revision, got.Revision, after.Revision, after.TTLMs, after.Document)
	}
}
