package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/syncbuf"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// idleEnv is a server that, as on an external NATS server, cannot ask NATS whether a watch's
// subscriber is there (no Interest), with Options.IdleWatch idle.
type idleEnv struct {
	*testenv.Env
	logs *syncbuf.Buffer // the server's log
}

func startIdle(t *testing.T, idle time.Duration) *idleEnv {
	t.Helper()
	logs := &syncbuf.Buffer{}
	env := testenv.Start(t, testenv.Options{IdleWatch: idle, Metrics: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return &idleEnv{Env: env, logs: logs}
}

// watchSub subscribes to a watch's delivery subject, then opens the watch, as a client does.
func watchSub(t *testing.T, nc *nats.Conn, principal, id, ns string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, principal, id))
	if err != nil {
		t.Fatal(err)
	}
	if r := request(t, nc, principal, wire.OpWatch, fmt.Sprintf(`{"watch_id":%q,"namespace":%q}`, id, ns)); !r.OK {
		t.Fatalf("watch %s: %+v", id, r)
	}
	return sub
}

// awaitClose reads a watch's messages until its close (within timeout) and returns its reason.
func awaitClose(t *testing.T, sub *nats.Subscription) wire.CloseReason {
	t.Helper()
	for {
		m, err := sub.NextMsg(timeout)
		if err != nil {
			t.Fatalf("no close on %s: %v", sub.Subject, err)
		}
		var u wire.WatchMessage
		if err := json.Unmarshal(m.Data, &u); err != nil {
			t.Fatalf("watch message %s: %v", m.Data, err)
		}
		if u.Kind == wire.UpdateClosed {
			return u.Reason
		}
	}
}

// noWatchMessage fails if a message waits on sub.
func noWatchMessage(t *testing.T, sub *nats.Subscription, what string) {
	t.Helper()
	if m, err := sub.NextMsg(time.Millisecond); err == nil {
		t.Fatalf("%s got %s", what, m.Data)
	}
}

// A watch whose client sends nothing naming it (no ack, of any sequence) for longer than IdleWatch is
// closed as an ACK_TIMEOUT close is: the CLOSED message with reason ACK_TIMEOUT, so a raw watcher
// still there learns of it; the id free again; counted (state_watch_closures_total and
// state_watches_idle_closed_total) and logged once. It is not closed before the bound.
func TestIdleWatchIsClosedWithAckTimeout(t *testing.T) {
	const idle = time.Second
	env := startIdle(t, idle)
	alice := env.Connect(t, "alice")
	sent := time.Now()
	sub := watchSub(t, alice, "alice", "silent", "user/alice")
	if reason := awaitClose(t, sub); reason != wire.CloseAckTimeout {
		t.Fatalf("closed with %s, want %s", reason, wire.CloseAckTimeout)
	}
	if took := time.Since(sent); took < idle {
		t.Fatalf("closed %v after the watch request, before the bound %v", took, idle)
	}
	noWatchMessage(t, sub, "the closed watch")
	if n := len(env.Store.LiveWatches()); n != 0 {
		t.Fatalf("%d live watches after the close", n)
	}
	wantErr(t, request(t, alice, "alice", wire.OpAck, `{"watch_id":"silent","applied_sequence":0}`), wire.CodeNotFound)
	awaitIdleClosed(t, env, 1)
	if n := counter(t, env.Metrics.WatchClosures.WithLabelValues(string(wire.CloseAckTimeout))); n != 1 {
		t.Fatalf("state_watch_closures_total{reason=ACK_TIMEOUT} = %v, want 1", n)
	}
	if n := strings.Count(env.logs.String(), "watch_id=silent"); n != 1 {
		t.Fatalf("%d log lines name the watch, want 1:\n%s", n, env.logs.String())
	}
	// The id is free again, and the new watch is kept while its client acks.
	again := watchSub(t, alice, "alice", "silent", "user/alice")
	if r := request(t, alice, "alice", wire.OpAck, `{"watch_id":"silent","applied_sequence":0}`); !r.OK {
		t.Fatalf("ack of the new watch: %+v", r)
	}
	noWatchMessage(t, again, "the new watch")
}

// A watch whose client only probes it (an ack one past the highest update sent, refused
// INVALID_ARGUMENT) is kept bound after bound, as is one that acks updates it took; silent watches
// opened beside it, one after another, are closed meanwhile, and mark the bounds passing.
func TestIdleWatchIsKeptByRefusedProbes(t *testing.T) {
	const idle = 1500 * time.Millisecond
	env := startIdle(t, idle)
	alice := env.Connect(t, "alice")
	bob := env.Connect(t, "bob")
	prober := watchSub(t, alice, "alice", "prober", "user/alice")
	var applied uint64
	probe := func() {
		t.Helper()
		r := request(t, alice, "alice", wire.OpAck, fmt.Sprintf(`{"watch_id":"prober","applied_sequence":%d}`, applied+1))
		if r.OK || r.Error == nil || r.Error.Code != wire.CodeInvalidArgument {
			t.Fatalf("probe %d: %+v, want INVALID_ARGUMENT (the watch is live, nothing sent past %d)", applied+1, r, applied)
		}
	}
	tick := time.NewTicker(idle / 10)
	defer tick.Stop()
	for round := range 3 {
		id := fmt.Sprintf("silent-%d", round)
		silent := watchSub(t, bob, "bob", id, "user/bob")
		closed := make(chan wire.CloseReason, 1)
		go func() {
			m, err := silent.NextMsg(timeout)
			var u wire.WatchMessage
			if err == nil {
				err = json.Unmarshal(m.Data, &u)
			}
			if err != nil {
				closed <- ""
				return
			}
			closed <- u.Reason
		}()
		if round == 1 {
			// An update in between, applied and acknowledged: an accepted ack counts too.
			if r := request(t, alice, "alice", wire.OpPut, `{"namespace":"user/alice","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"display"}}`); !r.OK {
				t.Fatalf("put: %+v", r)
			}
			m, err := prober.NextMsg(timeout)
			if err != nil {
				t.Fatalf("the prober's update: %v", err)
			}
			var u wire.WatchMessage
			if err := json.Unmarshal(m.Data, &u); err != nil || u.Kind != wire.UpdatePut || u.WatchSequence != 1 {
				t.Fatalf("the prober's update %s (%v)", m.Data, err)
			}
			if r := request(t, alice, "alice", wire.OpAck, `{"watch_id":"prober","applied_sequence":1}`); !r.OK {
				t.Fatalf("ack 1: %+v", r)
			}
			applied = 1
		}
	wait:
		for {
			select {
			case reason := <-closed:
				if reason != wire.CloseAckTimeout {
					t.Fatalf("silent watch %s: close %q, want %s", id, reason, wire.CloseAckTimeout)
				}
				break wait
			case <-tick.C:
				probe()
			}
		}
	}
	probe() // still live: INVALID_ARGUMENT, not NOT_FOUND
	noWatchMessage(t, prober, "the probed watch")
	awaitIdleClosed(t, env, 3)
}

// A store/client Cache on a namespace where nothing happens sends its liveness checks, which keep
// its watch: it survives several bounds without a resync, and still applies what comes.
func TestIdleWatchKeepsAnIdleCache(t *testing.T) {
	const idle = time.Second
	env := startIdle(t, idle)
	c, err := client.New(env.Connect(t, "alice"), "alice", client.WithRequestTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*timeout)
	defer cancel()
	k, err := c.NewCache(ctx, client.CacheOptions{Namespace: "user/alice", CheckInterval: idle / 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	bob := env.Connect(t, "bob")
	for round := range 3 {
		silent := watchSub(t, bob, "bob", fmt.Sprintf("silent-%d", round), "user/bob")
		if reason := awaitClose(t, silent); reason != wire.CloseAckTimeout {
			t.Fatalf("silent watch closed with %s", reason)
		}
	}
	if n := k.Resyncs(); n != 0 {
		t.Fatalf("the idle cache resynced %d times", n)
	}
	awaitIdleClosed(t, env, 3)
	e, err := c.Put(ctx, wire.PutRequest{Namespace: "user/alice", Key: "k", Schema: "keeppeek.preference.v1", Document: json.RawMessage(`{"kind":"display"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WaitForRevision(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.Get("k"); !ok || k.Resyncs() != 0 {
		t.Fatalf("the cache after a put: entry %v, %d resyncs", ok, k.Resyncs())
	}
}

// With the bound off (IdleWatch 0, the default), a watch nobody names is kept: by the time a server
// with the bound has closed two silent watches, one after the other, the same watch on a server
// without it is still live and has had no message. A negative bound is refused.
func TestIdleWatchOffKeepsSilentWatches(t *testing.T) {
	on := startIdle(t, time.Second)
	off := startIdle(t, 0)
	offConn := off.Connect(t, "alice")
	kept := watchSub(t, offConn, "alice", "silent", "user/alice")
	onConn := on.Connect(t, "alice")
	for round := range 2 {
		sub := watchSub(t, onConn, "alice", fmt.Sprintf("silent-%d", round), "user/alice")
		if reason := awaitClose(t, sub); reason != wire.CloseAckTimeout {
			t.Fatalf("closed with %s", reason)
		}
	}
	noWatchMessage(t, kept, "the watch on the server without a bound")
	if refs := off.Store.LiveWatches(); len(refs) != 1 || refs[0].WatchID != "silent" {
		t.Fatalf("live watches without a bound: %+v", refs)
	}
	if r := request(t, offConn, "alice", wire.OpAck, `{"watch_id":"silent","applied_sequence":0}`); !r.OK {
		t.Fatalf("ack of the kept watch: %+v", r)
	}
	if n := counter(t, off.Metrics.WatchesIdleClosed); n != 0 {
		t.Fatalf("state_watches_idle_closed_total = %v without a bound", n)
	}

	st, err := store.Open(filepath.Join(t.TempDir(), "state-store.db"), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := server.New(st, offConn, server.Options{IdleWatch: -time.Second}); err == nil || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("a negative IdleWatch: %v, want refused", err)
	}
}

// awaitIdleClosed waits until state_watches_idle_closed_total is want: the server counts a close
// after it has sent the close message a test awaits. More than want, or want not reached within
// timeout, fails the test.
func awaitIdleClosed(t *testing.T, env *idleEnv, want float64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := counter(t, env.Metrics.WatchesIdleClosed)
		if n > want {
			t.Fatalf("state_watches_idle_closed_total = %v, want %v", n, want)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("state_watches_idle_closed_total = %v after %v, want %v", n, timeout, want)
		}
		time.Sleep(time.Millisecond) // the increment follows the close message; no event tells
	}
}
