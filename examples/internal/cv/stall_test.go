package cv_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keeppeek/coordination/examples/internal/cv"
	"github.com/keeppeek/coordination/lease"
	"github.com/keeppeek/coordination/store/client"
	"github.com/keeppeek/coordination/store/wire"
)

// stallHelperEnv, set to a NATS URL, makes the test binary run one CV worker (runStallHelper) instead
// of the tests: a process the test can stall with SIGSTOP.
const stallHelperEnv = "CV_STALL_HELPER_NATS_URL"

// stallTTL is the helper's lease TTL: short, so that a stall outlives it quickly.
const stallTTL = time.Second

// runStallHelper runs a CV worker as principal "cv", worker id cv-1, until SIGTERM, printing each of
// its events as "EVENT <unix ms> <kind>".
func runStallHelper(url string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	nc, err := client.Connect(url, "cv")
	if err != nil {
		fmt.Println("helper:", err)
		return 1
	}
	defer nc.Close()
	var mu sync.Mutex
	w, err := cv.New(cv.Config{Conn: nc, Principal: "cv", WorkerID: "cv-1", LeaseTTL: stallTTL, EventEvery: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Events: func(kind, _, _ string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("EVENT %d %s\n", time.Now().UnixMilli(), kind)
		}})
	if err != nil {
		fmt.Println("helper:", err)
		return 1
	}
	if err := w.Run(ctx); err != nil {
		fmt.Println("helper:", err)
		return 1
	}
	return 0
}

// helperEvent is one event line of the helper.
type helperEvent struct {
	at   time.Time
	kind string
}

// helperEvents reads the helper's events.
type helperEvents struct {
	mu      sync.Mutex
	list    []helperEvent
	changed chan struct{}
	done    chan struct{}
}

// waitFor waits until an event of kind stamped at or after since is read, and returns it.
func (h *helperEvents) waitFor(t *testing.T, kind string, since time.Time) helperEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		for _, e := range h.list {
			if e.kind == kind && !e.at.Before(since) {
				h.mu.Unlock()
				return e
			}
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-h.done:
			t.Fatalf("the helper exited before %q", kind)
		case <-deadline:
			t.Fatalf("no %q event from the helper within 10 s", kind)
		}
	}
}

// A worker that stalls (SIGSTOP: a long GC pause, a frozen VM) for longer than its lease, while
// another worker claims the lease, emits no detection once it wakes: the lease is no longer its own.
// The detection ticker's pending tick raced the renewal loop's notice of the loss, and the worker
// woke emitting for a job it no longer held, beside the new holder's.
func TestCVStalledHolderEmitsNothingOnWaking(t *testing.T) {
	f := setup(t)
	f.publish(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stallHelperEnv+"="+f.URL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperEvents{changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 || fields[0] != "EVENT" {
				continue
			}
			ms, _ := strconv.ParseInt(fields[1], 10, 64)
			h.mu.Lock()
			h.list = append(h.list, helperEvent{at: time.UnixMilli(ms), kind: strings.Join(fields[2:], " ")})
			close(h.changed)
			h.changed = make(chan struct{})
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-h.done
		}
		_ = cmd.Wait()
	})
	f.modelIntent(t, "person-detector")
	other, err := client.New(f.Connect(t, "cv"), "cv")
	if err != nil {
		t.Fatal(err)
	}

	// The race is between two goroutines woken at once: a few rounds give it its chances.
	since := time.Time{}
	for round := range 6 {
		h.waitFor(t, "detection", since)
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// The stalled holder's lease expires in the store; another worker claims it.
		waitFor(t, 10*time.Second, "the stalled holder's lease expired", func() bool {
			_, err := f.Admin.Get(t.Context(), cvNS, leaseKey)
			return errors.Is(err, wire.ErrNotFound)
		})
		l, err := lease.Claim(t.Context(), other, lease.Options{Namespace: cvNS, Key: leaseKey, Holder: "cv-2", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		woke := time.Now()
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		h.waitFor(t, "cv stopped", woke)
		h.mu.Lock()
		for _, e := range h.list {
			if e.kind == "detection" && !e.at.Before(woke) {
				h.mu.Unlock()
				t.Fatalf("round %d: the woken worker emitted a detection at %v, after it woke at %v without its lease", round, e.at, woke)
			}
		}
		h.mu.Unlock()
		// The job back to the helper for the next round.
		since = time.Now()
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
