package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// This file holds the raw-wire helpers of the conformance tests (conformance_e2e_test.go,
// quota_e2e_test.go): requests are JSON bodies written by hand, and every reply and watch message is
// checked, key by key, against the shapes SPEC sections 3, 5 and 7 spell, before a test looks at its
// values. The Go client is not involved, so its encoding cannot hide a server's mistake.

// rawConn is one principal's NATS connection, used for hand-written requests.
type rawConn struct {
	t         *testing.T
	nc        *nats.Conn
	principal string
}

// nextRequestID numbers the requests rawConn.call sends, so every reply's echo is checked against an
// id no other request carries.
var nextRequestID atomic.Int64

func init() { nextRequestID.Store(1000) }

// dialRaw connects as principal, a member of list, with its credentials and inbox prefix.
func dialRaw(t *testing.T, s *e2e.Stated, list []e2e.Principal, principal string) *rawConn {
	t.Helper()
	pw := ""
	for _, p := range list {
		if p.ID == principal {
			pw = p.Password
		}
	}
	nc, err := nats.Connect(s.URL(), nats.UserInfo(principal, pw), nats.CustomInboxPrefix(wire.InboxPrefix(principal)))
	if err != nil {
		t.Fatalf("connect %s: %v", principal, err)
	}
	t.Cleanup(nc.Close)
	return &rawConn{t: t, nc: nc, principal: principal}
}

// reply is one StateStoreResult as it came over the wire.
type reply struct {
	raw []byte
	obj map[string]any // decoded with UseNumber
	res wire.Result
}

// call sends body, a JSON object without request_id, with a fresh request_id put first, and returns
// the checked reply.
func (c *rawConn) call(op wire.Op, body string) reply {
	c.t.Helper()
	id := nextRequestID.Add(1)
	rest := strings.TrimPrefix(strings.TrimSpace(body), "{")
	sep := ","
	if strings.HasPrefix(strings.TrimSpace(rest), "}") {
		sep = ""
	}
	return c.send(op, fmt.Sprintf(`{"request_id":%d%s%s`, id, sep, rest), id)
}

// send sends body exactly as given and checks that the reply echoes wantID.
func (c *rawConn) send(op wire.Op, body string, wantID int64) reply {
	c.t.Helper()
	msg, err := c.nc.Request(wire.StateSubject(wire.DefaultPrefix, c.principal, op), []byte(body), timeout)
	if err != nil {
		c.t.Fatalf("%s as %s %.300s: %v", op, c.principal, body, err)
	}
	r := checkReply(c.t, op, msg.Data)
	if r.res.RequestID != wantID {
		c.t.Fatalf("%s %.300s: reply carries request_id %d, want %d: %.300s", op, body, r.res.RequestID, wantID, msg.Data)
	}
	return r
}

// ok fails unless the reply is a success.
func (r reply) ok(t *testing.T) reply {
	t.Helper()
	if !r.res.OK {
		t.Fatalf("want ok, got %.500s", r.raw)
	}
	return r
}

// code fails unless the reply is the error code (for CONFLICT and GUARD_FAILED, checkReply has already
// checked that current_revision is there).
func (r reply) code(t *testing.T, code wire.Code) reply {
	t.Helper()
	if r.res.OK || r.res.Error == nil || r.res.Error.Code != code {
		t.Fatalf("want %s, got %.500s", code, r.raw)
	}
	return r
}

// current fails unless the reply is the error code with current_revision rev.
func (r reply) current(t *testing.T, code wire.Code, rev uint64) reply {
	t.Helper()
	r.code(t, code)
	if got := *r.res.Error.CurrentRevision; got != rev {
		t.Fatalf("want %s with current_revision %d, got %.500s", code, rev, r.raw)
	}
	return r
}

// okFields are the fields of each op's ok reply besides request_id and ok (SPEC section 5): required,
// then optional.
var okFields = map[wire.Op][2][]string{
	wire.OpGet:     {{"entry"}, nil},
	wire.OpPut:     {{"entry"}, nil},
	wire.OpDelete:  {{"revision"}, nil},
	wire.OpList:    {{"entries", "revision"}, {"next_after_key"}},
	wire.OpWatch:   {{"watch"}, nil},
	wire.OpUnwatch: {{"watch_id"}, nil},
	wire.OpAck:     {{"watch_id", "applied_sequence"}, nil},
	wire.OpInfo:    {{"server_id", "version", "epoch", "features", "bounds"}, nil},
}

// checkReply decodes a StateStoreResult and checks its shape: the fields SPEC names for the op and
// nothing else, entries and watch states as SPEC spells them, an error with a code of section 8, a
// message, and current_revision exactly on CONFLICT and GUARD_FAILED; every contract integer within
// 0 to 2^53-1.
func checkReply(t *testing.T, op wire.Op, data []byte) reply {
	t.Helper()
	r := reply{raw: data}
	obj, err := decodeObject(data)
	if err != nil {
		t.Fatalf("%s reply is not a JSON object (%v): %.300s", op, err, data)
	}
	r.obj = obj
	if err := json.Unmarshal(data, &r.res); err != nil {
		t.Fatalf("%s reply does not decode as a StateStoreResult (%v): %.300s", op, err, data)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s reply %.400s: %s", op, data, fmt.Sprintf(format, args...))
	}
	if _, ok := obj["request_id"].(json.Number); !ok {
		fail("no integer request_id")
	}
	okv, isBool := obj["ok"].(bool)
	if !isBool {
		fail("no boolean ok")
	}
	if !okv {
		if problem := shapeProblem(obj, []string{"request_id", "ok", "error"}, nil); problem != "" {
			fail("error reply: %s", problem)
		}
		e, _ := obj["error"].(map[string]any)
		if e == nil {
			fail("error is not an object")
		}
		code, _ := e["code"].(string)
		if !slices.Contains(wire.Codes, wire.Code(code)) {
			fail("unknown error code %q", code)
		}
		required := []string{"code", "message"}
		if code == string(wire.CodeConflict) || code == string(wire.CodeGuardFailed) {
			required = append(required, "current_revision") // present even when 0
		}
		if problem := shapeProblem(e, required, nil); problem != "" {
			fail("error object: %s", problem)
		}
		if msg, _ := e["message"].(string); msg == "" {
			fail("empty error message")
		}
	} else {
		f := okFields[op]
		if problem := shapeProblem(obj, append([]string{"request_id", "ok"}, f[0]...), f[1]); problem != "" {
			fail("%s", problem)
		}
		switch op {
		case wire.OpGet, wire.OpPut:
			if problem := entryProblem(obj["entry"]); problem != "" {
				fail("entry: %s", problem)
			}
		case wire.OpList:
			if problem := entriesProblem(obj["entries"]); problem != "" {
				fail("entries: %s", problem)
			}
			if nak, ok := obj["next_after_key"]; ok {
				if s, _ := nak.(string); s == "" {
					fail("next_after_key present but not a key")
				}
			}
		case wire.OpWatch:
			w, _ := obj["watch"].(map[string]any)
			if problem := shapeProblem(w, []string{"watch_id", "namespace", "key_prefix", "snapshot_revision", "entries"}, nil); problem != "" {
				fail("watch: %s", problem)
			}
			if problem := entriesProblem(w["entries"]); problem != "" {
				fail("watch entries: %s", problem)
			}
		case wire.OpInfo:
			b, _ := obj["bounds"].(map[string]any)
			names := []string{"max_document_bytes", "max_entries_per_namespace", "max_namespaces", "max_total_value_bytes",
				"max_snapshot_entries", "max_snapshot_bytes", "max_watches", "max_watches_per_principal", "max_pending_updates", "ack_deadline_ms",
				"max_workers_per_principal"} // the last is not in section 8: the server's own bound
			if problem := shapeProblem(b, names, nil); problem != "" {
				fail("bounds: %s", problem)
			}
		}
	}
	if problem := integersProblem("", obj); problem != "" {
		fail("%s", problem)
	}
	return r
}

func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data")
	}
	if obj == nil {
		return nil, fmt.Errorf("null")
	}
	return obj, nil
}

// shapeProblem describes how obj's keys differ from required plus optional ("" when they do not).
func shapeProblem(obj map[string]any, required, optional []string) string {
	if obj == nil {
		return "not an object"
	}
	var missing, unknown []string
	for _, k := range required {
		if _, ok := obj[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range obj {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	if len(missing)+len(unknown) == 0 {
		return ""
	}
	return fmt.Sprintf("missing fields %v, unexpected fields %v", missing, unknown)
}

// entryProblem checks a StateEntry (SPEC section 3): ttl_ms and expires_at_ms come together or not at
// all, and the document is an object.
func entryProblem(v any) string {
	e, _ := v.(map[string]any)
	if p := shapeProblem(e, []string{"namespace", "key", "schema", "owner", "revision", "created_at_ms", "updated_at_ms", "document"},
		[]string{"ttl_ms", "expires_at_ms"}); p != "" {
		return p
	}
	_, ttl := e["ttl_ms"]
	_, exp := e["expires_at_ms"]
	if ttl != exp {
		return "ttl_ms and expires_at_ms must come together"
	}
	if _, ok := e["document"].(map[string]any); !ok {
		return "document is not an object"
	}
	for _, k := range []string{"namespace", "key", "schema", "owner"} {
		if s, _ := e[k].(string); s == "" {
			return k + " is not a non-empty string"
		}
	}
	return ""
}

func entriesProblem(v any) string {
	list, ok := v.([]any)
	if !ok {
		return fmt.Sprintf("not an array: %v", v)
	}
	for i, e := range list {
		if p := entryProblem(e); p != "" {
			return fmt.Sprintf("entry %d: %s", i, p)
		}
	}
	return ""
}

var safeInteger = regexp.MustCompile(`^(0|[1-9][0-9]{0,15})$`)

// integersProblem finds a number of the contract (documents excluded: they are the user's) that is not
// an integer from 0 to 2^53-1.
func integersProblem(path string, v any) string {
	switch v := v.(type) {
	case json.Number:
		n, err := strconv.ParseUint(v.String(), 10, 64)
		if !safeInteger.MatchString(v.String()) || err != nil || n > wire.MaxSafeInteger {
			return fmt.Sprintf("%s is %s, not an integer from 0 to 2^53-1", path, v)
		}
	case map[string]any:
		for k, e := range v {
			if k == "document" {
				continue
			}
			if p := integersProblem(path+"."+k, e); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range v {
			if p := integersProblem(fmt.Sprintf("%s[%d]", path, i), e); p != "" {
				return p
			}
		}
	}
	return ""
}

// watchMsg is one message of a watch's delivery subject as it came over the wire.
type watchMsg struct {
	raw []byte
	obj map[string]any
	m   wire.WatchMessage
}

// nextWatchMsg reads the next message of sub and checks its shape (SPEC section 7): an update carries
// watch_id, watch_sequence, revision, kind and key, and entry exactly when its kind is PUT; a close
// carries watch_id, kind CLOSED, a reason of section 7.6 and a message.
func nextWatchMsg(t *testing.T, sub *nats.Subscription) watchMsg {
	t.Helper()
	msg, err := sub.NextMsg(timeout)
	if err != nil {
		t.Fatalf("no message on %s: %v", sub.Subject, err)
	}
	return checkWatchMsg(t, msg.Data)
}

func checkWatchMsg(t *testing.T, data []byte) watchMsg {
	t.Helper()
	w := watchMsg{raw: data}
	obj, err := decodeObject(data)
	if err != nil {
		t.Fatalf("watch message is not a JSON object (%v): %.300s", err, data)
	}
	w.obj = obj
	if err := json.Unmarshal(data, &w.m); err != nil {
		t.Fatalf("watch message %.300s: %v", data, err)
	}
	var problem string
	switch w.m.Kind {
	case wire.UpdatePut:
		problem = shapeProblem(obj, []string{"watch_id", "watch_sequence", "revision", "kind", "key", "entry"}, nil)
		if problem == "" {
			problem = entryProblem(obj["entry"])
		}
		if problem == "" && (w.m.Entry.Key != w.m.Key || w.m.Entry.Revision != w.m.Revision) {
			problem = "the entry's key or revision differs from the update's"
		}
	case wire.UpdateDelete, wire.UpdateExpire:
		problem = shapeProblem(obj, []string{"watch_id", "watch_sequence", "revision", "kind", "key"}, nil)
	case wire.UpdateClosed:
		problem = shapeProblem(obj, []string{"watch_id", "kind", "reason", "message"}, nil)
		if problem == "" && !slices.Contains([]wire.CloseReason{wire.CloseOverflow, wire.CloseAckTimeout, wire.CloseUnauthorized,
			wire.CloseSnapshotFailed, wire.CloseRestored, wire.CloseShutdown}, w.m.Reason) {
			problem = fmt.Sprintf("unknown close reason %q", w.m.Reason)
		}
	default:
		problem = fmt.Sprintf("unknown kind %q", w.m.Kind)
	}
	if problem == "" {
		problem = integersProblem("", obj)
	}
	if problem != "" {
		t.Fatalf("watch message %.400s: %s", data, problem)
	}
	return w
}

// subscribeWatch subscribes to the delivery subject of the principal's watch id (">" for all of
// them) and flushes, so the subscription is in place before the watch request.
func (c *rawConn) subscribeWatch(id string) *nats.Subscription {
	c.t.Helper()
	sub, err := c.nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, c.principal, id))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		c.t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// noMessage fails if sub holds a message (one already delivered to the client).
func noMessage(t *testing.T, sub *nats.Subscription, what string) {
	t.Helper()
	if n, _, _ := sub.Pending(); n != 0 {
		msg, _ := sub.NextMsg(0)
		var data []byte
		if msg != nil {
			data = msg.Data
		}
		t.Fatalf("%s: unexpected message %s", what, data)
	}
}

// leaseBody is the document of a keeppeek.lease.v1 entry whose compact encoding is exactly size bytes
// (at least leaseBase): its purpose is padded with a text no content rule refuses.
func leaseBody(t *testing.T, size int) string {
	t.Helper()
	pad := size - leaseBase
	if pad < 0 {
		t.Fatalf("a lease document cannot be %d bytes", size)
	}
	doc := `{"holder":"w1","claimed_at_ms":1,"purpose":"` + strings.Repeat("ab ", pad/3) + strings.Repeat("a", pad%3) + `"}`
	if len(doc) != size {
		t.Fatalf("lease document of %d bytes, want %d", len(doc), size)
	}
	return doc
}

// leaseBase is the size of a lease document with an empty purpose.
var leaseBase = len(`{"holder":"w1","claimed_at_ms":1,"purpose":""}`)

// putLeaseRaw is the body of a put of a lease document.
func putLeaseRaw(ns, key, doc, extra string) string {
	return fmt.Sprintf(`{"namespace":%q,"key":%q,"schema":"keeppeek.lease.v1","document":%s%s}`, ns, key, doc, extra)
}

const smallLease = `{"holder":"w1","claimed_at_ms":1}`

// natsUser is the credentials option of principal, a member of list.
func natsUser(list []e2e.Principal, principal string) nats.Option {
	for _, p := range list {
		if p.ID == principal {
			return nats.UserInfo(p.ID, p.Password)
		}
	}
	return nats.UserInfo(principal, "")
}
