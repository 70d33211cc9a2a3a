package wire_test

import (
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// TestHeartbeatRules checks a heartbeat body, decoded strictly as the server decodes it, against the
// rules of SPEC section 11 and the contract's integer range (0 to 2^53-1).
func TestHeartbeatRules(t *testing.T) {
	hb := func(fields string) string {
		return `{"worker_id":"transcoder-a-1","service":"transcoder-a","status":"ready"` + fields + `}`
	}
	valid := []string{
		hb(``),
		hb(`,"sequence":42,"sent_at_ms":1764451200000,"interval_ms":1000,"leases":["leases/front-door-video-browser-h264-720p"]`),
		hb(`,"interval_ms":100`), hb(`,"interval_ms":60000`), hb(`,"leases":[]`), hb(`,"leases":null`),
		hb(`,"sequence":9007199254740991,"sent_at_ms":9007199254740991`),
		`{"worker_id":"` + strings.Repeat("W", 64) + `","service":"s","status":"starting"}`,
		`{"worker_id":"w","service":"s","status":"draining"}`, `{"worker_id":"w","service":"s","status":"stopping"}`,
	}
	for _, body := range valid {
		var h wire.Heartbeat
		if err := wire.Decode([]byte(body), &h); err != nil {
			t.Errorf("Decode(%s): %v", body, err)
			continue
		}
		if err := h.Validate(); err != nil {
			t.Errorf("Validate(%s): %v", body, err)
		}
	}
	invalid := []string{
		hb(`,"interval_ms":99`), hb(`,"interval_ms":60001`), hb(`,"interval_ms":-1`),
		hb(`,"sequence":-1`), hb(`,"sent_at_ms":-1`),
		// Integers of the contract stop at 2^53-1.
		hb(`,"sequence":9007199254740992`), hb(`,"sent_at_ms":9007199254740992`),
		hb(`,"sequence":9223372036854775807`), hb(`,"sent_at_ms":9223372036854775807`),
		hb(`,"sequence":1e3`), hb(`,"sequence":1.5`),
		hb(`,"leases":["a//b"]`), hb(`,"leases":[""]`), hb(`,"leases":[null]`),
		hb(`,"Sequence":1`), hb(`,"owner":"x"`), hb(`,"status":"ready"`),
		`{"worker_id":"w.1","service":"s","status":"ready"}`,
		`{"worker_id":"` + strings.Repeat("W", 65) + `","service":"s","status":"ready"}`,
		`{"worker_id":"","service":"s","status":"ready"}`,
		`{"worker_id":"w","service":"","status":"ready"}`,
		`{"worker_id":"w","service":"s","status":"Ready"}`,
		`{"worker_id":"w","service":"s"}`,
	}
	for _, body := range invalid {
		var h wire.Heartbeat
		err := wire.Decode([]byte(body), &h)
		if err == nil {
			err = h.Validate()
		}
		if err == nil {
			t.Errorf("heartbeat %s is accepted", body)
			continue
		}
		checkInvalidArgument(t, err)
	}
}
