package main_test

import (
	"strings"
	"testing"
)

// A watch NATS refuses (a wrong --prefix: neither its request nor its subscription is allowed) is
// PERMISSION_DENIED at once, as for every other command, not a TIMEOUT after the request bound.
func TestRefusedWatchIsPermissionDenied(t *testing.T) {
	e := start(t, "")
	r := e.fails(1, "STATE_STORE_ERROR_CODE_PERMISSION_DENIED", "watch", "service/tx", "--prefix", "foo", "--timeout", "60s")
	if !strings.Contains(r.stderr, "--prefix") || r.stdout != "" {
		t.Fatalf("refused watch: %s", r)
	}
}
