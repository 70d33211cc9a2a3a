package stated

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/store"
	"github.com/keeppeek/coordination/store/server"
)

// state_ready is 0 for every reason /readyz answers 503 (those an SRE pages on: NATS down, a NATS
// server that cannot carry the bounds, another stated on the same subjects, a store not served) and
// 1 exactly when it answers 200.
func TestReadyGaugeFollowsReadyz(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), DatabaseFile), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	var r readiness
	g := r.gauge()
	check := func(when string, want float64) {
		t.Helper()
		code, body := getReadyz(t, &r)
		var m dto.Metric
		if err := g.Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetGauge().GetValue(); got != want || (want == 1) != (code == 200) {
			t.Errorf("%s: state_ready %v, /readyz %d %q; want state_ready %v", when, got, code, body, want)
		}
	}
	check("starting", 0)
	status := nats.CONNECTED
	var unfit, peer error
	r.started(st, func() nats.Status { return status }, func() error { return unfit }, func() error { return peer })
	check("serving", 1)
	status = nats.RECONNECTING
	check("NATS reconnecting", 0)
	status = nats.CONNECTED
	unfit = errors.New("max_document_bytes does not fit")
	check("a NATS server that cannot carry the bounds", 0)
	unfit = nil
	peer = fmt.Errorf("%w: instance abc", server.ErrAnotherServer)
	check("another server on the same subjects", 0)
	peer = nil
	check("serving again", 1)
	r.stopping.Store(true)
	check("stopping", 0)
	r.stopping.Store(false)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	check("a closed store", 0)
}
