package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	natsauth "github.com/nats-io/nats-server/v2/server"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/wire"
)

// put reads its document from stdin until EOF; Ctrl-C (statectl catches it to end requests cleanly)
// must end that read too, or a put run by mistake without a document could not be interrupted.
func TestPutInterruptedWhileReadingStdin(t *testing.T) {
	clearEnv(t)
	stdin, feed := io.Pipe() // a terminal nobody types into
	defer feed.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := runAsync(ctx, stdin, "put", "user/x", "k", "keeppeek.preference.v1")
	cancel()
	select {
	case o := <-done:
		if o.code != exitInterrupted || !strings.Contains(o.stderr, "statectl: INTERRUPTED: ") {
			t.Fatalf("put interrupted while reading stdin: exit %d, stderr %q", o.code, o.stderr)
		}
	case <-time.After(10 * time.Second):
		feed.Close() // let the run end
		<-done
		t.Fatal("put went on reading stdin after it was interrupted")
	}
}

// Interrupted (Ctrl-C) before the watch opened, watch exits 130 as the usage says of every command
// interrupted before its answer came; exit 0 would tell a script the watch ran.
func TestWatchInterruptedBeforeItOpens(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	url := ns.ClientURL()
	clearEnv(t)
	sub := silentWatchServer(t, url) // a state server that takes the watch request and never answers
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, strings.NewReader(""), "watch", "service/w", "--nats-url", url)
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the watch request did not come: %v", err)
	}
	cancel()
	select {
	case o := <-done:
		if o.code != exitInterrupted || o.stdout != "" || !strings.Contains(o.stderr, "statectl: INTERRUPTED: ") {
			t.Fatalf("watch interrupted before it opened: exit %d\nstdout: %q\nstderr: %q", o.code, o.stdout, o.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not end after the interrupt")
	}
}

// With --timeout on the command line (how long to watch), each request keeps the default 5s bound
// (statectl help watch): a first watch request nobody answers fails with TIMEOUT after that bound,
// not after the whole --timeout.
func TestWatchFirstRequestKeepsTheRequestBound(t *testing.T) {
	ns := natstest.Start(t, natsserver.Options{})
	url := ns.ClientURL()
	clearEnv(t)
	silentWatchServer(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, strings.NewReader(""), "watch", "service/w", "--nats-url", url, "--timeout", "1h")
	select {
	case o := <-done:
		if o.code != exitConnection || !strings.HasPrefix(o.stderr, "statectl: TIMEOUT: ") {
			t.Fatalf("unanswered watch: exit %d, stderr %q", o.code, o.stderr)
		}
	case <-time.After(4 * defaultTimeout):
		cancel()
		<-done
		t.Fatalf("the first watch request was not bounded by the %v request bound", defaultTimeout)
	}
}

// lines feeds what is written to it, line by line, to a channel.
type lines struct {
	mu  sync.Mutex
	buf []byte
	ch  chan string
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		select {
		case l.ch <- string(l.buf[:i]):
		default: // the test reads what it needs; the rest may go
		}
		l.buf = l.buf[i+1:]
	}
}

// ackless starts a state service whose principal dev may watch, unwatch, put and ask for info but
// not acknowledge: NATS drops its acks, which then get no answer, like acks to a stated that hangs.
// It runs statectl watch with args as dev and returns its stdout lines and its exit code.
func ackless(t *testing.T, ctx context.Context, args ...string) (*testenv.Env, *lines, <-chan int) {
	t.Helper()
	const pw = "dev-pw"
	pub := []string{}
	for _, op := range []wire.Op{wire.OpWatch, wire.OpUnwatch, wire.OpInfo, wire.OpPut} {
		pub = append(pub, wire.StateSubject(wire.DefaultPrefix, defaultUser, op))
	}
	env := testenv.Start(t, testenv.Options{
		Principals: []policy.Principal{{ID: defaultUser, Admin: true}},
		NATSUsers: []natsserver.User{{Name: defaultUser, Password: pw, Permissions: &natsauth.Permissions{
			Publish:   &natsauth.SubjectPermission{Allow: pub},
			Subscribe: &natsauth.SubjectPermission{Allow: []string{wire.DefaultPrefix + ".watch.v1." + defaultUser + ".>", wire.InboxPrefix(defaultUser) + ".>"}},
		}}},
	})
	clearEnv(t)
	out := &lines{ch: make(chan string, 64)}
	done := make(chan int, 1)
	go func() {
		var errb strings.Builder
		args = append([]string{"watch", "service/w", "--nats-url", env.URL, "--password", pw}, args...)
		done <- run(ctx, args, strings.NewReader(""), out, &errb)
	}()
	return env, out, done
}

func (l *lines) await(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case got := <-l.ch:
			if strings.Contains(got, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q within %v", want, within)
		}
	}
}

func putW(t *testing.T, env *testenv.Env, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.Store.Put(ctx, policy.Principal{ID: defaultUser, Admin: true}, wire.PutRequest{Namespace: "service/w", Key: key,
		Schema: "keeppeek.lease.v1", Document: []byte(`{"holder":"w1","claimed_at_ms":1}`)}); err != nil {
		t.Fatal(err)
	}
}

// With --timeout on the command line, every request of watch keeps the request bound, acks included
// (statectl help watch): an ack that gets no answer is given up after the bound and the watch starts
// again, instead of hanging for the whole --timeout.
func TestWatchAckKeepsTheRequestBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, out, done := ackless(t, ctx, "--timeout", "1h")
	out.await(t, "snapshot of service/w", 10*time.Second)
	putW(t, env, "k")
	out.await(t, "PUT     k  seq 1", 10*time.Second)
	out.await(t, "ack 1 failed", 4*defaultTimeout)
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not end after the interrupt")
	}
}

// --count N stops after N messages: the Nth update ends the watch whatever its ack would do (the
// watch is unwatched next), rather than the watch going on after a failed ack and printing more.
func TestWatchCountEndsBeforeTheLastAck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, out, done := ackless(t, ctx, "--timeout", "1h", "--count", "1")
	out.await(t, "snapshot of service/w", 10*time.Second)
	putW(t, env, "k")
	out.await(t, "PUT     k  seq 1", 10*time.Second)
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("watch --count 1: exit %d", code)
		}
	case <-time.After(4 * defaultTimeout):
		cancel()
		<-done
		t.Fatal("watch --count 1 did not end after its one update")
	}
	select {
	case l := <-out.ch:
		t.Fatalf("watch printed %q after its count", l)
	default:
	}
}
