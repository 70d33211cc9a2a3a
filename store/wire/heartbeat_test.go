package wire_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/schema"
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
		hb(`,"leases":["` + keyOfLen(256) + `"]`),
		hb(`,"sequence":9007199254740991,"sent_at_ms":9007199254740991`),
		`{"worker_id":"` + strings.Repeat("W", 64) + `","service":"s","status":"starting"}`,
		`{"worker_id":"w","service":"s","status":"draining"}`, `{"worker_id":"w","service":"s","status":"stopping"}`,
		// service is a principal id (a service namespace's id): up to 63 characters.
		`{"worker_id":"w","service":"s` + strings.Repeat("x", 62) + `","status":"ready"}`,
		// An explicit 0 is the absent interval: the default (Heartbeat.Validate).
		hb(`,"interval_ms":0`),
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
		`{"worker_id":"w","service":"s` + strings.Repeat("x", 63) + `","status":"ready"}`,
		`{"worker_id":"w","service":"Transcoder","status":"ready"}`, `{"worker_id":"w","service":"a.b","status":"ready"}`,
		hb(`,"leases":["` + keyOfLen(257) + `"]`),
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

// heartbeatSeeds are heartbeat bodies, valid and not, for FuzzDecodeHeartbeat.
var heartbeatSeeds = []string{
	`{"worker_id":"transcoder-a-1","service":"transcoder-a","sequence":42,"sent_at_ms":1764451200000,"interval_ms":1000,"status":"ready","leases":["leases/front-door-video-browser-h264-720p"]}`,
	`{"worker_id":"w","service":"s","status":"starting"}`, `{"worker_id":"w","service":"s","status":"stopping","leases":null}`,
	`{"worker_id":"w","service":"s","status":"draining","leases":[],"interval_ms":0}`,
	`{"worker_id":"w","service":"s","status":"ready","interval_ms":99}`, `{"worker_id":"w","service":"s","status":"ready","interval_ms":60001}`,
	`{"worker_id":"w","service":"s","status":"ready","sequence":-0,"sent_at_ms":9007199254740991}`,
	`{"worker_id":"w","service":"s","status":"ready","sequence":1e3}`, `{"worker_id":"w","service":"s","status":"ready","sequence":1.0}`,
	`{"worker_id":"w","service":"s","status":"ready","leases":["a/./b"]}`, `{"worker_id":"w","service":"s","status":"ready","leases":["a/.b",".c"]}`,
	`{"worker_id":"w","service":"S","status":"ready"}`, `{"worker_id":"w.1","service":"s","status":"ready"}`,
	`{"worker_id":"w","service":"s","status":"READY"}`, `{"worker_id":"w","service":"s","status":"ready","Status":"ready"}`,
	`{"worker_id":"w","service":"s","status":"ready","status":"stopping"}`, `{"worker_\u0069d":"w","service":"s","status":"ready"}`,
	`{"worker_id":"w","service":"s","status":"ready","leases":"a"}`, `{"worker_id":"w","service":"s","status":"ready","leases":[1]}`,
	`{"worker_id":"w","service":"s","status":"ready","principal":"p"}`, `{"worker_id":"w","service":"s","status":"ready"} {}`,
	`{"worker_id":"w","service":"s\u0000","status":"ready"}`, "{\"worker_id\":\"w\",\"service\":\"s\",\"status\":\"ready\",\"leases\":[\"\xff\"]}",
	`null`, `[]`, `{}`, ``, `{`,
}

// FuzzDecodeHeartbeat checks the server's reading of a heartbeat body (wire.Decode, then Validate):
// a refused body is INVALID_ARGUMENT; an accepted one is a JSON object that keeps every rule of SPEC
// section 11 (checked against regular expressions, not ident.go), holds exactly what its bytes say,
// encodes back to a heartbeat read the same way, and yields a worker-status document the store's own
// schema takes, so that no heartbeat the server accepts then fails when it is written to system.
func FuzzDecodeHeartbeat(f *testing.F) {
	reg, err := schema.New()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range heartbeatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var hb wire.Heartbeat
		err := wire.Decode(data, &hb)
		if err == nil {
			err = hb.Validate()
		}
		if err != nil {
			checkFuzzErr(t, err)
			return
		}
		if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
			t.Fatalf("%q is not a JSON object but is accepted", data)
		}
		if !reWatchID.MatchString(hb.WorkerID) || !rePrincipal.MatchString(hb.Service) ||
			!slices.Contains([]string{"starting", "ready", "draining", "stopping"}, hb.Status) {
			t.Fatalf("accepted %+v", hb)
		}
		if hb.Sequence < 0 || hb.Sequence > wire.MaxSafeInteger || hb.SentAtMs < 0 || hb.SentAtMs > wire.MaxSafeInteger ||
			(hb.IntervalMs != 0 && (hb.IntervalMs < 100 || hb.IntervalMs > 60000)) {
			t.Fatalf("accepted integers of %+v", hb)
		}
		if iv := hb.EffectiveInterval(); iv < 100 || iv > 60000 || (hb.IntervalMs == 0 && iv != 1000) {
			t.Fatalf("effective interval %d of %+v", iv, hb)
		}
		for _, l := range hb.Leases {
			if !oracleKey(l) {
				t.Fatalf("accepted lease key %q", l)
			}
		}
		sameAsBytes(t, data, &hb)

		out, err := json.Marshal(&hb)
		if err != nil {
			t.Fatal(err)
		}
		var back wire.Heartbeat
		if err := wire.Decode(out, &back); err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if err := back.Validate(); err != nil || !reflect.DeepEqual(back, hb) {
			t.Fatalf("round trip %+v -> %s -> %+v (%v)", hb, out, back, err)
		}

		leases := hb.Leases
		if leases == nil {
			leases = []string{}
		}
		doc, err := json.Marshal(wire.WorkerStatus{WorkerID: hb.WorkerID, Service: hb.Service, Principal: "p", Status: hb.Status,
			IntervalMs: hb.EffectiveInterval(), Leases: leases, FirstSeenMs: wire.MaxSafeInteger})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Validate(wire.SchemaWorkerStatus, "system", doc); err != nil {
			t.Fatalf("heartbeat %q is accepted, but its worker status %s is not: %v", data, doc, err)
		}
	})
}
