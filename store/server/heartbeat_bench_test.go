package server_test

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// BenchmarkHeartbeats measures how many heartbeats stated takes in per second from a fleet of 256
// workers, each after the first a keepalive (SPEC section 11): published as fast as one connection
// can, timed until the server has handled the last (or replaced it, while it waited, by its worker's
// next). Run it with:
//
//	go test ./store/server -run '^$' -bench Heartbeats
func BenchmarkHeartbeats(b *testing.B) {
	const workers = 256
	env := testenv.Start(b, testenv.Options{WatchSweep: time.Hour}) // WatchSweep gives the Env its metrics
	nc := env.Connect(b, "alice")
	handled := func() float64 { // a heartbeat replaced by its worker's next while it waited is done with too
		total := 0.0
		for _, outcome := range []string{"accepted", "superseded"} {
			var m dto.Metric
			_ = env.Metrics.Heartbeats.WithLabelValues(outcome).Write(&m)
			total += m.GetCounter().GetValue()
		}
		return total
	}
	seq := 0
	publish := func(n int) {
		for i := range n {
			seq++
			w := fmt.Sprintf("w%03d", i%workers)
			body := fmt.Sprintf(`{"worker_id":%q,"service":"transcoder-a","sequence":%d,"sent_at_ms":1,"interval_ms":60000,"status":"ready","leases":[]}`, w, seq)
			if err := nc.Publish(wire.HeartbeatSubject(wire.DefaultPrefix, "alice", w), []byte(body)); err != nil {
				b.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	await := func(total float64) {
		deadline := time.Now().Add(time.Minute)
		for handled() < total {
			if time.Now().After(deadline) {
				b.Fatalf("%v of %v heartbeats handled after a minute", handled(), total)
			}
			time.Sleep(time.Millisecond)
		}
	}
	publish(workers) // every worker's first heartbeat: a put each
	await(workers)
	b.ResetTimer()
	start := time.Now()
	publish(b.N)
	await(float64(workers + b.N))
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "heartbeats/s")
}
