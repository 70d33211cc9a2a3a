package view_test

import (
	"testing"
	"time"

	"github.com/keeppeek/coordination/examples/internal/simtest"
	"github.com/keeppeek/coordination/reconciler"
)

// A viewer stopped while it still waits for its variant (nobody publishes it) reports its intent
// stopped, as its README says of SIGTERM and Ctrl-C: its "pending: waiting for ... to be READY" was
// left in the store after it exited, saying that a viewer gone for good still waited.
func TestViewerStopWhilePendingReportsStopped(t *testing.T) {
	f := setup(t)
	v, stop := f.viewer(t)
	const unpublished = "browser-h264-1080p"
	key, err := v.Want(t.Context(), src, "video", unpublished)
	if err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, 10*time.Second, "the status pending", func() bool { return f.status(t, key).State == reconciler.StatePending })
	stop()
	if st := f.status(t, key); st.State != reconciler.StateStopped || st.VariantID != unpublished {
		t.Fatalf("status after the viewer stopped: %+v, want stopped naming %s", st, unpublished)
	}
	if subs := f.viewerSubs(); len(subs) != 0 {
		t.Fatalf("subscriptions after the viewer stopped: %+v", subs)
	}
}
