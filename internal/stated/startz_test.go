package stated

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/internal/syncbuf"
	"github.com/keeppeek/coordination/store"
)

// get answers the status and body of GET url, or an error.
func get(url string, timeout time.Duration) (int, string, error) {
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// /healthz answers 200 while the process runs (SPEC section 14), the start included, and /readyz 503
// "starting" until stated serves: a start that takes a while (a large store checked page by page, an
// external NATS server slow to answer) must not look like a hung process to a liveness probe, as an
// address that takes connections and answers nothing does. Here the start waits for the database's
// lock, which the test holds (stated waits up to 2 s for it). A run in which the machine was too slow
// to ask within that wait proves nothing either way and is tried again.
func TestHealthAnswersWhileStatedStarts(t *testing.T) {
	var firstAnswers []string
	for attempt := 1; attempt <= 3; attempt++ {
		readyz, ok := healthDuringStart(t)
		if ok {
			return
		}
		firstAnswers = append(firstAnswers, readyz)
	}
	t.Fatalf("/readyz never answered while stated started; its first answers came after the start: %q", firstAnswers)
}

// healthDuringStart starts stated on a database whose lock the test holds, and reports /readyz's
// first answer and whether it came while stated was starting.
func healthDuringStart(t *testing.T) (string, bool) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATS.Listen = "127.0.0.1:0"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPListen = ln.Addr().String()
	ln.Close()
	if err := cfg.EnsureDataDir(); err != nil {
		t.Fatal(err)
	}
	held, err := store.Open(cfg.DatabasePath(), store.DefaultOptions())
	if err != nil || held.Unavailable() != nil {
		t.Fatalf("open the database to hold its lock: %v %v", err, held.Unavailable())
	}
	releaseHeld := sync.OnceFunc(func() {
		if err := held.Close(); err != nil {
			t.Error(err)
		}
	})
	defer releaseHeld()

	logs := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, nil, logs) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v\n%s", err, logs)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("Serve did not return\n%s", logs)
		}
	}()

	base := "http://" + cfg.HTTPListen
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, err := get(base+"/healthz", 250*time.Millisecond)
		if err == nil {
			if code != http.StatusOK {
				t.Fatalf("/healthz: %d %q", code, body)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned %v\n%s", err, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered: %v\n%s", err, logs)
		}
	}
	code, readyz, err := get(base+"/readyz", 5*time.Second)
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	if !strings.Contains(readyz, "starting") {
		return readyz, false // the start was over: the lock's wait had passed
	}
	if code != http.StatusServiceUnavailable || strings.Contains(logs.String(), "stated ready") {
		t.Fatalf("/readyz during the start: %d %q\n%s", code, readyz, logs)
	}
	if code, body, err := get(base+"/metrics", 5*time.Second); err != nil || code != http.StatusOK {
		t.Fatalf("/metrics during the start: %d %q %v", code, body, err)
	}
	releaseHeld()
	// Once the lock is free stated starts (or, had its wait passed meanwhile, opens the store
	// unavailable): /readyz then answers for the started stated.
	for {
		code, body, err := get(base+"/readyz", 5*time.Second)
		if err != nil {
			t.Fatalf("/readyz after the start: %v", err)
		}
		if !strings.Contains(body, "starting") {
			if code != http.StatusOK && !strings.Contains(body, "not served") {
				t.Fatalf("/readyz after the start: %d %q\n%s", code, body, logs)
			}
			return readyz, true
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still says %q\n%s", body, logs)
		}
		time.Sleep(10 * time.Millisecond) // polling an HTTP endpoint: there is no event to wait on
	}
}
