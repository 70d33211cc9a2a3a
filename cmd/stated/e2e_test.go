package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

func TestMain(m *testing.M) { e2e.Main(m) }

const timeout = 10 * time.Second

var principals = []e2e.Principal{
	{ID: "coordinator", Admin: true, Password: "coord-pw"},
	{ID: "ops", Admin: true, Password: "ops-pw"},
	{ID: "alice", Password: "alice-pw"},
	{ID: "bob", Password: "bob-pw"},
}

func password(id string) string {
	for _, p := range principals {
		if p.ID == id {
			return p.Password
		}
	}
	return ""
}

// conn connects as principal and collects asynchronous errors (permission violations).
func conn(t *testing.T, s *e2e.Stated, principal string) (*nats.Conn, chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(s.URL(), nats.UserInfo(principal, password(principal)),
		nats.CustomInboxPrefix(wire.InboxPrefix(principal)), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect %s: %v", principal, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func request(t *testing.T, nc *nats.Conn, principal string, op wire.Op, body string) wire.Result {
	t.Helper()
	return natstest.Request(t, nc, principal, op, body, timeout)
}

func wantViolation(t *testing.T, errs chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("%s: got %v, want a permissions violation", what, err)
		}
	case <-time.After(timeout):
		t.Fatalf("%s: no permissions violation", what)
	}
}

func startStated(t *testing.T) *e2e.Stated {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	s.Start()
	return s
}

// startWith starts stated with extra configuration (TOML appended to the test's), and gives a context
// for the test's calls, bounded to a minute.
func startWith(t *testing.T, extra string) (*e2e.Stated, context.Context) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals, Extra: extra})
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return s, ctx
}

const leaseDoc = `{"holder":"w1","claimed_at_ms":1}`

func TestE2EPermissionMatrix(t *testing.T) {
	s := startStated(t)
	alice, errs := conn(t, s, "alice")
	// Her own subjects work.
	r := request(t, alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"prefs","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`)
	if !r.OK {
		t.Fatalf("alice's own put: %+v", r)
	}
	if _, err := alice.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "alice", "w")); err != nil {
		t.Fatal(err)
	}
	// Publishing under bob's principal token is refused by NATS.
	if err := alice.Publish(wire.StateSubject(wire.DefaultPrefix, "bob", wire.OpGet), []byte(`{"namespace":"user/bob","key":"k"}`)); err != nil {
		t.Fatal(err)
	}
	wantViolation(t, errs, "publish under bob")
	// Subscribing to bob's watch subjects or inbox is refused.
	if _, err := alice.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "bob", "w")); err != nil {
		t.Fatal(err)
	}
	wantViolation(t, errs, "subscribe to bob's watch")
	if _, err := alice.SubscribeSync(wire.InboxPrefix("bob") + ".x"); err != nil {
		t.Fatal(err)
	}
	wantViolation(t, errs, "subscribe to bob's inbox")
	// A non-admin cannot publish on $SRV.>; an admin can discover the service.
	if err := alice.Publish("$SRV.PING", nil); err != nil {
		t.Fatal(err)
	}
	wantViolation(t, errs, "alice on $SRV")
	coord, _ := conn(t, s, "coordinator")
	msg, err := coord.Request("$SRV.PING.keeppeek-state", nil, timeout)
	if err != nil || !strings.Contains(string(msg.Data), "keeppeek-state") {
		t.Fatalf("admin service discovery: %v", err)
	}
	// The service announces the version info reports (without semver's forbidden "v").
	info := request(t, coord, "coordinator", wire.OpInfo, `{}`)
	if want := `"version":"` + strings.TrimPrefix(info.Version, "v") + `"`; info.Version == "" || !strings.Contains(string(msg.Data), want) {
		t.Fatalf("$SRV.PING answered %s, want %s (info's version)", msg.Data, want)
	}
	// Bad credentials do not connect.
	if _, err := nats.Connect(s.URL(), nats.UserInfo("alice", "wrong")); err == nil {
		t.Fatalf("wrong password connected")
	}
	// Namespace policy still applies within one's own subjects.
	r = request(t, alice, "alice", wire.OpGet, `{"namespace":"user/bob","key":"k"}`)
	if r.OK || r.Error.Code != wire.CodePermissionDenied {
		t.Fatalf("alice reading user/bob: %+v", r)
	}
}

func TestE2ENATSPermissionsCommand(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	out, err := runStated(t, "nats-permissions", "--config", s.ConfigPath)
	if err != nil {
		t.Fatalf("nats-permissions: %v\n%s", err, out)
	}
	for _, want := range []string{`"kp.state.v1.alice.>"`, `"_INBOX.alice.>"`, `"kp.watch.v1.alice.>"`, `"$SRV.>"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("nats-permissions output lacks %s:\n%s", want, out)
		}
	}
}

func runStated(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := execCommand(e2e.Binary(t, "stated"), args...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

func TestE2ESighupRevocationClosesWatch(t *testing.T) {
	s := startStated(t)
	ops, _ := conn(t, s, "ops")
	sub, err := ops.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "ops", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if r := request(t, ops, "ops", wire.OpWatch, `{"watch_id":"w","namespace":"service/tx"}`); !r.OK {
		t.Fatalf("watch %+v", r)
	}
	// ops loses admin.
	demoted := append([]e2e.Principal(nil), principals...)
	demoted[1].Admin = false
	s.WriteConfig(e2e.Config{Principals: demoted})
	s.Reload()
	msg, err := sub.NextMsg(timeout)
	if err != nil {
		t.Fatalf("no close after SIGHUP: %v\n%s", err, s.Logs())
	}
	var m wire.WatchMessage
	if err := json.Unmarshal(msg.Data, &m); err != nil || m.Kind != wire.UpdateClosed || m.Reason != wire.CloseUnauthorized {
		t.Fatalf("close %s", msg.Data)
	}
	// ops keeps its connection, now without admin rights.
	r := request(t, ops, "ops", wire.OpGet, `{"namespace":"service/tx","key":"k"}`)
	if r.OK || r.Error.Code != wire.CodePermissionDenied {
		t.Fatalf("demoted ops reading service/: %+v", r)
	}
}

func TestE2ESigtermShutsWatchesAndExitsZero(t *testing.T) {
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	sub, _ := coord.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "w"))
	if r := request(t, coord, "coordinator", wire.OpWatch, `{"watch_id":"w","namespace":"service/tx"}`); !r.OK {
		t.Fatalf("watch %+v", r)
	}
	if r := request(t, coord, "coordinator", wire.OpPut, `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`); !r.OK {
		t.Fatalf("put %+v", r)
	}
	done := make(chan int, 1)
	go func() { done <- s.Term() }()
	var kinds []string
	for {
		msg, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatalf("watch messages %v: %v", kinds, err)
		}
		var m wire.WatchMessage
		_ = json.Unmarshal(msg.Data, &m)
		kinds = append(kinds, string(m.Kind)+":"+string(m.Reason))
		if m.Kind == wire.UpdateClosed {
			if m.Reason != wire.CloseShutdown {
				t.Fatalf("closed with %s", m.Reason)
			}
			break
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d\n%s", code, s.Logs())
	}
	if kinds[0] != "PUT:" {
		t.Fatalf("messages %v", kinds)
	}
}

func TestE2EGarbageDatabaseIsUnavailable(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	if err := os.MkdirAll(s.Dir+"/data", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.DatabasePath(), []byte(strings.Repeat("garbage!", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	r := request(t, coord, "coordinator", wire.OpGet, `{"namespace":"service/tx","key":"k"}`)
	if r.OK || r.Error.Code != wire.CodeUnavailable {
		t.Fatalf("get on a garbage database: %+v", r)
	}
	// UNAVAILABLE comes before every other check (SPEC section 5, check 0): a request with an unknown
	// field, or one that is not JSON, is answered UNAVAILABLE too.
	for body, id := range map[string]int64{`{"request_id":3,"namespace":"service/x","key":"a","owner":"x"}`: 3, `not json`: 0} {
		r := request(t, coord, "coordinator", wire.OpGet, body)
		if r.OK || r.Error.Code != wire.CodeUnavailable || r.RequestID != id {
			t.Fatalf("get %s on a garbage database: %+v", body, r)
		}
	}
	info := request(t, coord, "coordinator", wire.OpInfo, `{}`)
	if !info.OK || len(info.Features) != 0 {
		t.Fatalf("info of an unavailable store %+v", info)
	}
	resp, err := http.Get(s.HTTP() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not served") {
		t.Fatalf("readyz %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Get(s.HTTP() + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz while unavailable: %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestE2EHeartbeatsEndInOneExpire(t *testing.T) {
	s := startStated(t)
	coord, _ := conn(t, s, "coordinator")
	alice, _ := conn(t, s, "alice")
	sub, _ := coord.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "coordinator", "workers"))
	if r := request(t, coord, "coordinator", wire.OpWatch, `{"watch_id":"workers","namespace":"system","key_prefix":"workers/"}`); !r.OK {
		t.Fatalf("watch %+v", r)
	}
	hb := `{"worker_id":"tx-1","service":"transcoder-a","sequence":%d,"sent_at_ms":1,"interval_ms":300,"status":"ready","leases":[]}`
	for i := 1; i <= 5; i++ {
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "tx-1"), fmt.Appendf(nil, hb, i)); err != nil {
			t.Fatal(err)
		}
		if err := alice.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	var kinds []wire.UpdateKind
	for len(kinds) < 2 {
		msg, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatalf("updates %v: %v", kinds, err)
		}
		var m wire.WatchMessage
		_ = json.Unmarshal(msg.Data, &m)
		kinds = append(kinds, m.Kind)
		request(t, coord, "coordinator", wire.OpAck, fmt.Sprintf(`{"watch_id":"workers","applied_sequence":%d}`, m.WatchSequence))
	}
	if kinds[0] != wire.UpdatePut || kinds[1] != wire.UpdateExpire {
		t.Fatalf("updates %v, want one PUT then one EXPIRE", kinds)
	}
	// The metrics count the heartbeats: each handled, or replaced while it waited by the worker's next.
	m := scrape(t, s)
	accepted := value(m, "state_heartbeats_total", map[string]string{"outcome": "accepted"})
	superseded := value(m, "state_heartbeats_total", map[string]string{"outcome": "superseded"})
	if accepted < 1 || accepted+superseded != 5 || value(m, "state_backend_info", map[string]string{"type": "bbolt"}) != 1 {
		t.Fatalf("metrics: %v heartbeats accepted and %v superseded, want 5 in all; backend info %v",
			accepted, superseded, value(m, "state_backend_info", map[string]string{"type": "bbolt"}))
	}
}

// metricsText reads stated's /metrics.
func metricsText(t *testing.T, s *e2e.Stated) string {
	t.Helper()
	resp, err := http.Get(s.HTTP() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestE2EWatchOfAVanishedClientIsDropped: with the embedded NATS server, a watch whose client
// disconnected without unwatching is dropped after two sweeps find no subscriber, freeing its slot
// (the principal can open the same watch id again, which WATCH_EXISTS refused before).
func TestE2EWatchOfAVanishedClientIsDropped(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals, WatchSweepMs: 50})
	s.Start()
	nc, _ := conn(t, s, "alice")
	if _, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "alice", "w")); err != nil {
		t.Fatal(err)
	}
	if r := request(t, nc, "alice", wire.OpWatch, `{"watch_id":"w","namespace":"user/alice"}`); !r.OK {
		t.Fatalf("watch: %+v", r)
	}
	other, _ := conn(t, s, "alice")
	if r := request(t, other, "alice", wire.OpWatch, `{"watch_id":"w","namespace":"user/alice"}`); r.OK || r.Error.Code != wire.CodeWatchExists {
		t.Fatalf("second watch while the first is live: %+v", r)
	}
	nc.Close()

	deadline := time.Now().Add(timeout)
	for !strings.Contains(metricsText(t, s), "state_watches_dropped_total 1") {
		if time.Now().After(deadline) {
			t.Fatalf("the watch was not dropped:\n%s", metricsText(t, s))
		}
		time.Sleep(20 * time.Millisecond)
	}
	again, _ := conn(t, s, "alice")
	if _, err := again.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "alice", "w")); err != nil {
		t.Fatal(err)
	}
	if r := request(t, again, "alice", wire.OpWatch, `{"watch_id":"w","namespace":"user/alice"}`); !r.OK {
		t.Fatalf("watch again: %+v", r)
	}
}
