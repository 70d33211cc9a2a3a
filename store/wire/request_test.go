package wire_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// validator is implemented by every request type.
type validator interface{ Validate() error }

// decodeValidate decodes data strictly into a fresh T and validates it, as a transport would.
func decodeValidate[T any, PT interface {
	*T
	validator
}](data string) (*T, error) {
	v := PT(new(T))
	if err := wire.Decode([]byte(data), v); err != nil {
		return nil, err
	}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return (*T)(v), nil
}

// decoders maps each op to a function that decodes and validates its request.
var decoders = map[wire.Op]func(string) error{
	wire.OpGet:     func(s string) error { _, err := decodeValidate[wire.GetRequest](s); return err },
	wire.OpPut:     func(s string) error { _, err := decodeValidate[wire.PutRequest](s); return err },
	wire.OpDelete:  func(s string) error { _, err := decodeValidate[wire.DeleteRequest](s); return err },
	wire.OpList:    func(s string) error { _, err := decodeValidate[wire.ListRequest](s); return err },
	wire.OpWatch:   func(s string) error { _, err := decodeValidate[wire.WatchRequest](s); return err },
	wire.OpUnwatch: func(s string) error { _, err := decodeValidate[wire.UnwatchRequest](s); return err },
	wire.OpAck:     func(s string) error { _, err := decodeValidate[wire.AckRequest](s); return err },
	wire.OpInfo:    func(s string) error { _, err := decodeValidate[wire.InfoRequest](s); return err },
}

// decodeOnly maps each op to a function that only decodes its request.
var decodeOnly = map[wire.Op]func([]byte) error{
	wire.OpGet:     func(b []byte) error { return wire.Decode(b, &wire.GetRequest{}) },
	wire.OpPut:     func(b []byte) error { return wire.Decode(b, &wire.PutRequest{}) },
	wire.OpDelete:  func(b []byte) error { return wire.Decode(b, &wire.DeleteRequest{}) },
	wire.OpList:    func(b []byte) error { return wire.Decode(b, &wire.ListRequest{}) },
	wire.OpWatch:   func(b []byte) error { return wire.Decode(b, &wire.WatchRequest{}) },
	wire.OpUnwatch: func(b []byte) error { return wire.Decode(b, &wire.UnwatchRequest{}) },
	wire.OpAck:     func(b []byte) error { return wire.Decode(b, &wire.AckRequest{}) },
	wire.OpInfo:    func(b []byte) error { return wire.Decode(b, &wire.InfoRequest{}) },
}

type reqCase struct {
	name string
	json string
	ok   bool
}

func runReqCases(t *testing.T, op wire.Op, cases []reqCase) {
	t.Helper()
	dv := decoders[op]
	for _, c := range cases {
		t.Run(string(op)+"/"+c.name, func(t *testing.T) {
			err := dv(c.json)
			if c.ok {
				if err != nil {
					t.Fatalf("%s: got %v, want ok", c.json, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s: got ok, want INVALID_ARGUMENT", c.json)
			}
			checkInvalidArgument(t, err)
		})
	}
}

const (
	maxSafe     = "9007199254740991"
	aboveSafe   = "9007199254740992"
	aboveInt64  = "9223372036854775808"
	hugeInteger = "100000000000000000000000000000"
)

func TestDecodeIsTotalForEveryOp(t *testing.T) {
	if len(decoders) != len(wire.Ops) || len(decodeOnly) != len(wire.Ops) {
		t.Fatalf("the tests cover %d ops, the package has %d", len(decoders), len(wire.Ops))
	}
	for _, op := range wire.Ops {
		if decoders[op] == nil {
			t.Errorf("no decoder for %s", op)
		}
	}
}

// Requests that are not one JSON object, or not JSON at all, are INVALID_ARGUMENT for every op.
// (null is handled by TestDecodeRejectsNullBody.)
func TestNonObjectRequestBody(t *testing.T) {
	for _, op := range wire.Ops {
		for _, body := range []string{
			``, ` `, `[]`, `[{}]`, `"x"`, `""`, `1`, `0`, `-1`, `1.5`, `true`, `false`,
			`{`, `}`, `{"request_id":1`, `{"request_id":}`, `{'request_id':1}`, `not json`,
			`{} {}`, `{}x`, `{}]`, `{} 1`, `{}null`, `{"request_id":1}{"request_id":2}`,
		} {
			t.Run(fmt.Sprintf("%s/%q", op, body), func(t *testing.T) {
				err := decodeOnly[op]([]byte(body))
				wantInvalidArgument(t, err)
				if wire.RequestIDOf([]byte(body)) != 0 && !strings.HasPrefix(body, `{"request_id":1}`) {
					t.Errorf("RequestIDOf(%q) = %d, want 0", body, wire.RequestIDOf([]byte(body)))
				}
			})
		}
	}
}

// TestDecodeRejectsNullBody: SPEC says requests are flat JSON objects, and Decode's doc says it
// "strictly decodes one JSON object". encoding/json accepts the literal null for a struct and leaves it
// untouched, so Decode returns nil. For every op but info the later Validate still answers
// INVALID_ARGUMENT (a required field is empty), but `null` is accepted as a valid info request.
func TestDecodeRejectsNullBody(t *testing.T) {
	for _, op := range wire.Ops {
		for _, body := range []string{`null`, ` null `} {
			if err := decodeOnly[op]([]byte(body)); err == nil {
				t.Errorf("%s: Decode(%q) = nil, want INVALID_ARGUMENT", op, body)
			} else {
				checkInvalidArgument(t, err)
			}
			if err := decoders[op](body); err == nil {
				t.Errorf("%s: Decode+Validate(%q) = nil, want INVALID_ARGUMENT", op, body)
			}
		}
	}
}

// TestDecodeFieldNamesAreExact: SPEC field names are snake_case and an unknown field is
// INVALID_ARGUMENT. encoding/json matches field names case-insensitively (with Unicode folding:
// U+212A KELVIN SIGN folds to k), so `Namespace`, `KEY` or `\u212aey` are taken as namespace/key, and a
// body carrying both `key` and `KEY` silently uses the last one.
func TestDecodeFieldNamesAreExact(t *testing.T) {
	for _, c := range []struct {
		op   wire.Op
		body string
	}{
		{wire.OpGet, `{"Namespace":"user/alice","key":"k"}`},
		{wire.OpGet, `{"namespace":"user/alice","KEY":"k"}`},
		{wire.OpGet, `{"namespace":"user/alice","\u212aey":"k"}`},
		{wire.OpGet, `{"namespace":"user/alice","key":"a","Key":"b"}`},
		{wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"s","Document":{}}`},
		{wire.OpInfo, `{"Request_ID":5}`},
		{wire.OpAck, `{"watch_id":"w","Applied_Sequence":1}`},
	} {
		if err := decoders[c.op](c.body); err == nil {
			t.Errorf("%s %s: accepted, want INVALID_ARGUMENT (not a field name of the contract)", c.op, c.body)
		}
	}
}

func TestRequestIDRange(t *testing.T) {
	for _, op := range wire.Ops {
		valid := map[wire.Op]string{
			wire.OpGet:     `"namespace":"user/alice","key":"k"`,
			wire.OpPut:     `"namespace":"user/alice","key":"k","schema":"s","document":{}`,
			wire.OpDelete:  `"namespace":"user/alice","key":"k"`,
			wire.OpList:    `"namespace":"user/alice"`,
			wire.OpWatch:   `"watch_id":"w","namespace":"user/alice"`,
			wire.OpUnwatch: `"watch_id":"w"`,
			wire.OpAck:     `"watch_id":"w","applied_sequence":0`,
			wire.OpInfo:    ``,
		}[op]
		body := func(id string) string {
			if valid == "" {
				return `{"request_id":` + id + `}`
			}
			return `{"request_id":` + id + `,` + valid + `}`
		}
		runReqCases(t, op, []reqCase{
			{"request_id 0", body("0"), true},
			{"request_id 1", body("1"), true},
			{"request_id max", body(maxSafe), true},
			{"request_id absent", "{" + valid + "}", true},
			{"request_id 2^53", body(aboveSafe), false},
			{"request_id above int64", body(aboveInt64), false},
			{"request_id huge", body(hugeInteger), false},
			{"request_id -1", body("-1"), false},
			{"request_id 1.5", body("1.5"), false},
			{"request_id string", body(`"1"`), false},
			{"request_id bool", body(`true`), false},
			{"request_id object", body(`{}`), false},
			{"unknown field", strings.Replace(body("1"), `{`, `{"owner":"x",`, 1), false},
			{"trailing data", body("1") + `x`, false},
			{"trailing object", body("1") + `{}`, false},
			{"trailing whitespace", body("1") + " \n\t", true},
		})
	}
}

func TestGetRequestValidate(t *testing.T) {
	runReqCases(t, wire.OpGet, []reqCase{
		{"ok", `{"request_id":1,"namespace":"user/alice","key":"intents/front-door"}`, true},
		{"system", `{"namespace":"system","key":"workers/alice/w1"}`, true},
		{"key 256", `{"namespace":"user/alice","key":"` + keyOfLen(256) + `"}`, true},
		{"missing namespace", `{"key":"k"}`, false},
		{"empty namespace", `{"namespace":"","key":"k"}`, false},
		{"null namespace", `{"namespace":null,"key":"k"}`, false},
		{"missing key", `{"namespace":"user/alice"}`, false},
		{"empty key", `{"namespace":"user/alice","key":""}`, false},
		{"namespace foo/x", `{"namespace":"foo/x","key":"k"}`, false},
		{"namespace system/x", `{"namespace":"system/x","key":"k"}`, false},
		{"namespace trailing slash", `{"namespace":"user/alice/","key":"k"}`, false},
		{"key ..", `{"namespace":"user/alice","key":"a/../b"}`, false},
		{"key leading slash", `{"namespace":"user/alice","key":"/a"}`, false},
		{"key 257", `{"namespace":"user/alice","key":"` + keyOfLen(257) + `"}`, false},
		{"key number", `{"namespace":"user/alice","key":5}`, false},
		{"unknown field", `{"namespace":"user/alice","key":"k","owner":"x"}`, false},
		{"key_prefix is not a get field", `{"namespace":"user/alice","key":"k","key_prefix":"a"}`, false},
	})
}

func TestPutRequestValidate(t *testing.T) {
	const base = `"namespace":"service/transcoder-a","key":"intents/front-door","schema":"keeppeek.media-intent.v1"`
	put := func(extra string) string {
		if extra == "" {
			return `{"request_id":7,` + base + `,"document":{"role":"publish"}}`
		}
		return `{"request_id":7,` + base + `,"document":{"role":"publish"},` + extra + `}`
	}
	runReqCases(t, wire.OpPut, []reqCase{
		{"ok", put(""), true},
		{"empty document object", `{` + base + `,"document":{}}`, true},
		{"document with whitespace", `{` + base + `,"document": { "a" : [ 1 , 2 ] } }`, true},
		{"expected_revision 0", put(`"expected_revision":0`), true},
		{"expected_revision 5", put(`"expected_revision":5`), true},
		{"expected_revision max", put(`"expected_revision":` + maxSafe), true},
		{"ttl_ms 0", put(`"ttl_ms":0`), true},
		{"ttl_ms 500 (TTL_INVALID is a later check)", put(`"ttl_ms":500`), true},
		{"ttl_ms 1000", put(`"ttl_ms":1000`), true},
		{"ttl_ms above 24h (clamped later)", put(`"ttl_ms":86400001`), true},
		{"ttl_ms max", put(`"ttl_ms":` + maxSafe), true},
		{"guard", put(`"guard":{"key":"leases/front-door","revision":1}`), true},
		{"guard max revision", put(`"guard":{"key":"leases/front-door","revision":` + maxSafe + `}`), true},
		{"all optional", put(`"expected_revision":3,"ttl_ms":5000,"guard":{"key":"leases/a","revision":9}`), true},

		{"missing namespace", `{"key":"k","schema":"s","document":{}}`, false},
		{"missing key", `{"namespace":"user/alice","schema":"s","document":{}}`, false},
		{"missing schema", `{"namespace":"user/alice","key":"k","document":{}}`, false},
		{"empty schema", `{"namespace":"user/alice","key":"k","schema":"","document":{}}`, false},
		{"missing document", `{"namespace":"user/alice","key":"k","schema":"s"}`, false},
		{"document null", `{"namespace":"user/alice","key":"k","schema":"s","document":null}`, false},
		{"document array", `{"namespace":"user/alice","key":"k","schema":"s","document":[]}`, false},
		{"document array of object", `{"namespace":"user/alice","key":"k","schema":"s","document":[{}]}`, false},
		{"document string", `{"namespace":"user/alice","key":"k","schema":"s","document":"{}"}`, false},
		{"document number", `{"namespace":"user/alice","key":"k","schema":"s","document":1}`, false},
		{"document bool", `{"namespace":"user/alice","key":"k","schema":"s","document":true}`, false},
		{"document invalid", `{"namespace":"user/alice","key":"k","schema":"s","document":{"a":}}`, false},
		{"document string not UTF-8", "{\"namespace\":\"user/alice\",\"key\":\"k\",\"schema\":\"s\",\"document\":{\"a\":\"b\xffc\"}}", false},
		{"document name not UTF-8", "{\"namespace\":\"user/alice\",\"key\":\"k\",\"schema\":\"s\",\"document\":{\"a\xed\xa0\x80\":1}}", false},
		{"document UTF-8 and escapes", `{"namespace":"user/alice","key":"k","schema":"s","document":{"a":"é 日本 \ud800 \u00ff"}}`, true},
		{"namespace foo/x", `{"namespace":"foo/x","key":"k","schema":"s","document":{}}`, false},
		{"namespace system/x", `{"namespace":"system/x","key":"k","schema":"s","document":{}}`, false},
		{"namespace service/", `{"namespace":"service/","key":"k","schema":"s","document":{}}`, false},
		{"namespace service/Bad", `{"namespace":"service/Bad","key":"k","schema":"s","document":{}}`, false},
		{"namespace user/a/b", `{"namespace":"user/a/b","key":"k","schema":"s","document":{}}`, false},
		{"key .", `{"namespace":"user/alice","key":".","schema":"s","document":{}}`, false},
		{"key double slash", `{"namespace":"user/alice","key":"a//b","schema":"s","document":{}}`, false},
		{"key trailing slash", `{"namespace":"user/alice","key":"a/","schema":"s","document":{}}`, false},
		{"key space", `{"namespace":"user/alice","key":"a b","schema":"s","document":{}}`, false},
		{"owner", put(`"owner":"x"`), false},
		{"owner first", `{"owner":"x",` + base + `,"document":{}}`, false},
		{"revision", put(`"revision":1`), false},
		{"created_at_ms", put(`"created_at_ms":1`), false},
		{"expires_at_ms", put(`"expires_at_ms":1`), false},
		{"unknown", put(`"x":1`), false},
		{"ttl_ms -1", put(`"ttl_ms":-1`), false},
		{"ttl_ms 2^53", put(`"ttl_ms":` + aboveSafe), false},
		{"ttl_ms 1.5", put(`"ttl_ms":1.5`), false},
		{"ttl_ms string", put(`"ttl_ms":"1000"`), false},
		{"expected_revision -1", put(`"expected_revision":-1`), false},
		{"expected_revision 2^53", put(`"expected_revision":` + aboveSafe), false},
		{"expected_revision 1.5", put(`"expected_revision":1.5`), false},
		{"guard same key", put(`"guard":{"key":"intents/front-door","revision":1}`), false},
		{"guard revision 0", put(`"guard":{"key":"leases/a","revision":0}`), false},
		{"guard revision missing", put(`"guard":{"key":"leases/a"}`), false},
		{"guard revision -1", put(`"guard":{"key":"leases/a","revision":-1}`), false},
		{"guard revision 2^53", put(`"guard":{"key":"leases/a","revision":` + aboveSafe + `}`), false},
		{"guard revision 1.5", put(`"guard":{"key":"leases/a","revision":1.5}`), false},
		{"guard key missing", put(`"guard":{"revision":1}`), false},
		{"guard key empty", put(`"guard":{"key":"","revision":1}`), false},
		{"guard key invalid", put(`"guard":{"key":"a/../b","revision":1}`), false},
		{"guard key leading slash", put(`"guard":{"key":"/leases/a","revision":1}`), false},
		{"guard unknown field", put(`"guard":{"key":"leases/a","revision":1,"namespace":"user/bob"}`), false},
		{"guard empty", put(`"guard":{}`), false},
		{"guard array", put(`"guard":[]`), false},
		{"guard string", put(`"guard":"leases/a"`), false},
		{"trailing data", put("") + `]`, false},
	})
}

func TestDeleteRequestValidate(t *testing.T) {
	del := func(extra string) string {
		if extra == "" {
			return `{"request_id":3,"namespace":"user/alice","key":"k"}`
		}
		return `{"request_id":3,"namespace":"user/alice","key":"k",` + extra + `}`
	}
	runReqCases(t, wire.OpDelete, []reqCase{
		{"ok", del(""), true},
		{"expected_revision 1", del(`"expected_revision":1`), true},
		{"expected_revision max", del(`"expected_revision":` + maxSafe), true},
		{"guard", del(`"guard":{"key":"lease","revision":4}`), true},

		{"missing namespace", `{"key":"k"}`, false},
		{"missing key", `{"namespace":"user/alice"}`, false},
		{"namespace foo/x", `{"namespace":"foo/x","key":"k"}`, false},
		{"key ..", `{"namespace":"user/alice","key":".."}`, false},
		{"expected_revision 0", del(`"expected_revision":0`), false},
		{"expected_revision -1", del(`"expected_revision":-1`), false},
		{"expected_revision 2^53", del(`"expected_revision":` + aboveSafe), false},
		{"expected_revision 1.5", del(`"expected_revision":1.5`), false},
		{"guard same key", del(`"guard":{"key":"k","revision":1}`), false},
		{"guard revision 0", del(`"guard":{"key":"lease","revision":0}`), false},
		{"guard invalid key", del(`"guard":{"key":"a//b","revision":1}`), false},
		{"guard unknown field", del(`"guard":{"key":"lease","revision":1,"x":1}`), false},
		{"document", del(`"document":{}`), false},
		{"schema", del(`"schema":"s"`), false},
		{"ttl_ms", del(`"ttl_ms":1000`), false},
		{"owner", del(`"owner":"x"`), false},
	})
}

func TestListRequestValidate(t *testing.T) {
	list := func(extra string) string {
		if extra == "" {
			return `{"request_id":2,"namespace":"user/alice"}`
		}
		return `{"request_id":2,"namespace":"user/alice",` + extra + `}`
	}
	runReqCases(t, wire.OpList, []reqCase{
		{"ok", list(""), true},
		{"system", `{"namespace":"system"}`, true},
		{"key_prefix empty", list(`"key_prefix":""`), true},
		{"key_prefix slash", list(`"key_prefix":"intents/"`), true},
		{"key_prefix a/.", list(`"key_prefix":"a/."`), true},
		{"after_key", list(`"after_key":"intents/a"`), true},
		{"limit 0", list(`"limit":0`), true},
		{"limit 1", list(`"limit":1`), true},
		{"limit 256", list(`"limit":256`), true},

		{"missing namespace", `{"key_prefix":"a"}`, false},
		{"empty namespace", `{"namespace":""}`, false},
		{"namespace system/x", `{"namespace":"system/x"}`, false},
		{"namespace trailing slash", `{"namespace":"user/alice/"}`, false},
		{"key_prefix leading slash", list(`"key_prefix":"/a"`), false},
		{"key_prefix //", list(`"key_prefix":"a//"`), false},
		{"key_prefix a/./b", list(`"key_prefix":"a/./b"`), false},
		{"key_prefix space", list(`"key_prefix":"a b"`), false},
		{"key_prefix 257", list(`"key_prefix":"` + strings.Repeat("a", 257) + `"`), false},
		{"after_key invalid", list(`"after_key":"a/"`), false},
		{"after_key ..", list(`"after_key":".."`), false},
		{"limit 257", list(`"limit":257`), false},
		{"limit -1", list(`"limit":-1`), false},
		{"limit 1.5", list(`"limit":1.5`), false},
		{"limit string", list(`"limit":"10"`), false},
		{"limit 2^53", list(`"limit":` + aboveSafe), false},
		{"key", list(`"key":"k"`), false},
		{"watch_id", list(`"watch_id":"w"`), false},
	})
}

func TestListEffectiveLimit(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"namespace":"user/alice"}`, 100},
		{`{"namespace":"user/alice","limit":0}`, 100},
		{`{"namespace":"user/alice","limit":1}`, 1},
		{`{"namespace":"user/alice","limit":100}`, 100},
		{`{"namespace":"user/alice","limit":256}`, 256},
	} {
		r, err := decodeValidate[wire.ListRequest](c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := r.EffectiveLimit(); got != c.want {
			t.Errorf("%s: EffectiveLimit() = %d, want %d", c.body, got, c.want)
		}
	}
	if wire.DefaultListLimit != 100 || wire.MaxListLimit != 256 {
		t.Errorf("DefaultListLimit %d, MaxListLimit %d; SPEC says 100 and 256", wire.DefaultListLimit, wire.MaxListLimit)
	}
}

func TestWatchRequestValidate(t *testing.T) {
	runReqCases(t, wire.OpWatch, []reqCase{
		{"ok", `{"request_id":4,"watch_id":"w-1","namespace":"service/transcoder-a","key_prefix":"intents/"}`, true},
		{"no prefix", `{"watch_id":"w","namespace":"user/alice"}`, true},
		{"empty prefix", `{"watch_id":"w","namespace":"user/alice","key_prefix":""}`, true},
		{"prefix a/.", `{"watch_id":"w","namespace":"user/alice","key_prefix":"a/."}`, true},
		{"watch_id 64", `{"watch_id":"` + strings.Repeat("w", 64) + `","namespace":"user/alice"}`, true},

		{"missing watch_id", `{"namespace":"user/alice"}`, false},
		{"empty watch_id", `{"watch_id":"","namespace":"user/alice"}`, false},
		{"watch_id 65", `{"watch_id":"` + strings.Repeat("w", 65) + `","namespace":"user/alice"}`, false},
		{"watch_id dot", `{"watch_id":"w.1","namespace":"user/alice"}`, false},
		{"watch_id .", `{"watch_id":".","namespace":"user/alice"}`, false},
		{"watch_id wildcard", `{"watch_id":"*","namespace":"user/alice"}`, false},
		{"watch_id number", `{"watch_id":1,"namespace":"user/alice"}`, false},
		{"missing namespace", `{"watch_id":"w"}`, false},
		{"namespace foo/x", `{"watch_id":"w","namespace":"foo/x"}`, false},
		{"namespace service/", `{"watch_id":"w","namespace":"service/"}`, false},
		{"prefix leading slash", `{"watch_id":"w","namespace":"user/alice","key_prefix":"/"}`, false},
		{"prefix a/./b", `{"watch_id":"w","namespace":"user/alice","key_prefix":"a/./b"}`, false},
		{"prefix //", `{"watch_id":"w","namespace":"user/alice","key_prefix":"a//b"}`, false},
		{"limit", `{"watch_id":"w","namespace":"user/alice","limit":1}`, false},
		{"unknown", `{"watch_id":"w","namespace":"user/alice","principal":"bob"}`, false},
	})
}

func TestUnwatchRequestValidate(t *testing.T) {
	runReqCases(t, wire.OpUnwatch, []reqCase{
		{"ok", `{"request_id":5,"watch_id":"w-1"}`, true},
		{"missing watch_id", `{"request_id":5}`, false},
		{"empty watch_id", `{"watch_id":""}`, false},
		{"watch_id 65", `{"watch_id":"` + strings.Repeat("w", 65) + `"}`, false},
		{"watch_id dot", `{"watch_id":"a.b"}`, false},
		{"namespace", `{"watch_id":"w","namespace":"user/alice"}`, false},
	})
}

func TestAckRequestValidate(t *testing.T) {
	runReqCases(t, wire.OpAck, []reqCase{
		{"ok", `{"request_id":6,"watch_id":"w","applied_sequence":12}`, true},
		{"applied_sequence 0", `{"watch_id":"w","applied_sequence":0}`, true},
		{"applied_sequence max", `{"watch_id":"w","applied_sequence":` + maxSafe + `}`, true},

		{"missing watch_id", `{"applied_sequence":1}`, false},
		{"empty watch_id", `{"watch_id":"","applied_sequence":1}`, false},
		{"watch_id dot", `{"watch_id":".","applied_sequence":1}`, false},
		{"applied_sequence -1", `{"watch_id":"w","applied_sequence":-1}`, false},
		{"applied_sequence 2^53", `{"watch_id":"w","applied_sequence":` + aboveSafe + `}`, false},
		{"applied_sequence 1.5", `{"watch_id":"w","applied_sequence":1.5}`, false},
		{"applied_sequence string", `{"watch_id":"w","applied_sequence":"1"}`, false},
		{"unknown", `{"watch_id":"w","applied_sequence":1,"revision":3}`, false},
	})
}

// TestAckRequiresAppliedSequence: SPEC section 5 lists applied_sequence as a required field of ack
// (no "?"), and check 1 answers a missing required field with INVALID_ARGUMENT. AckRequest keeps it as
// a plain int64, so an absent applied_sequence is read as 0 and accepted.
func TestAckRequiresAppliedSequence(t *testing.T) {
	for _, body := range []string{`{"watch_id":"w"}`, `{"request_id":1,"watch_id":"w","applied_sequence":null}`} {
		if err := decoders[wire.OpAck](body); err == nil {
			t.Errorf("ack %s: accepted (as applied_sequence 0), want INVALID_ARGUMENT for a missing required field", body)
		} else {
			checkInvalidArgument(t, err)
		}
	}
}

func TestInfoRequestValidate(t *testing.T) {
	runReqCases(t, wire.OpInfo, []reqCase{
		{"ok", `{"request_id":8}`, true},
		{"empty", `{}`, true},
		{"unknown", `{"request_id":8,"namespace":"system"}`, false},
		{"array", `[]`, false},
	})
}

// Validate is also the gate for requests built in Go (the SDK, the engine's own callers): the same
// rules hold without Decode.
func TestValidateGoValues(t *testing.T) {
	ok := []validator{
		&wire.GetRequest{Namespace: "user/alice", Key: "k"},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(` {"a": 1} `)},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{}`), ExpectedRevision: i64(0), TTLMs: i64(0)},
		&wire.DeleteRequest{Namespace: "user/alice", Key: "k", ExpectedRevision: i64(1)},
		&wire.ListRequest{Namespace: "user/alice"},
		&wire.WatchRequest{WatchID: "w", Namespace: "user/alice"},
		&wire.UnwatchRequest{WatchID: "w"},
		&wire.AckRequest{WatchID: "w", AppliedSequence: i64(0)},
		&wire.InfoRequest{},
	}
	for _, v := range ok {
		if err := v.Validate(); err != nil {
			t.Errorf("%#v: %v", v, err)
		}
	}
	bad := []validator{
		&wire.GetRequest{Namespace: "user/alice", Key: "k", RequestID: -1},
		&wire.GetRequest{Namespace: "user/alice", Key: "k", RequestID: wire.MaxSafeInteger + 1},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s"},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`[]`)},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{"a":`)},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{} {}`)},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{}`), TTLMs: i64(-1)},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{}`), ExpectedRevision: i64(-1)},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{}`), Guard: &wire.Guard{Key: "k", Revision: 1}},
		&wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "s", Document: []byte(`{}`), Guard: &wire.Guard{Key: "g"}},
		&wire.DeleteRequest{Namespace: "user/alice", Key: "k", ExpectedRevision: i64(0)},
		&wire.DeleteRequest{Namespace: "user/alice", Key: "k", Guard: &wire.Guard{Key: "g", Revision: wire.MaxSafeInteger + 1}},
		&wire.ListRequest{Namespace: "user/alice", Limit: wire.MaxListLimit + 1},
		&wire.ListRequest{Namespace: "user/alice", Limit: -1},
		&wire.WatchRequest{WatchID: "w", Namespace: "user/alice", KeyPrefix: "/"},
		&wire.UnwatchRequest{},
		&wire.AckRequest{WatchID: "w", AppliedSequence: i64(-1)},
		&wire.AckRequest{WatchID: "w", AppliedSequence: i64(wire.MaxSafeInteger + 1)},
		&wire.InfoRequest{RequestID: -1},
	}
	for _, v := range bad {
		err := v.Validate()
		if err == nil {
			t.Errorf("%#v: got ok, want INVALID_ARGUMENT", v)
			continue
		}
		checkInvalidArgument(t, err)
	}
}

func TestRequestIDOf(t *testing.T) {
	for _, c := range []struct {
		body string
		want int64
	}{
		{`{"request_id":42}`, 42},
		{` {"request_id": 42} `, 42},
		{`{"request_id":42,"owner":"x"}`, 42},          // unknown fields do not hide the id
		{`{"request_id":42,"key":5}`, 42},              // nor do wrong types of other fields
		{`{"namespace":"user/a","request_id":42}`, 42}, // order does not matter
		{`{"request_id":` + maxSafe + `}`, 1<<53 - 1},  // the largest
		{`{"request_id":0}`, 0},
		{`{}`, 0},
		{``, 0},
		{`not json`, 0},
		{`{"request_id":42`, 0},
		{`{"request_id":42}}`, 0},
		{`{"request_id":42} {"request_id":43}`, 0},
		{"\xff\xfe", 0},
		{`[42]`, 0},
		{`42`, 0},
		{`null`, 0},
		{`"x"`, 0},
		{`{"request_id":-1}`, 0},
		{`{"request_id":` + aboveSafe + `}`, 0},
		{`{"request_id":` + aboveInt64 + `}`, 0},
		{`{"request_id":1.5}`, 0},
		{`{"request_id":"42"}`, 0},
		{`{"request_id":null}`, 0},
		{`{"Request_ID":3}`, 0},                      // names are case-sensitive, as Decode reads them
		{`{"request_id":1,"Request_ID":3}`, 1},       // an unknown field beside the id
		{`{"request_id":1,"request_id":3}`, 0},       // a duplicate id names no request
		{`{"a":{"request_id":7},"request_id":2}`, 2}, // only the top level counts
	} {
		if got := wire.RequestIDOf([]byte(c.body)); got != c.want {
			t.Errorf("RequestIDOf(%q) = %d, want %d", c.body, got, c.want)
		}
	}
	if got := wire.RequestIDOf(nil); got != 0 {
		t.Errorf("RequestIDOf(nil) = %d", got)
	}
}
