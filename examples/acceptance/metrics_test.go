package acceptance_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/keeppeek/coordination/internal/e2e"
	"github.com/keeppeek/coordination/store/wire"
)

// The transcoder, the CV worker and the viewer, given --health-listen, serve /healthz, /readyz and
// /metrics there: once their worker is ready in the store, /readyz answers 200 and /metrics shows the
// worker ready and healthy, its controller's cache following the store, and the Go runtime's figures.
func TestWorkerCommandsServeMetrics(t *testing.T) {
	e := newEnv(t, "front-door")
	workers := followAcked(t, e.admin, "metrics-workers", "system", "workers/transcoder-a/")
	for _, c := range []struct{ name, pkg, id, service string }{
		{"transcoder", "./examples/transcoder", "metrics-tx", "transcoder-a"},
		{"cvworker", "./examples/cvworker", "metrics-cv", "cv-a"},
		{"viewer", "./examples/viewer", "metrics-viewer", ""}, // its namespace is its user's
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := e2e.Build(t, c.pkg, c.name)
			addr := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
			from := workers.mark()
			args := []string{"--worker-id", c.id, "--health-listen", addr}
			controller, service := "user/transcoder-a/intents/", "transcoder-a" // the viewer's
			if c.service != "" {
				args = append(args, "--service", c.service)
				controller, service = "service/"+c.service+"/intents/", c.service
			}
			p := startCommand(t, bin, []string{"NATS_URL=" + e.stated.URL(), "KP_USER=transcoder-a", "KP_PASSWORD=" + password("transcoder-a")}, args...)
			workers.waitFor(t, from, c.id+" ready", func(m wire.WatchMessage) bool {
				var st wire.WorkerStatus
				return m.Entry != nil && json.Unmarshal(m.Entry.Document, &st) == nil && st.WorkerID == c.id && st.Status == wire.StatusReady
			})
			get := func(path string) (int, string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(bounded(t), http.MethodGet, "http://"+addr+path, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("GET %s: %v\n%s", path, err, p.output())
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			if code, body := get("/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz: %d %s", code, body)
			}
			code, body := get("/metrics")
			if code != http.StatusOK {
				t.Fatalf("/metrics: %d", code)
			}
			for _, want := range []string{
				fmt.Sprintf(`worker_status{status="ready",worker_id=%q} 1`, c.id),
				fmt.Sprintf(`worker_healthy{worker_id=%q} 1`, c.id),
				fmt.Sprintf(`worker_info{principal="transcoder-a",service=%q,worker_id=%q} 1`, service, c.id),
				fmt.Sprintf(`reconciler_cache_following{controller=%q} 1`, controller),
				fmt.Sprintf(`reconciler_queue_depth{controller=%q}`, controller),
				"go_goroutines ",
				"process_resident_memory_bytes ",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q:\n%s", want, body)
				}
			}
			if code := p.stop(t, syscall.SIGTERM); code != 0 {
				t.Fatalf("exit %d after SIGTERM:\n%s", code, p.output())
			}
		})
	}
}
