package coordinator_test

import (
	"errors"
	"testing"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/store/wire"
)

// CheckIntent, which needs no connection, refuses what PutIntent refuses before sending, with the
// same codes, and takes a good intent.
func TestCheckIntentWithoutAConnection(t *testing.T) {
	good := coordinator.PublishIntent("front-door", "video", "disabled")
	good.VariantID, good.OutputProfile = "browser-h264-720p", "browser-h264-720p"
	if err := coordinator.CheckIntent("service/transcoder-a", "intents/front-door", good); err != nil {
		t.Fatalf("a good intent: %v", err)
	}
	bad := good
	bad.RecordingMode = "bogus"
	for _, c := range []struct {
		ns, key string
		in      coordinator.MediaIntent
		want    error
	}{
		{"service/BAD", "intents/x", good, wire.ErrInvalidArgument},
		{"service/transcoder-a", "intents/front door", good, wire.ErrInvalidArgument},
		{"system", "intents/x", good, wire.ErrPermissionDenied},
		{"service/transcoder-a", "intents/x", bad, wire.ErrSchemaInvalid},
	} {
		if err := coordinator.CheckIntent(c.ns, c.key, c.in); !errors.Is(err, c.want) {
			t.Errorf("CheckIntent(%q, %q, recording %q) = %v, want %v", c.ns, c.key, c.in.RecordingMode, err, c.want)
		}
	}
}
