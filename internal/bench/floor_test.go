package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// The transport floor: what NATS alone costs on this machine for the shapes BenchmarkStated measures,
// with no store, no disk and no JSON decoding. A child process (this test binary, started with
// floorChildEnv set) runs the embedded NATS server as stated does, and a responder connected to it in
// process, as stated's connection is; the bench's connections reach it over loopback TCP from this
// process, as the clients of BenchmarkStated reach stated. The responder answers at once, on NATS's
// own delivery goroutine; a put's request and reply carry the bench document, as a put's do.
//
// BenchmarkStated's figure can be no better than the matching floor here: its serial CAS adds a
// commit (two fdatasyncs) to put-rtt, its writers add validation and commits to echo-127, and its
// fanout adds the put, the store's fanout and each cache's decoding to fanout-1024.

// floorChildEnv, set in the environment of this test binary, makes it the floor's child: see
// floorChild.
const floorChildEnv = "KP_BENCH_FLOOR_CHILD"

// Subjects the child answers or publishes on.
const (
	floorRTT    = "floor.rtt"    // answered with floorSmallReply
	floorPut    = "floor.put"    // answered with a put's reply (the entry, with the bench document)
	floorFanout = "floor.fanout" // body N: publishes a put's reply on floor.w.0 to floor.w.<N-1>, then answers
	floorWatch  = "floor.w."
)

// floorSmallReply is shaped as stated's reply to an info request (an id, a version, an epoch, the
// feature and the default bounds), so about its size: a request that writes nothing.
var floorSmallReply = func() []byte {
	b := wire.DefaultBounds()
	return wire.AppendResult(nil, &wire.Result{RequestID: 1, OK: true, ServerID: "stated-000000000000", Version: "0.1.0-dev",
		Epoch: "0000000000000000", Features: []string{wire.FeatureStateStore}, Bounds: &b})
}()

// floorMessages returns a put request for the bench document and the reply stated sends to it.
func floorMessages() (request, reply []byte, err error) {
	doc, err := Document(DocumentBytes)
	if err != nil {
		return nil, nil, err
	}
	expected := int64(41)
	request, err = wire.EncodeRequest(wire.PutRequest{RequestID: 1, Namespace: "service/bench", Key: "cas/o-000",
		Schema: DocumentSchema, Document: doc, ExpectedRevision: &expected})
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().UnixMilli()
	reply = wire.AppendResult(nil, &wire.Result{RequestID: 1, OK: true, Entry: &wire.Entry{Namespace: "service/bench",
		Key: "cas/o-000", Schema: DocumentSchema, Owner: "bench-000", Revision: 42, CreatedAtMs: now, UpdatedAtMs: now, Document: doc}})
	return request, reply, nil
}

// floorChild runs the child's side: it starts the server and the responder, prints "url <URL>" on
// stdout, and serves until its stdin closes (the parent's end of the pipe: the child never outlives
// the bench). It returns the process's exit code.
func floorChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "floor child:", err)
		return 1
	}
	_, putReply, err := floorMessages()
	if err != nil {
		return fail(err)
	}
	ns, err := natsserver.Start(natsserver.Options{Listen: "127.0.0.1:0"})
	if err != nil {
		return fail(err)
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	nc, err := nats.Connect("", nats.InProcessServer(ns.Server))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	answer := func(subject string, fn func(m *nats.Msg)) error {
		_, err := nc.Subscribe(subject, fn)
		return err
	}
	err = errors.Join(
		answer(floorRTT, func(m *nats.Msg) { _ = m.Respond(floorSmallReply) }),
		answer(floorPut, func(m *nats.Msg) { _ = m.Respond(putReply) }),
		answer(floorFanout, func(m *nats.Msg) {
			n, err := strconv.Atoi(string(m.Data))
			if err != nil {
				_ = m.Respond([]byte(err.Error()))
				return
			}
			for i := range n {
				_ = nc.Publish(floorWatch+strconv.Itoa(i), putReply)
			}
			_ = m.Respond([]byte("ok"))
		}),
		nc.Flush())
	if err != nil {
		return fail(err)
	}
	fmt.Printf("url %s\n", ns.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// floorConfig sizes a floor run.
type floorConfig struct {
	RTTRequests int // small requests, one at a time (the info requests of the serial phase)
	PutRequests int // put-sized requests, one at a time (the serial phase's 3,810)
	Writers     int // connections sending put-sized requests at once, Rounds each
	Rounds      int
	Connections int // connections the fanout's subscriptions spread over
	Watches     int // subscriptions, one subject each, each getting one message a round
}

func defaultFloorConfig() floorConfig {
	d := DefaultConfig()
	return floorConfig{RTTRequests: rttRequests, PutRequests: d.Owners * d.Rounds, Writers: d.Writers, Rounds: d.Rounds,
		Connections: d.Connections, Watches: d.Watches}
}

// floorReport holds the floor's figures, named as BenchmarkStated's they bound.
type floorReport struct {
	RequestRTT, PutRTT  stats
	EchoOpsPerSec       float64
	Fanout              stats
	Messages, MsgsBytes int // fanout messages received, and the bytes of each
}

func (r floorReport) figures(c floorConfig) []Figure {
	return []Figure{
		{Name: "request-rtt-p50-us", Value: r.RequestRTT.p50},
		{Name: "put-rtt-p50-us", Value: r.PutRTT.p50},
		{Name: "put-rtt-p95-us", Value: r.PutRTT.p95},
		{Name: fmt.Sprintf("echo-%d-ops/s", c.Writers), Value: r.EchoOpsPerSec},
		{Name: fmt.Sprintf("fanout-%d-p50-us", c.Watches), Value: r.Fanout.p50},
		{Name: fmt.Sprintf("fanout-%d-p95-us", c.Watches), Value: r.Fanout.p95},
	}
}

// startFloorChild starts the child and returns its server's URL. The child ends at the test's
// cleanup, when its stdin is closed.
func startFloorChild(t testing.TB) string {
	t.Helper()
	p, url, err := spawnFloorChild()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("floor child: %v", err)
		}
	})
	return url
}

// floorStopTimeout bounds the wait for the child to end once its stdin is closed.
const floorStopTimeout = 10 * time.Second

// floorStartTimeout bounds the wait for the child's URL.
const floorStartTimeout = 30 * time.Second

// floorProc is a running floor child.
type floorProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed when cmd.Wait returned, with its error in err
	err   error
}

// spawnFloorChild starts the child and reads its server's URL.
func spawnFloorChild() (*floorProc, string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), floorChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	p := &floorProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	type read struct {
		line string
		err  error
	}
	first := make(chan read, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		first <- read{line, err}
	}()
	var got read
	select {
	case got = <-first:
	case <-time.After(floorStartTimeout):
		got.err = fmt.Errorf("nothing within %v", floorStartTimeout)
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(got.line), "url ")
	if got.err != nil || !ok {
		// stop ends the child (killing it if need be), which ends the read too.
		return nil, "", errors.Join(fmt.Errorf("floor child printed %q (%v), not its url", got.line, got.err), p.stop())
	}
	return p, url, nil
}

// stop closes the child's stdin, which ends it, and waits for its exit; a child still running
// floorStopTimeout later (stopped, or hung in its shutdown) is killed, and stop says so.
func (p *floorProc) stop() error {
	_ = p.stdin.Close()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case <-p.done:
		return p.err
	case <-time.After(floorStopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done // SIGKILL ends even a stopped process
	return fmt.Errorf("still running %v after its stdin closed: killed (%v)", floorStopTimeout, p.err)
}

// runFloor measures the floor against the child at url.
func runFloor(ctx context.Context, url string, c floorConfig) (rep floorReport, err error) {
	putRequest, putReply, err := floorMessages()
	if err != nil {
		return rep, err
	}
	conns := make([]*nats.Conn, max(c.Writers, c.Connections, 1))
	defer func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = nats.Connect(url); err != nil {
			return rep, err
		}
	}
	serial := func(n int, subject string, body []byte, reply int) (stats, error) {
		lat := make([]time.Duration, 0, n)
		for range n {
			t0 := time.Now()
			m, err := conns[0].RequestWithContext(ctx, subject, body)
			if err != nil {
				return stats{}, err
			}
			lat = append(lat, time.Since(t0))
			if len(m.Data) != reply {
				return stats{}, fmt.Errorf("%s: a %d-byte reply, want %d", subject, len(m.Data), reply)
			}
		}
		return summarize(lat), nil
	}
	if rep.RequestRTT, err = serial(c.RTTRequests, floorRTT, []byte("{}"), len(floorSmallReply)); err != nil {
		return rep, err
	}
	if rep.PutRTT, err = serial(c.PutRequests, floorPut, putRequest, len(putReply)); err != nil {
		return rep, err
	}

	start := make(chan struct{})
	errs := make([]error, c.Writers)
	var wg sync.WaitGroup
	for w := range c.Writers {
		wg.Go(func() {
			<-start
			for range c.Rounds {
				m, err := conns[w].RequestWithContext(ctx, floorPut, putRequest)
				if err == nil && len(m.Data) != len(putReply) {
					err = fmt.Errorf("a %d-byte reply, want %d", len(m.Data), len(putReply))
				}
				if err != nil {
					errs[w] = fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	rep.EchoOpsPerSec = float64(c.Writers*c.Rounds) / time.Since(t0).Seconds()

	// Each subscription sends the time its message came, and the message's size, to arrivals.
	type arrival struct {
		at   time.Time
		size int
	}
	arrivals := make(chan arrival, c.Watches)
	for i := range c.Watches {
		nc := conns[i%c.Connections]
		if _, err := nc.Subscribe(floorWatch+strconv.Itoa(i), func(m *nats.Msg) {
			arrivals <- arrival{time.Now(), len(m.Data)}
		}); err != nil {
			return rep, err
		}
	}
	for _, nc := range conns[:min(c.Connections, c.Watches)] {
		if err := nc.FlushWithContext(ctx); err != nil {
			return rep, err
		}
	}
	lat := make([]time.Duration, 0, c.Rounds)
	for round := range c.Rounds {
		t0 := time.Now()
		if _, err := conns[0].RequestWithContext(ctx, floorFanout, []byte(strconv.Itoa(c.Watches))); err != nil {
			return rep, fmt.Errorf("fanout round %d: %w", round+1, err)
		}
		var last time.Time
		for range c.Watches {
			select {
			case a := <-arrivals:
				if a.size != len(putReply) {
					return rep, fmt.Errorf("fanout round %d: a %d-byte message, want %d", round+1, a.size, len(putReply))
				}
				rep.Messages++
				if a.at.After(last) {
					last = a.at
				}
			case <-ctx.Done():
				return rep, fmt.Errorf("fanout round %d: %d messages of %d: %w", round+1, rep.Messages, c.Rounds*c.Watches, ctx.Err())
			}
		}
		lat = append(lat, last.Sub(t0))
	}
	rep.Fanout, rep.MsgsBytes = summarize(lat), len(putReply)
	return rep, nil
}

// A small floor run gets every reply and every fanout message, each of the size it was sent with.
func TestFloorRuns(t *testing.T) {
	url := startFloorChild(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := floorConfig{RTTRequests: 5, PutRequests: 5, Writers: 4, Rounds: 3, Connections: 3, Watches: 7}
	rep, err := runFloor(ctx, url, c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Messages != c.Rounds*c.Watches {
		t.Fatalf("%d fanout messages, want %d", rep.Messages, c.Rounds*c.Watches)
	}
	_, reply, err := floorMessages()
	if err != nil {
		t.Fatal(err)
	}
	if rep.MsgsBytes != len(reply) || len(reply) < DocumentBytes {
		t.Fatalf("fanout messages of %d bytes, want a put's reply (%d, over the %d-byte document)", rep.MsgsBytes, len(reply), DocumentBytes)
	}
	for _, f := range rep.figures(c) {
		if !(f.Value > 0) {
			t.Fatalf("figure %s is %v", f.Name, f.Value)
		}
	}
}

// BenchmarkNATSFloor measures the transport floor (see floorChild) for BenchmarkStated's workload
// (DefaultConfig's sizes) and reports each figure. It asserts nothing about speed. Run it with:
//
//	go test ./internal/bench -run '^$' -bench NATSFloor -benchtime 1x
func BenchmarkNATSFloor(b *testing.B) {
	url := startFloorChild(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := defaultFloorConfig()
	var rep floorReport
	for b.Loop() {
		var err error
		if rep, err = runFloor(ctx, url, c); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range rep.figures(c) {
		b.ReportMetric(f.Value, f.Name)
	}
}

// The floor's child is stopped within a bound even when it does not end as asked (here it is stopped
// with SIGSTOP, as a debugger or a hung shutdown would leave it): it is killed, and stop says so,
// instead of holding the test's cleanup for ever.
func TestFloorChildStopIsBounded(t *testing.T) {
	p, _, err := spawnFloorChild()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() }) // for a stop that never returns
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- p.stop() }()
	select {
	case err := <-stopped:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("stop of a child that did not end = %v, want it killed", err)
		}
	case <-time.After(floorStopTimeout + 20*time.Second):
		t.Fatalf("stop of a stopped child did not return within %v", floorStopTimeout+20*time.Second)
	}
	if p.cmd.ProcessState == nil {
		t.Fatal("stop returned before the child's exit was collected")
	}
}

// devConn starts the real stated on its defaults and connects to it as dev, closed at the test's end.
func devConn(t *testing.T) *nats.Conn {
	t.Helper()
	s := e2e.NewStated(t, e2e.Config{})
	s.Start()
	nc, err := client.Connect(s.URL(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// The floor's small reply stands for the reply to an info request (BenchmarkStated's
// request-rtt-p50-us): it is about the size of the one the real stated sends.
func TestFloorSmallReplyIsAnInfoReplysSize(t *testing.T) {
	nc := devConn(t)
	m, err := nc.Request(wire.StateSubject(wire.DefaultPrefix, "dev", wire.OpInfo), []byte(`{"request_id":1}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(floorSmallReply), len(m.Data); got < want*4/5 || got > want*6/5 {
		t.Fatalf("the floor's small reply is %d bytes, stated's info reply %d:\n%s\n%s", got, want, floorSmallReply, m.Data)
	}
}

// The floor's put messages stand for stated's (BenchmarkStated's serial CAS and writers, and each
// fanout update): its put reply is about the size of the reply the real stated sends to the bench's
// put, and of the update a watch of the key then receives; its put request is the bench's.
func TestFloorPutMessagesAreStatedsSizes(t *testing.T) {
	nc := devConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	request, reply, err := floorMessages()
	if err != nil {
		t.Fatal(err)
	}
	// The watch's updates, as they come on its delivery subject.
	updates, err := nc.SubscribeSync(wire.WatchSubject(wire.DefaultPrefix, "dev", "floor-sizes"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := wire.EncodeRequest(wire.WatchRequest{RequestID: 1, WatchID: "floor-sizes", Namespace: "service/bench", KeyPrefix: "cas/"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := nc.RequestWithContext(ctx, wire.StateSubject(wire.DefaultPrefix, "dev", wire.OpWatch), data); err != nil || !strings.Contains(string(m.Data), `"ok":true`) {
		t.Fatalf("watch: %v %s", err, m.Data)
	}
	doc, err := Document(DocumentBytes)
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	putData, err := wire.EncodeRequest(wire.PutRequest{RequestID: 1, Namespace: "service/bench", Key: "cas/o-000",
		Schema: DocumentSchema, Document: doc, ExpectedRevision: &zero})
	if err != nil {
		t.Fatal(err)
	}
	got, err := nc.RequestWithContext(ctx, wire.StateSubject(wire.DefaultPrefix, "dev", wire.OpPut), putData)
	if err != nil || !strings.Contains(string(got.Data), `"ok":true`) {
		t.Fatalf("put: %v %s", err, got.Data)
	}
	update, err := updates.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b int) bool { return a >= b*9/10 && a <= b*11/10 }
	if !near(len(reply), len(got.Data)) {
		t.Errorf("the floor's put reply is %d bytes, stated's %d:\n%s\n%s", len(reply), len(got.Data), reply, got.Data)
	}
	if !near(len(reply), len(update.Data)) {
		t.Errorf("the floor's fanout message is %d bytes, stated's watch update %d:\n%s\n%s", len(reply), len(update.Data), reply, update.Data)
	}
	if !near(len(request), len(putData)) {
		t.Errorf("the floor's put request is %d bytes, the bench's %d", len(request), len(putData))
	}
}
