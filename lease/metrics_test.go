package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/lease"
)

// electorFigures returns leading, terms and fencing token as reg collects them.
func electorFigures(t *testing.T, reg *prometheus.Registry) (leading, terms, token float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		m := f.GetMetric()
		if len(m) != 1 {
			t.Fatalf("%s: %d series, want 1", f.GetName(), len(m))
		}
		labels := map[string]string{}
		for _, l := range m[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] != ns || labels["key"] != "leaders/metrics" {
			t.Fatalf("%s labels %v", f.GetName(), labels)
		}
		switch f.GetName() {
		case "lease_elector_leading":
			leading = m[0].GetGauge().GetValue()
		case "lease_elector_terms_total":
			terms = m[0].GetCounter().GetValue()
		case "lease_elector_fencing_token":
			token = m[0].GetGauge().GetValue()
		}
	}
	return leading, terms, token
}

// An elector's collector shows whether it leads, how many terms it began and the running term's
// fencing token: the leader 1, 1, its lease revision; the standby 0, 0, 0; after the leader stops,
// the standby leads with a greater token and the former leader shows 0 and no token.
func TestElectorCollector(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := ctxT(t)
	type replica struct {
		e      *lease.Elector
		reg    *prometheus.Registry
		cancel context.CancelFunc
		done   chan error
	}
	started := make(chan string, 4)
	replicas := map[string]*replica{}
	for _, name := range []string{"r1", "r2"} {
		e, err := lease.NewElector(newClient(t, env), lease.ElectorOptions{
			Options: lease.Options{Namespace: ns, Key: "leaders/metrics", Holder: name, TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond},
			OnStarted: func(ctx context.Context, l *lease.Lease) {
				started <- name
				<-ctx.Done()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.Collector())
		if l, n, tok := electorFigures(t, reg); l != 0 || n != 0 || tok != 0 {
			t.Fatalf("%s before Run: leading %v, terms %v, token %v", name, l, n, tok)
		}
		rctx, cancel := context.WithCancel(ctx)
		r := &replica{e: e, reg: reg, cancel: cancel, done: make(chan error, 1)}
		replicas[name] = r
		go func() { r.done <- e.Run(rctx) }()
	}
	leader := recv(t, started, "a first leader")
	standby := map[string]string{"r1": "r2", "r2": "r1"}[leader]
	l, n, tok := electorFigures(t, replicas[leader].reg)
	if l != 1 || n != 1 || tok <= 0 {
		t.Fatalf("leader %s: leading %v, terms %v, token %v", leader, l, n, tok)
	}
	if l, n, tok2 := electorFigures(t, replicas[standby].reg); l != 0 || n != 0 || tok2 != 0 {
		t.Fatalf("standby %s: leading %v, terms %v, token %v", standby, l, n, tok2)
	}
	replicas[leader].cancel()
	if err := recvErr(t, replicas[leader].done); err != nil {
		t.Fatalf("leader's Run: %v", err)
	}
	if got := recv(t, started, "the standby leading"); got != standby {
		t.Fatalf("%s started, want %s", got, standby)
	}
	if l, n, tok2 := electorFigures(t, replicas[standby].reg); l != 1 || n != 1 || tok2 <= tok {
		t.Fatalf("new leader %s: leading %v, terms %v, token %v (former %v)", standby, l, n, tok2, tok)
	}
	if l, n, tok2 := electorFigures(t, replicas[leader].reg); l != 0 || n != 1 || tok2 != 0 {
		t.Fatalf("former leader %s: leading %v, terms %v, token %v", leader, l, n, tok2)
	}
	replicas[standby].cancel()
	if err := recvErr(t, replicas[standby].done); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func recvErr(t *testing.T, ch <-chan error) error { return recv(t, ch, "Run's return") }
