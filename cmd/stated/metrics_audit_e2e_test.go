package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// kindGauges are state_entries, state_value_bytes and state_namespaces of one namespace kind.
type kindGauges struct{ entries, bytes, spaces float64 }

func gaugesOf(m map[string]*dto.MetricFamily, kind string) kindGauges {
	l := map[string]string{"kind": kind}
	return kindGauges{value(m, "state_entries", l), value(m, "state_value_bytes", l), value(m, "state_namespaces", l)}
}

// awaitKinds scrapes until every kind in want shows exactly its gauges (bounded), and fails with the
// last scrape's values otherwise.
func awaitKinds(t *testing.T, s *e2e.Stated, what string, want map[string]kindGauges) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m := scrape(t, s)
		ok := true
		for kind, g := range want {
			ok = ok && gaugesOf(m, kind) == g
		}
		if ok {
			return m
		}
		if time.Now().After(deadline) {
			got := map[string]kindGauges{}
			for kind := range want {
				got[kind] = gaugesOf(m, kind)
			}
			t.Fatalf("%s: gauges %+v, want %+v", what, got, want)
		}
		time.Sleep(20 * time.Millisecond) // a poll of /metrics: stated offers no event to await
	}
}

// counterValues are every counter series (and histogram counts) of a scrape, by family and labels.
func counterValues(m map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range m {
		if !strings.HasPrefix(name, "state_") {
			continue
		}
		for _, s := range f.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(ls, ",") + "}"
			switch {
			case s.Counter != nil:
				out[key] = s.GetCounter().GetValue()
			case s.Histogram != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestE2EMetricsStoreGaugesFollowEveryChange checks state_entries, state_value_bytes and
// state_namespaces exactly, per kind, through what the existing metrics tests do not drive: deletes
// that empty a namespace (it leaves state_namespaces), TTL expiry, a settings-backed namespace
// written and then edited by hand and reloaded with SIGHUP (whose counters must not go backwards), a
// restart (the gauges come from the reopened store, state_watches from zero), an entry that expired
// while stated was down, and a restore of an earlier backup.
func TestE2EMetricsStoreGaugesFollowEveryChange(t *testing.T) {
	s, ctx := startWith(t, "[state_store.settings.\"service/mqtt-bridge\"]\n")
	coord := goClient(t, s, "coordinator")
	alice := goClient(t, s, "alice")
	zero := kindGauges{}
	put := func(ns, key, schema, doc string, ttl int64) {
		t.Helper()
		req := wire.PutRequest{Namespace: ns, Key: key, Schema: schema, Document: json.RawMessage(doc)}
		if ttl > 0 {
			req.TTLMs = &ttl
		}
		c := coord
		if ns == "user/alice" {
			c = alice
		}
		if _, err := c.Put(ctx, req); err != nil {
			t.Fatalf("put %s %s: %v", ns, key, err)
		}
	}
	del := func(ns, key string) {
		t.Helper()
		if _, err := coord.Delete(ctx, wire.DeleteRequest{Namespace: ns, Key: key}); err != nil {
			t.Fatalf("delete %s %s: %v", ns, key, err)
		}
	}
	docA, docB := `{"holder":"w1","claimed_at_ms":1}`, `{"holder":"worker-two","claimed_at_ms":2}`
	awaitKinds(t, s, "at start", map[string]kindGauges{"service": zero, "user": zero, "group": zero, "system": zero})

	put("service/tx", "a", wire.SchemaLease, docA, 0)
	put("service/tx", "b", wire.SchemaLease, docB, 0)
	put("service/rx", "a", wire.SchemaLease, docA, 0)
	awaitKinds(t, s, "three leases in two namespaces", map[string]kindGauges{
		"service": {3, 2*compactLen(t, docA) + compactLen(t, docB), 2}})
	del("service/tx", "b")
	del("service/tx", "a")
	awaitKinds(t, s, "service/tx emptied by deletes", map[string]kindGauges{"service": {1, compactLen(t, docA), 1}})

	// An entry with a TTL: counted while it lives, gone from every gauge when it expires.
	prefs := `{"kind":"ui"}`
	put("user/alice", "prefs", wire.SchemaPreference, prefs, 3000) // long enough to be scraped on a loaded machine
	awaitKinds(t, s, "a TTL entry", map[string]kindGauges{"user": {1, compactLen(t, prefs), 1}})
	awaitKinds(t, s, "the TTL entry expired", map[string]kindGauges{"user": zero, "service": {1, compactLen(t, docA), 1}})

	// A settings-backed namespace: written through stated, then edited by hand and reloaded.
	put("service/mqtt-bridge", "bridge/config", wire.SchemaLease, docA, 0)
	awaitKinds(t, s, "a settings entry", map[string]kindGauges{"service": {2, 2 * compactLen(t, docA), 2}})
	before := counterValues(scrape(t, s))
	raw, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), `\"holder\":\"w1\"`, `\"holder\":\"hand-edited-holder\"`, 1)
	if edited == string(raw) {
		t.Fatalf("the settings entry's document is not in the configuration file:\n%s", raw)
	}
	if err := os.WriteFile(s.ConfigPath, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	docEdited := `{"holder":"hand-edited-holder","claimed_at_ms":1}`
	m := awaitKinds(t, s, "the settings entry edited by hand and reloaded", map[string]kindGauges{
		"service": {2, compactLen(t, docA) + compactLen(t, docEdited), 2}})
	after := counterValues(m)
	// Nine changes so far, each in one commit's batch: three puts, two deletes, a put with a TTL and
	// its expiry, the settings put and the reloaded edit.
	cb, _ := sample(m, "state_commit_batch_size", nil)
	cs, _ := sample(m, "state_commit_duration_seconds", nil)
	if sum := cb.GetHistogram().GetSampleSum(); sum != 9 {
		t.Errorf("commit batch sizes add up to %v, want 9 changes", sum)
	}
	if n := cb.GetHistogram().GetSampleCount(); n == 0 || n > 9 || n != cs.GetHistogram().GetSampleCount() {
		t.Errorf("%d commit batches and %d commit latencies: want equal, 1 to 9", n, cs.GetHistogram().GetSampleCount())
	}
	for k, v := range before {
		if after[k] < v {
			t.Errorf("%s went backwards across SIGHUP: %v, then %v", k, v, after[k])
		}
	}

	// A watch open at SIGTERM: state_watches after the restart counts only the reopened store's.
	openWatch(t, coord, "at-restart", "service/rx", "")
	if n := value(scrape(t, s), "state_watches", nil); n != 1 {
		t.Fatalf("state_watches with one watch: %v", n)
	}
	// An entry that expires while stated is down.
	put("user/alice", "short", wire.SchemaPreference, prefs, 3000) // long enough to be scraped on a loaded machine
	expires := time.Now().Add(3 * time.Second)
	wantService := kindGauges{2, compactLen(t, docA) + compactLen(t, docEdited), 2}
	awaitKinds(t, s, "before the restart", map[string]kindGauges{"service": wantService, "user": {1, compactLen(t, prefs), 1}})
	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	time.Sleep(time.Until(expires) + 50*time.Millisecond) // the TTL runs out while stated is down
	s.Start()
	m = awaitKinds(t, s, "after the restart", map[string]kindGauges{"service": wantService, "user": zero, "group": zero, "system": zero})
	if n := value(m, "state_watches", nil); n != 0 {
		t.Errorf("state_watches after a restart: %v", n)
	}
	if n := value(m, "state_backend_info", map[string]string{"type": "bbolt"}); n != 1 {
		t.Errorf("state_backend_info after a restart: %v", n)
	}

	// A restore of a backup taken now brings these gauges back after more changes.
	backup := s.OfflineBackup()
	coord = goClient(t, s, "coordinator")
	alice = goClient(t, s, "alice")
	del("service/rx", "a")
	put("user/alice", "prefs", wire.SchemaPreference, prefs, 0)
	awaitKinds(t, s, "after more changes", map[string]kindGauges{"service": {1, compactLen(t, docEdited), 1}, "user": {1, compactLen(t, prefs), 1}})
	s.Restore(backup)
	awaitKinds(t, s, "after the restore", map[string]kindGauges{"service": wantService, "user": zero})
}

// requestBattery sends, as alice and coordinator, requests of every op that end in as many codes as
// can be reached from outside (bad JSON, a missing field, another principal's namespace, an ack too
// large to queue, a schema refusal, a conflict, a missing entry, a refused admin call), tallies each
// by the code its reply carried, and returns the tally.
func requestBattery(t *testing.T, s *e2e.Stated) map[[2]string]float64 {
	t.Helper()
	alice, _ := conn(t, s, "alice")
	coord, _ := conn(t, s, "coordinator")
	got := map[[2]string]float64{}
	tally := func(op string, e *wire.Error) {
		code := "OK"
		if e != nil {
			code = string(e.Code)
		}
		got[[2]string{op, code}]++
	}
	send := func(nc *nats.Conn, principal string, op wire.Op, body string) {
		t.Helper()
		tally(string(op), request(t, nc, principal, op, body).Error)
	}
	for _, op := range wire.Ops {
		send(alice, "alice", op, `not json`)
		send(alice, "alice", op, `{}`)
	}
	for op, body := range map[wire.Op]string{
		wire.OpGet:    `{"namespace":"user/bob","key":"k"}`,
		wire.OpPut:    `{"namespace":"user/bob","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`,
		wire.OpDelete: `{"namespace":"user/bob","key":"k"}`,
		wire.OpList:   `{"namespace":"user/bob"}`,
		wire.OpWatch:  `{"watch_id":"w","namespace":"user/bob"}`,
	} {
		send(alice, "alice", op, body)
	}
	send(alice, "alice", wire.OpAck, `{"watch_id":"w","applied_sequence":1,"pad":"`+strings.Repeat("x", 5000)+`"}`)
	send(alice, "alice", wire.OpUnwatch, `{"watch_id":"w","pad":"`+strings.Repeat("x", 5000)+`"}`)
	send(alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"keeppeek.preference.v1","document":{"kind":7}}`)
	send(alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"},"expected_revision":5}`)
	send(alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`)
	send(alice, "alice", wire.OpDelete, `{"namespace":"user/alice","key":"missing"}`)
	send(coord, "coordinator", wire.OpList, `{"namespace":"service/tx"}`)
	admin := func(nc *nats.Conn, principal string, op wire.Op, body string) {
		t.Helper()
		msg, err := nc.Request(wire.AdminSubject(wire.DefaultPrefix, principal, op), []byte(body), timeout)
		if err != nil {
			t.Fatalf("admin %s: %v", op, err)
		}
		var r wire.AdminResult
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatalf("admin reply %s: %v", msg.Data, err)
		}
		tally(string(op), r.Error)
	}
	admin(coord, "coordinator", wire.AdminAuditVerify, `{"request_id":2}`)
	admin(coord, "coordinator", wire.AdminBackup, `not json`)
	admin(coord, "coordinator", wire.AdminBackup, `{"request_id":3,"step":"read","backup_id":"nope"}`)
	return got
}

// checkCounted waits until state_requests_total has risen from base by at least want, then checks it
// rose by exactly want, series by series, and that every op's latency histogram holds one
// observation per counted request.
func checkCounted(t *testing.T, s *e2e.Stated, base, want map[[2]string]float64) map[string]*dto.MetricFamily {
	t.Helper()
	m := awaitMetrics(t, s, "every request counted", func(m map[string]*dto.MetricFamily) bool {
		got := requestCounts(m)
		for k, n := range want {
			if got[k]-base[k] < n {
				return false
			}
		}
		return true
	})
	got := requestCounts(m)
	keys := map[[2]string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	for k := range keys {
		if d := got[k] - base[k]; d != want[k] {
			t.Errorf("state_requests_total{op=%q,code=%q} rose by %v, want %v (the replies' codes)", k[0], k[1], d, want[k])
		}
	}
	perOp := map[string]float64{}
	for k, n := range got {
		perOp[k[0]] += n
	}
	for op, n := range perOp {
		h, _ := sample(m, "state_request_duration_seconds", map[string]string{"op": op})
		if c := float64(h.GetHistogram().GetSampleCount()); c != n {
			t.Errorf("state_request_duration_seconds{op=%q} holds %v observations, want %v", op, c, n)
		}
	}
	return m
}

// TestE2EMetricsCountEveryCodeAsAnswered: every request of a battery that reaches every code a
// client can provoke is counted exactly once, under the code its reply carried, both by a stated
// that serves its store and by one whose store is not served (a damaged database: UNAVAILABLE, which
// /readyz reports and the gauges show as an empty store).
func TestE2EMetricsCountEveryCodeAsAnswered(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals})
	s.Start()
	want := requestBattery(t, s)
	checkCounted(t, s, nil, want)
	if want[[2]string{"put", "OK"}] != 1 || want[[2]string{"get", string(wire.CodePermissionDenied)}] != 1 ||
		want[[2]string{"watch", string(wire.CodePermissionDenied)}] != 1 {
		t.Errorf("the battery did not reach what it should: %v", want)
	}

	if code := s.Term(); code != 0 {
		t.Fatalf("stated exited %d\n%s", code, s.Logs())
	}
	if err := os.WriteFile(s.DatabasePath(), []byte(strings.Repeat("not a bbolt database ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()
	resp, err := (&http.Client{Timeout: timeout}).Get(s.HTTP() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a store not served: %d, want 503", resp.StatusCode)
	}
	base := requestCounts(scrape(t, s))
	for k, n := range base {
		if n != 0 {
			t.Errorf("state_requests_total{op=%q,code=%q} = %v in a new process before any request came", k[0], k[1], n)
		}
	}
	want = requestBattery(t, s)
	m := checkCounted(t, s, base, want)
	if want[[2]string{"put", string(wire.CodeUnavailable)}] == 0 {
		t.Errorf("puts to a store not served were not answered UNAVAILABLE: %v", want)
	}
	for _, kind := range []string{"system", "service", "group", "user"} {
		if g := gaugesOf(m, kind); g != (kindGauges{}) {
			t.Errorf("gauges of %s in a store not served: %+v", kind, g)
		}
	}
	if n := value(m, "state_backend_info", map[string]string{"type": "bbolt"}); n != 1 {
		t.Errorf("state_backend_info: %v", n)
	}
}

// TestE2EMetricsCountSettingsWriteRefusals: a write to a settings-backed namespace whose file cannot
// be loaded (moved away, then left unparsable by a hand edit) is answered STORAGE and counted so in
// state_requests_total, while the other namespaces' writes commit. (Nothing was written, so it is
// not in state_commit_failures_total, which counts commits the disk refused.)
func TestE2EMetricsCountSettingsWriteRefusals(t *testing.T) {
	s := e2e.NewStated(t, e2e.Config{Principals: principals, Extra: "[state_store.settings.\"service/mqtt-bridge\"]\n"})
	s.Start()
	coord, _ := conn(t, s, "coordinator")
	put := `{"namespace":"service/mqtt-bridge","key":"bridge/config","schema":"keeppeek.lease.v1","document":` + leaseDoc + `}`
	other := `{"namespace":"service/tx","key":"k","schema":"keeppeek.lease.v1","document":` + leaseDoc + `}`
	if r := request(t, coord, "coordinator", wire.OpPut, put); !r.OK {
		t.Fatalf("settings put: %+v", r)
	}
	base := requestCounts(scrape(t, s))
	away := s.ConfigPath + ".moved"
	if err := os.Rename(s.ConfigPath, away); err != nil {
		t.Fatal(err)
	}
	if r := request(t, coord, "coordinator", wire.OpPut, put); r.OK || r.Error.Code != wire.CodeStorage {
		t.Fatalf("settings put while the file is gone: %+v", r)
	}
	if r := request(t, coord, "coordinator", wire.OpPut, other); !r.OK {
		t.Fatalf("put elsewhere: %+v", r)
	}
	raw, err := os.ReadFile(away)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ConfigPath, append(raw, []byte("\n[broken\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := request(t, coord, "coordinator", wire.OpPut, put); r.OK || r.Error.Code != wire.CodeStorage {
		t.Fatalf("settings put while the file does not parse: %+v", r)
	}
	checkCounted(t, s, base, map[[2]string]float64{{"put", string(wire.CodeStorage)}: 2, {"put", "OK"}: 1})
}

// TestE2EMetricsHeartbeatGauges: an accepted heartbeat is counted once and its worker status shows
// in the system kind's gauges with exactly the bytes a get returns; a second, identical heartbeat
// (a keepalive) changes neither entries nor bytes.
func TestE2EMetricsHeartbeatGauges(t *testing.T) {
	s, ctx := startWith(t, "")
	alice, _ := conn(t, s, "alice")
	coord := goClient(t, s, "coordinator")
	hb := `{"worker_id":"w1","service":"tx","sequence":%d,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":["a","b"]}`
	accepted := map[string]string{"outcome": "accepted"}
	for i := 1; i <= 2; i++ {
		if err := alice.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", "w1"), fmt.Appendf(nil, hb, i)); err != nil {
			t.Fatal(err)
		}
		if err := alice.Flush(); err != nil {
			t.Fatal(err)
		}
		awaitMetrics(t, s, "the heartbeat handled", func(m map[string]*dto.MetricFamily) bool {
			return value(m, "state_heartbeats_total", accepted) >= float64(i)
		})
		e, err := coord.Get(ctx, string(wire.KindSystem), wire.WorkerKey("alice", "w1"))
		if err != nil {
			t.Fatal(err)
		}
		m := awaitKinds(t, s, "the worker status", map[string]kindGauges{"system": {1, float64(len(e.Document)), 1}})
		if n := value(m, "state_heartbeats_total", accepted); n != float64(i) {
			t.Errorf("state_heartbeats_total{outcome=accepted} after %d heartbeats: %v", i, n)
		}
	}
}
