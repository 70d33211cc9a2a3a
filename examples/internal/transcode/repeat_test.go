package transcode_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keeppeek/coordination/capabilities/sim"
	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/examples/internal/transcode"
	"github.com/keeppeek/coordination/store/wire"
)

// events records a transcoder's events and lets a test wait for one.
type events struct {
	mu   sync.Mutex
	all  []transcode.Event
	wake chan struct{}
}

func newEvents() *events { return &events{wake: make(chan struct{})} }

func (r *events) add(e transcode.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, e)
	close(r.wake)
	r.wake = make(chan struct{})
}

// waitFor returns the index of the first event at from or later that satisfies pred.
func (r *events) waitFor(t *testing.T, from int, what string, pred func(transcode.Event) bool) int {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		for i := from; i < len(r.all); i++ {
			if pred(r.all[i]) {
				r.mu.Unlock()
				return i
			}
		}
		from = len(r.all)
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-timeout:
			t.Fatalf("no event: %s", what)
		}
	}
}

func (r *events) count(kind, intent string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.all {
		if e.Kind == kind && e.Intent == intent {
			n++
		}
	}
	return n
}

// A transcoder told "standby" (the intent's lease is another worker's) and "invalid" (the intent
// cannot be served) at every reconcile of the intent: every capability change and every 10 s resync,
// although nothing about the intent had changed, and examples/transcoder logs each event at INFO. It
// tells a state when it changes, not each time it is seen again. The status event of an active
// publication has no message: its detail is the bare state, without a trailing space.
func TestStandbyAndInvalidAreToldOnce(t *testing.T) {
	const other = "back-yard"
	f := &fixture{simtest.Start(t, []sim.SourceConfig{{SourceID: src}, {SourceID: other}}, svc)}
	// Another worker holds the lease of the intent.
	lease, _ := json.Marshal(map[string]any{"holder": "tx-other", "claimed_at_ms": time.Now().UnixMilli()})
	ttl := int64(time.Hour / time.Millisecond)
	if _, err := f.Admin.Put(t.Context(), wire.PutRequest{Namespace: ns, Key: "leases/front-door-video-browser-h264-720p",
		Schema: "keeppeek.lease.v1", Document: lease, TTLMs: &ttl}); err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	tr, err := transcode.New(transcode.Config{Conn: f.Connect(t, svc), Principal: svc, WorkerID: "tx-1", Service: svc,
		LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Events: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	simtest.Run(t, tr.Run)

	if _, err := f.Coord.PutIntent(t.Context(), ns, key, publishIntent("disabled")); err != nil {
		t.Fatal(err)
	}
	const invalidKey = "intents/front-door-video-unnamed"
	if _, err := f.Coord.PutIntent(t.Context(), ns, invalidKey, coordinator.PublishIntent(src, "video", "disabled")); err != nil {
		t.Fatal(err)
	}
	// An intent this worker serves on the other source: its status follows that source's comings and
	// goings, each a capability change that reconciles every intent.
	served := publishIntent("disabled")
	served.SourceID = other
	const servedKey = "intents/back-yard-video-browser-h264-720p"
	if _, err := f.Coord.PutIntent(t.Context(), ns, servedKey, served); err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, 0, "standby", func(e transcode.Event) bool { return e.Kind == "standby" && e.Intent == key })
	ev.waitFor(t, 0, "invalid", func(e transcode.Event) bool { return e.Kind == "invalid" && e.Intent == invalidKey })
	at := ev.waitFor(t, 0, "the served intent active", func(e transcode.Event) bool {
		return e.Kind == "status" && e.Intent == servedKey && strings.HasPrefix(e.Detail, "active")
	})
	ev.mu.Lock()
	if d := ev.all[at].Detail; d != "active" {
		t.Errorf("status detail of an active publication %q, want %q", d, "active")
	}
	ev.mu.Unlock()

	for round := range 4 {
		if err := f.Sim.SetOnline(other, false); err != nil {
			t.Fatal(err)
		}
		at = ev.waitFor(t, at+1, fmt.Sprintf("round %d: the served intent pending", round), func(e transcode.Event) bool {
			return e.Kind == "status" && e.Intent == servedKey && strings.HasPrefix(e.Detail, "pending")
		})
		if err := f.Sim.SetOnline(other, true); err != nil {
			t.Fatal(err)
		}
		at = ev.waitFor(t, at+1, fmt.Sprintf("round %d: the served intent active", round), func(e transcode.Event) bool {
			return e.Kind == "capability ready" && e.Intent == servedKey
		})
	}
	if n := ev.count("standby", key); n != 1 {
		t.Errorf("%d standby events over 8 capability changes, want 1", n)
	}
	if n := ev.count("invalid", invalidKey); n != 1 {
		t.Errorf("%d invalid events over 8 capability changes, want 1", n)
	}
}
