package stated

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/server"
)

func getReadyz(t *testing.T, r *readiness) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.serveHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// /readyz is 200 only while stated serves the store (SPEC section 14): not while it starts; not
// while its NATS connection is down (no request reaches it); once stated begins to stop it takes no
// more requests, and once the store is closed every request would get UNAVAILABLE, so it says 503
// with the reason, as for a store that never loaded.
func TestReadyzFollowsTheStoreThroughAStop(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), DatabaseFile), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var r readiness
	if code, body := getReadyz(t, &r); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Fatalf("while starting: %d %s", code, body)
	}
	status := nats.CONNECTED
	var unfit, peer error
	r.started(st, func() nats.Status { return status }, func() error { return unfit }, func() error { return peer })
	if code, body := getReadyz(t, &r); code != http.StatusOK {
		t.Fatalf("a serving store: %d %s", code, body)
	}
	unfit = errors.New("max_snapshot_bytes 65536 is more than the NATS server's max_payload 1024")
	if code, body := getReadyz(t, &r); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot carry its bounds") ||
		!strings.Contains(body, unfit.Error()) {
		t.Fatalf("on a NATS server that cannot carry the bounds: %d %s", code, body)
	}
	unfit = nil
	peer = fmt.Errorf("%w: instance abc", server.ErrAnotherServer)
	if code, body := getReadyz(t, &r); code != http.StatusServiceUnavailable || !strings.Contains(body, "split between two stores") ||
		!strings.Contains(body, "instance abc") {
		t.Fatalf("beside another server on the same subjects: %d %s", code, body)
	}
	peer = nil
	status = nats.RECONNECTING
	if code, body := getReadyz(t, &r); code != http.StatusServiceUnavailable || !strings.Contains(body, "NATS connection is reconnecting") {
		t.Fatalf("while NATS reconnects: %d %s", code, body)
	}
	status = nats.CONNECTED
	r.stopping.Store(true)
	if code, body := getReadyz(t, &r); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Fatalf("while stopping: %d %s", code, body)
	}
	r.stopping.Store(false)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if code, body := getReadyz(t, &r); code != http.StatusServiceUnavailable || !strings.Contains(body, "closed") {
		t.Fatalf("a closed store: %d %s", code, body)
	}
}
