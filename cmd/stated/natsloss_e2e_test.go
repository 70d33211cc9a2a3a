package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/store/wire"
)

// statedLogin is a NATS server's authentication: every client may connect, except stated's own user
// ("stated") while refuse is set. It remembers stated's connection and signals each of its attempts.
type statedLogin struct {
	mu       sync.Mutex
	refuse   bool
	clientID uint64
	refused  chan struct{} // one value per refused login of stated
	accepted chan struct{} // one value per accepted login of stated
}

func (a *statedLogin) Check(c server.ClientAuthentication) bool {
	if c.GetOpts().Username != "stated" {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse || c.GetOpts().Password != "stated-pw" {
		select {
		case a.refused <- struct{}{}:
		default:
		}
		return false
	}
	a.clientID = c.GetID()
	select {
	case a.accepted <- struct{}{}:
	default:
	}
	return true
}

func (a *statedLogin) setRefuse(v bool) (statedClient uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refuse = v
	return a.clientID
}

// httpGet answers the status and body of one of stated's HTTP endpoints.
func httpGet(t *testing.T, s *e2e.Stated, path string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: timeout}).Get(s.HTTP() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// awaitReadyz polls /readyz (bounded) until it answers code, and returns its body.
func awaitReadyz(t *testing.T, s *e2e.Stated, code int, what string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := httpGet(t, s, "/readyz")
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %s: %d %q, want %d\n%s", what, got, body, code, s.Logs())
		}
		time.Sleep(20 * time.Millisecond) // polling an HTTP endpoint: there is no event to wait on
	}
}

// startRawNATS starts a nats-server with o (on 127.0.0.1, on a free port unless o sets one, quiet,
// without a system account), for what internal/natsserver does not set: custom authentication, a
// small max_payload. It stops at cleanup.
func startRawNATS(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	o.Host, o.NoLog, o.NoSigs, o.NoSystemAccount = "127.0.0.1", true, true, true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(timeout) {
		t.Fatal("nats server not ready")
	}
	return ns
}

// An external NATS server that refuses stated's login for a while (its configuration reloaded without
// stated's own user, which `stated nats-permissions` leaves for the operator to add) and then takes it
// again: stated keeps trying and serves again once it is let in, and /readyz says 503, naming NATS,
// while stated cannot be reached. nats.go, by default, gives up for good on a second refusal of the
// same login, and stated then ran deaf for ever, with /readyz saying "ready".
func TestE2EExternalNATSRefusingStatedForAWhile(t *testing.T) {
	login := &statedLogin{refused: make(chan struct{}, 64), accepted: make(chan struct{}, 64)}
	ns := startRawNATS(t, &server.Options{CustomClientAuthentication: login})
	s := e2e.NewStated(t, e2e.Config{NATSURL: ns.ClientURL()})
	// The harness writes [nats] url; stated's own login goes beside it.
	conf, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	conf = []byte(strings.Replace(string(conf), "[nats]\n", "[nats]\nuser = \"stated\"\npassword = \"stated-pw\"\n", 1))
	if err := os.WriteFile(s.ConfigPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()

	nc, err := nats.Connect(ns.ClientURL(), nats.CustomInboxPrefix(wire.InboxPrefix("dev")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	put := func(key string) (wire.Result, error) {
		msg, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "dev", wire.OpPut),
			[]byte(`{"namespace":"service/tx","key":"`+key+`","schema":"keeppeek.lease.v1","document":`+leaseDoc+`}`), time.Second)
		if err != nil {
			return wire.Result{}, err
		}
		var r wire.Result
		return r, json.Unmarshal(msg.Data, &r)
	}
	if r, err := put("before"); err != nil || !r.OK {
		t.Fatalf("put through the external server: %+v %v\n%s", r, err, s.Logs())
	}
	if code, body := httpGet(t, s, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz while connected: %d %s", code, body)
	}

	// The server refuses stated from now on and cuts its connection: stated tries again and again.
	id := login.setRefuse(true)
	if err := ns.DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		select {
		case <-login.refused:
		case <-time.After(timeout):
			t.Fatalf("stated stopped trying to log in to NATS after %d refused attempts\n%s", i-1, s.Logs())
		}
	}
	if body := awaitReadyz(t, s, http.StatusServiceUnavailable, "while NATS refuses stated"); !strings.Contains(body, "NATS") {
		t.Fatalf("/readyz while NATS refuses stated: %q, want the reason to name NATS", body)
	}
	if code, _ := httpGet(t, s, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while NATS refuses stated: %d", code)
	}

	// Let in again: stated reconnects and serves.
	login.setRefuse(false)
	select {
	case <-login.accepted:
	case <-time.After(timeout):
		t.Fatalf("stated did not log in to NATS again\n%s", s.Logs())
	}
	awaitReadyz(t, s, http.StatusOK, "once stated is back on NATS")
	deadline := time.Now().Add(timeout)
	for {
		r, err := put("after")
		if err == nil && r.OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put after stated is back on NATS: %+v %v\n%s", r, err, s.Logs())
		}
	}
	if code := s.Term(); code != 0 {
		t.Fatalf("exit code %d\n%s", code, s.Logs())
	}
	if !strings.Contains(s.Logs(), "nats: authorization violation") {
		t.Errorf("stated's log does not say why NATS would not take it back:\n%s", s.Logs())
	}
}

// stated checks at start that its NATS server carries its bounds (a reply of max_snapshot_bytes, a
// document of max_document_bytes); a reconnect may land on a server, a cluster node, whose max_payload
// is smaller. stated then says so: an error in its log, and /readyz 503 naming the bound, until it is
// on a server that carries them again.
func TestE2EReconnectedToANATSServerWithASmallerMaxPayload(t *testing.T) {
	big := startRawNATS(t, &server.Options{})
	port := big.Addr().(*net.TCPAddr).Port
	s := e2e.NewStated(t, e2e.Config{NATSURL: big.ClientURL()})
	s.Start()
	awaitReadyz(t, s, http.StatusOK, "on a server with the default max_payload")

	// The same address, now a server that takes messages of at most 64 KiB - 1: a snapshot of the
	// default max_snapshot_bytes (64 KiB) no longer fits.
	big.Shutdown()
	big.WaitForShutdown()
	small := startRawNATS(t, &server.Options{Port: port, MaxPayload: 65535})
	natstest.Poll(t, timeout, "/readyz once stated is back, on a server with a smaller max_payload", func() (bool, string) {
		code, body := httpGet(t, s, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "cannot carry its bounds") &&
			strings.Contains(body, "max_snapshot_bytes"), fmt.Sprintf("%d %q", code, body)
	})
	// The reconnect handler, which logs, runs after the connection is back (and /readyz says so).
	natstest.Poll(t, timeout, "the error logged for the reconnect to a server with a smaller max_payload", func() (bool, string) {
		return strings.Contains(s.Logs(), "reconnected to cannot carry its bounds"), "not logged"
	})

	small.Shutdown()
	small.WaitForShutdown()
	startRawNATS(t, &server.Options{Port: port})
	awaitReadyz(t, s, http.StatusOK, "back on a server with the default max_payload")
}

// An external NATS server that stops answering without closing stated's connection (its host powered
// off, a partition): stated's pings find it within about 15 s (not nats.go's default 2 minutes and
// more): /readyz turns 503, naming NATS, and once the server answers again stated serves again.
func TestE2EExternalNATSThatStopsAnswering(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	link := natstest.NewCutLink(t, strings.TrimPrefix(ns.ClientURL(), "nats://"))
	s := e2e.NewStated(t, e2e.Config{NATSURL: link.URL()})
	s.Start()
	awaitReadyz(t, s, http.StatusOK, "through the link")
	link.Freeze()
	start := time.Now()
	natstest.Poll(t, 30*time.Second, "/readyz once the NATS server stopped answering", func() (bool, string) {
		code, body := httpGet(t, s, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "NATS"), fmt.Sprintf("%d %q", code, body)
	})
	t.Logf("stated noticed after %v", time.Since(start))
	link.Thaw()
	awaitReadyz(t, s, http.StatusOK, "once the NATS server answers again")
}
