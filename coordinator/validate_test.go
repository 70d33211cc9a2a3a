package coordinator

import (
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// ValidateIntent answers what a write of the intent would: in system, which nobody writes, that is
// PERMISSION_DENIED, as PutIntent and the server answer (policy is checked before the schema, SPEC
// section 5). It said SCHEMA_INVALID, telling the caller to fix a document that is fine.
func TestValidateIntentAnswersAsAWriteWould(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	c := newCoordinator(t, env, "coordinator") // an admin
	ctx := ctxT(t)
	in := SubscribeIntent("front-door", MediaKindAudio)
	for _, tc := range []struct {
		ns   string
		code wire.Code
	}{
		{"system", wire.CodePermissionDenied},
		{"system/x", wire.CodeInvalidArgument},
		{"group/g1", wire.CodeSchemaInvalid},
	} {
		_, putErr := c.PutIntent(ctx, tc.ns, intentKey, in)
		wantCode(t, putErr, tc.code, "PutIntent in "+tc.ns)
		wantCode(t, c.ValidateIntent(tc.ns, in), tc.code, "ValidateIntent in "+tc.ns)
	}
	if err := c.ValidateIntent(svcNS, in); err != nil {
		t.Fatalf("ValidateIntent of a valid intent in %s: %v", svcNS, err)
	}
}
