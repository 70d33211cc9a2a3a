package coordinator

import (
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// Nobody writes the system namespace, not even an admin (SPEC section 2), and the namespace policy
// is checked before the schema (SPEC section 5): every write of the Coordinator there is
// PERMISSION_DENIED, as the server answers a raw put or delete, whether or not the key exists and
// whatever the document. A SCHEMA_INVALID would tell the caller to fix a document that is fine.
func TestWritesInSystemArePermissionDenied(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator") // an admin: it may read system
	ctx := ctxT(t)
	const ns, key = "system", "intents/front-door"

	doc := []byte(`{"role":"subscribe","desired":true,"source_id":"front-door","media_kind":"audio"}`)
	_, err := c.Client().Put(ctx, wire.PutRequest{Namespace: ns, Key: key, Schema: wire.SchemaMediaIntent, Document: doc})
	wantCode(t, err, wire.CodePermissionDenied, "the server, for a raw put in system")

	_, err = c.PutIntent(ctx, ns, key, SubscribeIntent("front-door", MediaKindAudio))
	wantCode(t, err, wire.CodePermissionDenied, "PutIntent in system")
	_, err = c.UpdateIntent(ctx, ns, key, func(*MediaIntent) (*MediaIntent, error) {
		in := SubscribeIntent("front-door", MediaKindAudio)
		return &in, nil
	})
	wantCode(t, err, wire.CodePermissionDenied, "UpdateIntent in system")
	_, err = c.SetDesired(ctx, ns, key, false)
	wantCode(t, err, wire.CodePermissionDenied, "SetDesired in system")
	_, err = c.DeleteIntent(ctx, ns, key, 0)
	wantCode(t, err, wire.CodePermissionDenied, "DeleteIntent in system (missing key)")
	_, err = c.PutPreference(ctx, ns, "prefs/layout", Preference{Kind: "layout", Layout: "grid"})
	wantCode(t, err, wire.CodePermissionDenied, "PutPreference in system")
}
