package stated

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keeppeek/coordination/store"
)

func getReadyz(t *testing.T, h http.HandlerFunc) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// /readyz is 200 only while the store serves (SPEC section 14): once stated begins to stop it takes no
// more requests, and once the store is closed every request would get UNAVAILABLE, so it says 503
// with the reason, as for a store that never loaded.
func TestReadyzFollowsTheStoreThroughAStop(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), DatabaseFile), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var stopping atomic.Bool
	h := readyz(st, &stopping)
	if code, body := getReadyz(t, h); code != http.StatusOK {
		t.Fatalf("a serving store: %d %s", code, body)
	}
	stopping.Store(true)
	if code, body := getReadyz(t, h); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Fatalf("while stopping: %d %s", code, body)
	}
	stopping.Store(false)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if code, body := getReadyz(t, h); code != http.StatusServiceUnavailable || !strings.Contains(body, "closed") {
		t.Fatalf("a closed store: %d %s", code, body)
	}
}
