package server_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// A subscriber that stops reading never holds up a writer (issue: "a slow or vanished client never
// stalls another client or a writer"). A raw NATS connection opens watches and then never reads its
// socket again, while another client writes documents its watches match. Without the embedded
// server's NoFastProducerStall, the server makes stated's connection (which publishes the updates
// and the writer's replies) wait each time that backlog is over three quarters of MaxPending; the
// server counts those waits. With it, none happen: the frozen watches miss updates and close with
// OVERFLOW, and every write is answered.
func TestFrozenSubscriberNeverStallsWriters(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NATSMaxPending: 1 << 20})
	const watches = 32

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(env.URL, "nats://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("server greeting %q: %v", line, err)
	}
	inbox := wire.InboxPrefix("coordinator") + ".frozen"
	var out strings.Builder
	fmt.Fprintf(&out, "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"frozen\"}\r\nSUB %s 1\r\nSUB %s 2\r\n",
		inbox, wire.WatchSubject(wire.DefaultPrefix, "coordinator", "*"))
	for i := range watches {
		body := fmt.Sprintf(`{"request_id":%d,"watch_id":"f%d","namespace":"service/big"}`, i+1, i)
		fmt.Fprintf(&out, "PUB %s %s %d\r\n%s\r\n", wire.StateSubject(wire.DefaultPrefix, "coordinator", wire.OpWatch), inbox, len(body), body)
	}
	out.WriteString("PING\r\n")
	if _, err := conn.Write([]byte(out.String())); err != nil {
		t.Fatal(err)
	}
	// Read until every watch reply has come; from then on this connection reads nothing.
	for replies := 0; replies < watches; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the watch replies: %v", err)
		}
		if strings.HasPrefix(line, "MSG "+inbox) {
			body, err := r.ReadString('\n')
			if err != nil || !strings.Contains(body, `"ok":true`) {
				t.Fatalf("watch reply %q: %v", body, err)
			}
			replies++
		}
	}

	nc := env.Connect(t, "coordinator")
	doc := `{"holder":"w","claimed_at_ms":1,"purpose":"` + strings.Repeat("front door ", 1270) + `"}`
	stalls := env.NATS.NumStalledClients()
	for i := range 60 {
		body := fmt.Sprintf(`{"request_id":%d,"namespace":"service/big","key":"k","schema":"keeppeek.lease.v1","document":%s}`, i+1, doc)
		if res := request(t, nc, "coordinator", wire.OpPut, body); !res.OK {
			t.Fatalf("put %d: %+v", i, res.Error)
		}
	}
	if n := env.NATS.NumStalledClients() - stalls; n != 0 {
		t.Fatalf("the server held up a publisher %d times for a subscriber that stopped reading", n)
	}
	if n := env.Store.Stats().Watches; n != 0 {
		t.Fatalf("%d frozen watches are still open after 60 unacknowledged updates (max_pending_updates 32)", n)
	}
}
