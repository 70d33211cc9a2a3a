package coordinator

import (
	"testing"
)

// Options are values a caller may build conditionally (opts = append(opts, maybeLogger)): a nil one
// sets nothing, as WithRegistry(nil) and WithLogger(nil) set nothing. New used to call it and panic.
func TestNewIgnoresANilOption(t *testing.T) {
	c, err := New(mustOfflineClient(t), nil, WithLogger(nil), WithRegistry(nil))
	if err != nil {
		t.Fatalf("New with nil options: %v", err)
	}
	if c.reg == nil || c.log == nil {
		t.Fatal("New with nil options left the registry or the logger unset")
	}
	// The defaults work: a local validation answers without a round trip.
	if err := c.ValidateIntent("service/transcoder-a", PublishIntent("front-door", MediaKindVideo, RecordingDisabled)); err != nil {
		t.Fatalf("ValidateIntent of a valid intent: %v", err)
	}
}
