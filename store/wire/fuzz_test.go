package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// checkFuzzErr fails unless err (not nil) is a *wire.Error with code INVALID_ARGUMENT.
func checkFuzzErr(t *testing.T, err error) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInvalidArgument || !errors.Is(err, wire.ErrInvalidArgument) {
		t.Fatalf("got %T %v, want a *wire.Error with %s", err, err, wire.CodeInvalidArgument)
	}
	if we.Message == "" || we.CurrentRevision != nil {
		t.Fatalf("bad INVALID_ARGUMENT %+v", we)
	}
}

func FuzzIdentifiers(f *testing.F) {
	for _, s := range []string{
		"", "a", "A", "_a", "-a", "a_b-c", ".", "..", ".a", "a..b", "a/", "/a", "a//b", "a/./b", "a/.", "a/..",
		"a/.x", "intents/front-door", "system", "system/x", "service/x", "service/", "service/Bad",
		"group/ops", "user/alice", "user/a/b", "user/alice/", "foo/x", "w-1", "a b", "é", "a\x00",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 128),
		strings.Repeat("a", 129), strings.Repeat("a", 256), strings.Repeat("a", 257),
		strings.Repeat("a", 255) + "/", strings.Repeat("a", 254) + "/.", strings.Repeat("a/", 128),
		strings.Repeat("a", 255) + ".", strings.Repeat("a", 253) + "/..", "0" + strings.Repeat("z", 62),
		"service/" + strings.Repeat("a", 63), "service/" + strings.Repeat("a", 64), "user/-a", "group/_x", "..a", "a/..b",
		"A/B", "a\u002fb", "system/", "/system", "SYSTEM", "user//a", "user/a\x00", "w\u00e9",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key := wire.ValidKey(s)
		prefix := wire.ValidKeyPrefix(s)
		ns := wire.ValidNamespace(s)
		pid := wire.ValidPrincipalID(s)
		wid := wire.ValidWatchID(s)
		seg := wire.ValidSegment(s)
		ident := wire.ValidIdentifier(s)

		if key {
			if len(s) == 0 || len(s) > wire.MaxKeyLen {
				t.Fatalf("ValidKey(%q) with length %d", s, len(s))
			}
			if !prefix {
				t.Fatalf("valid key %q is not a valid key_prefix", s)
			}
			for i := range len(s) {
				if !wire.ValidKeyPrefix(s[:i]) {
					t.Fatalf("prefix %q of valid key %q is not a valid key_prefix", s[:i], s)
				}
			}
			for part := range strings.SplitSeq(s, "/") {
				if !wire.ValidSegment(part) {
					t.Fatalf("valid key %q has invalid segment %q", s, part)
				}
			}
		}
		if prefix && s != "" {
			// A key_prefix is a byte prefix of some valid key: extend it minimally.
			ext := s
			last := s[strings.LastIndexByte(s, '/')+1:]
			if last == "" || last == "." || last == ".." {
				ext += "a"
			}
			if !wire.ValidKey(ext) {
				t.Fatalf("key_prefix %q is the prefix of no valid key (%q is not one)", s, ext)
			}
		}
		kind, id, ok := wire.ParseNamespace(s)
		if ok != ns {
			t.Fatalf("ParseNamespace(%q) ok %v, ValidNamespace %v", s, ok, ns)
		}
		if ns {
			back := string(kind)
			if kind != wire.KindSystem {
				back += "/" + id
				if !wire.ValidPrincipalID(id) {
					t.Fatalf("namespace %q has invalid id %q", s, id)
				}
			} else if id != "" {
				t.Fatalf("system namespace with id %q", id)
			}
			if back != s {
				t.Fatalf("ParseNamespace(%q) = %q, %q: does not round-trip (%q)", s, kind, id, back)
			}
			if strings.HasSuffix(s, "/") {
				t.Fatalf("valid namespace %q ends in /", s)
			}
		} else if kind != "" || id != "" {
			t.Fatalf("ParseNamespace(%q) = %q, %q, false", s, kind, id)
		}
		if pid {
			if len(s) > wire.MaxPrincipalIDLen || strings.ContainsAny(s, "./ *>") {
				t.Fatalf("ValidPrincipalID(%q)", s)
			}
			if !wid || !key || !seg {
				t.Fatalf("principal id %q: watch id %v, key %v, segment %v", s, wid, key, seg)
			}
			for _, k := range []string{"service/", "group/", "user/"} {
				if !wire.ValidNamespace(k + s) {
					t.Fatalf("ValidNamespace(%q) = false", k+s)
				}
			}
		}
		if wid {
			if len(s) == 0 || len(s) > wire.MaxWatchIDLen || strings.ContainsAny(s, "./ *>") {
				t.Fatalf("ValidWatchID(%q)", s)
			}
			if !seg || !key || !ident {
				t.Fatalf("watch id %q: segment %v, key %v, identifier %v", s, seg, key, ident)
			}
		}
		if ident && (!seg || len(s) > wire.MaxIdentifierLen) {
			t.Fatalf("ValidIdentifier(%q) but segment %v, length %d", s, seg, len(s))
		}
		if seg && !strings.Contains(s, "/") && len(s) <= wire.MaxKeyLen && !key {
			t.Fatalf("segment %q is not a key", s)
		}
		// Each rule agrees with SPEC section 1 written as regular expressions (oracle_test.go).
		for _, c := range []struct {
			name      string
			got, want bool
		}{
			{"ValidKey", key, oracleKey(s)}, {"ValidKeyPrefix", prefix, oracleKeyPrefix(s)},
			{"ValidNamespace", ns, reNamespace.MatchString(s)}, {"ValidPrincipalID", pid, rePrincipal.MatchString(s)},
			{"ValidWatchID", wid, reWatchID.MatchString(s)}, {"ValidSegment", seg, oracleSegment(s)},
			{"ValidIdentifier", ident, oracleSegment(s) && len(s) <= wire.MaxIdentifierLen},
		} {
			if c.got != c.want {
				t.Fatalf("%s(%q) = %v, SPEC's rule says %v", c.name, s, c.got, c.want)
			}
		}
	})
}

// putSeeds are put requests, valid and not.
var putSeeds = []string{
	`{"request_id":7,"namespace":"service/transcoder-a","key":"intents/front-door","schema":"keeppeek.media-intent.v1","document":{"role":"publish"}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"expected_revision":0,"ttl_ms":5000,"guard":{"key":"lease","revision":1}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{ "a" : [ 1 , {} ] }}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":[]}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":null}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":"x"}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"owner":"x"}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":{"key":"k","revision":1}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":{"key":"g","revision":0}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"ttl_ms":-1}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"expected_revision":9007199254740992}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"ttl_ms":1.5}`,
	`{"namespace":"system/x","key":"k","schema":"s","document":{}}`,
	`{"namespace":"user/alice","key":"a/../b","schema":"s","document":{}}`,
	`{"request_id":-1,"namespace":"user/alice","key":"k","schema":"s","document":{}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{}} x`,
	`{"Namespace":"user/alice","KEY":"k","schema":"s","document":{}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{"a":"\u00e9<>&\u2028"}}`,
	"{\"namespace\":\"user/alice\",\"key\":\"k\",\"schema\":\"s\",\"document\":{\"a\":\"\xff\"}}",
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":{"KEY":"g","revision":1}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":{"key":"g","key":"h","revision":1}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":{"k\u0065y":"g","revision":1}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":null}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{"a":1e1000000,"b":-0.0e-5}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{"a":{"a":{"a":[[[[{}]]]]}}}}`,
	`{"request_id":1.0,"namespace":"user/alice","key":"k","schema":"s","document":{}}`,
	`{"request_id":1e0,"namespace":"user/alice","key":"k","schema":"s","document":{}}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{},"ttl_ms":86400001}`,
	`{"namespace":"user/alice","key":"k","schema":"s","document":{"a":"\ud800"}}`,
	`[]`, `null`, `"x"`, `1`, ``, `{`, `{}`,
}

func FuzzDecodePut(f *testing.F) {
	for _, s := range putSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r wire.PutRequest
		if err := wire.Decode(data, &r); err != nil {
			checkFuzzErr(t, err)
			return
		}
		if err := r.Validate(); err != nil {
			checkFuzzErr(t, err)
			return
		}
		if !wire.ValidNamespace(r.Namespace) || !wire.ValidKey(r.Key) || r.Schema == "" {
			t.Fatalf("valid put with namespace %q, key %q, schema %q", r.Namespace, r.Key, r.Schema)
		}
		if r.RequestID < 0 || r.RequestID > wire.MaxSafeInteger {
			t.Fatalf("valid put with request_id %d", r.RequestID)
		}
		if got := wire.RequestIDOf(data); got != r.RequestID {
			t.Fatalf("RequestIDOf = %d, Decode says %d", got, r.RequestID)
		}
		if r.ExpectedRevision != nil && (*r.ExpectedRevision < 0 || *r.ExpectedRevision > wire.MaxSafeInteger) {
			t.Fatalf("valid put with expected_revision %d", *r.ExpectedRevision)
		}
		if r.TTLMs != nil && (*r.TTLMs < 0 || *r.TTLMs > wire.MaxSafeInteger) {
			t.Fatalf("valid put with ttl_ms %d", *r.TTLMs)
		}
		if g := r.Guard; g != nil {
			if !wire.ValidKey(g.Key) || g.Key == r.Key || g.Revision < 1 || g.Revision > wire.MaxSafeInteger {
				t.Fatalf("valid put with guard %+v (key %q)", *g, r.Key)
			}
		}
		doc, err := wire.CompactDocument(r.Document)
		if err != nil {
			t.Fatalf("valid put whose document does not compact: %v", err)
		}
		if len(doc) < 2 || doc[0] != '{' || doc[len(doc)-1] != '}' {
			t.Fatalf("compact document %q is not an object", doc)
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber() // a number beyond float64 (1e1000000) is still JSON
		if err := dec.Decode(&obj); err != nil || obj == nil {
			t.Fatalf("compact document %q does not decode to an object: %v", doc, err)
		}
		again, err := wire.CompactDocument(doc)
		if err != nil || !bytes.Equal(again, doc) {
			t.Fatalf("compaction is not idempotent: %q -> %q (%v)", doc, again, err)
		}
		if len(doc) > len(bytes.TrimSpace(r.Document)) {
			t.Fatalf("compact document %q is longer than %q", doc, r.Document)
		}

		// The request holds exactly what the bytes say, its document included.
		sameAsBytes(t, data, &r)

		// What a Go client marshals from a valid request decodes and validates to the same request.
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back wire.PutRequest
		if err := wire.Decode(out, &back); err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("re-validate %s: %v", out, err)
		}
		if back.RequestID != r.RequestID || back.Namespace != r.Namespace || back.Key != r.Key || back.Schema != r.Schema ||
			!eqPtr(back.ExpectedRevision, r.ExpectedRevision) || !eqPtr(back.TTLMs, r.TTLMs) ||
			(back.Guard == nil) != (r.Guard == nil) || (back.Guard != nil && *back.Guard != *r.Guard) {
			t.Fatalf("round trip %+v -> %s -> %+v", r, out, back)
		}
	})
}

func eqPtr(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// requestSeeds are seeds for FuzzDecodeRequests: the op index (into fuzzOps) and a body.
var requestSeeds = []struct {
	op   uint8
	body string
}{
	{0, `{"request_id":1,"namespace":"user/alice","key":"k"}`},
	{0, `{"namespace":"system","key":"workers/alice/w1"}`},
	{0, `{"namespace":"foo/x","key":"k"}`},
	{0, `{"namespace":"user/alice","key":"a//b"}`},
	{1, `{"request_id":3,"namespace":"user/alice","key":"k","expected_revision":1,"guard":{"key":"g","revision":2}}`},
	{1, `{"namespace":"user/alice","key":"k","expected_revision":0}`},
	{1, `{"namespace":"user/alice","key":"k","guard":{"key":"k","revision":1}}`},
	{1, `{"namespace":"user/alice","key":"k","guard":{"key":"g","key":"h","revision":1}}`},
	{1, `{"namespace":"user/alice","key":"k","guard":{"Key":"g","revision":1}}`},
	{1, `{"namespace":"user/alice","key":"k","guard":{"key":"g","revision":1,"revision":2}}`},
	{2, `{"namespace":"user/alice","key_prefix":"a/.","after_key":"a/.b"}`},
	{3, `{"watch_id":"` + strings.Repeat("w", 65) + `","namespace":"service/x"}`},
	{2, `{"namespace":"user/alice","key_prefix":"a/","after_key":"a/b","limit":256}`},
	{2, `{"namespace":"user/alice","key_prefix":"a/./b","limit":257}`},
	{2, `{"namespace":"user/alice","limit":-1}`},
	{2, `{"namespace":"user/alice","limit":0}`},
	{3, `{"request_id":4,"watch_id":"w-1","namespace":"service/x","key_prefix":"intents/"}`},
	{3, `{"watch_id":"w.1","namespace":"service/x"}`},
	{3, `{"watch_id":"w","namespace":"service/x","key_prefix":"/"}`},
	{4, `{"watch_id":"w"}`},
	{4, `{"watch_id":""}`},
	{5, `{"watch_id":"w","applied_sequence":3}`},
	{5, `{"watch_id":"w","applied_sequence":-1}`},
	{5, `{"watch_id":"w","applied_sequence":1.5}`},
	{6, `{"request_id":9007199254740991}`},
	{6, `{"request_id":9007199254740992}`},
	{6, `{}`},
	{6, `{"owner":"x"}`},
	{0, `[]`}, {1, `"x"`}, {2, `1`}, {3, ``}, {4, `{`}, {5, `{} {}`}, {6, `[{}]`},
}

// fuzzOps are the request types FuzzDecodeRequests covers (put has FuzzDecodePut).
var fuzzOps = []wire.Op{wire.OpGet, wire.OpDelete, wire.OpList, wire.OpWatch, wire.OpUnwatch, wire.OpAck, wire.OpInfo}

func FuzzDecodeRequests(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add(s.op, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, opIndex uint8, data []byte) {
		op := fuzzOps[int(opIndex)%len(fuzzOps)]
		var (
			v       validator
			reqID   func() int64
			checkOK func()
		)
		switch op {
		case wire.OpGet:
			r := &wire.GetRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {
				if !wire.ValidNamespace(r.Namespace) || !wire.ValidKey(r.Key) {
					t.Fatalf("valid get %+v", r)
				}
			}
		case wire.OpDelete:
			r := &wire.DeleteRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {
				if !wire.ValidNamespace(r.Namespace) || !wire.ValidKey(r.Key) {
					t.Fatalf("valid delete %+v", r)
				}
				if e := r.ExpectedRevision; e != nil && (*e < 1 || *e > wire.MaxSafeInteger) {
					t.Fatalf("valid delete with expected_revision %d", *e)
				}
				if g := r.Guard; g != nil && (!wire.ValidKey(g.Key) || g.Key == r.Key || g.Revision < 1 || g.Revision > wire.MaxSafeInteger) {
					t.Fatalf("valid delete with guard %+v (key %q)", *g, r.Key)
				}
			}
		case wire.OpList:
			r := &wire.ListRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {
				if !wire.ValidNamespace(r.Namespace) || !wire.ValidKeyPrefix(r.KeyPrefix) || (r.AfterKey != "" && !wire.ValidKey(r.AfterKey)) {
					t.Fatalf("valid list %+v", r)
				}
				if l := r.EffectiveLimit(); l < 1 || l > wire.MaxListLimit || (r.Limit == 0 && l != wire.DefaultListLimit) || (r.Limit != 0 && int64(l) != r.Limit) {
					t.Fatalf("list limit %d, effective %d", r.Limit, l)
				}
			}
		case wire.OpWatch:
			r := &wire.WatchRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {
				if !wire.ValidWatchID(r.WatchID) || !wire.ValidNamespace(r.Namespace) || !wire.ValidKeyPrefix(r.KeyPrefix) {
					t.Fatalf("valid watch %+v", r)
				}
			}
		case wire.OpUnwatch:
			r := &wire.UnwatchRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {
				if !wire.ValidWatchID(r.WatchID) {
					t.Fatalf("valid unwatch %+v", r)
				}
			}
		case wire.OpAck:
			r := &wire.AckRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {
				if !wire.ValidWatchID(r.WatchID) || r.AppliedSequence == nil || *r.AppliedSequence < 0 || *r.AppliedSequence > wire.MaxSafeInteger {
					t.Fatalf("valid ack %+v", r)
				}
			}
		case wire.OpInfo:
			r := &wire.InfoRequest{}
			v, reqID = r, func() int64 { return r.RequestID }
			checkOK = func() {}
		}
		if err := wire.Decode(data, v); err != nil {
			checkFuzzErr(t, err)
			return
		}
		if err := v.Validate(); err != nil {
			checkFuzzErr(t, err)
			return
		}
		checkOK()
		if id := reqID(); id < 0 || id > wire.MaxSafeInteger || wire.RequestIDOf(data) != id {
			t.Fatalf("%s: request_id %d, RequestIDOf %d", op, id, wire.RequestIDOf(data))
		}
		// Requests are JSON objects.
		if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
			t.Fatalf("%s: %q is not a JSON object but validates", op, data)
		}
		// It holds exactly what the bytes say.
		sameAsBytes(t, data, v)
		// The Go encoding of a valid request is itself a valid request.
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := decoders[op](string(out)); err != nil {
			t.Fatalf("%s: re-decode of %s: %v", op, out, err)
		}
	})
}
