package acceptance_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keeppeek/coordination/coordinator"
	"github.com/keeppeek/coordination/examples/internal/transcode"
)

// The figures for the issue note. They measure and report; they assert nothing about speed.
//
//	go test ./examples/acceptance -run '^$' -bench . -benchtime 1x

// BenchmarkFailover measures, over 10 independent failovers with a 2 s lease TTL against one stated,
// the time from killing the lease holder to the standby's successful start_publication (the
// standby's "publication started" event, sent once the simulator's reply is in). Each run has its
// own service namespace, variant and pair of transcoders, which are stopped after the run.
//
// The holder renews every TTL/3, so the failover time is TTL minus the time since its last renewal,
// plus detection. Killing it right when its publication turns READY would tie the kill to the claim's
// phase (a constant ~1.5 s here); run i kills i/10 of a renewal period later instead, so the runs
// cover the whole period as kills at random moments would. takeover-median-ms is the part after the
// lease deadline: expiry, the EXPIRE to the standby, its create-only claim and its start_publication.
func BenchmarkFailover(b *testing.B) {
	const runs, ttl, source = 10, 2 * time.Second, "bench-fo-door"
	e := newEnv(b, source)
	var failovers, claims, takeovers []time.Duration
	run := 0
	for b.Loop() {
		for range runs {
			service, variant := fmt.Sprintf("bfo%02d", run), fmt.Sprintf("bfo%02d-720p", run)
			phase := time.Duration(run%runs) * ttl / 3 / runs
			r := runFailover(b, e, service, source, variant, ttl, phase, service+"-a", service+"-b")
			failovers, claims = append(failovers, r.startedAfter), append(claims, r.claimedAfter)
			takeovers = append(takeovers, r.killedAt.Add(r.startedAfter).Sub(r.oldLeaseExpires))
			for _, tx := range r.transcoders {
				tx.stop()
				tx.nc.Close()
			}
			run++
		}
	}
	b.Logf("%d failovers, TTL %v: holder killed -> standby's start_publication %v", len(failovers), ttl, failovers)
	b.ReportMetric(ms(median(failovers)), "failover-median-ms")
	b.ReportMetric(ms(percentile(failovers, 95)), "failover-p95-ms")
	b.ReportMetric(ms(median(claims)), "claim-median-ms")
	b.ReportMetric(ms(median(takeovers)), "takeover-median-ms")
}

// BenchmarkReconcileLatency measures, for 50 publish intents written one after another (each a fresh
// key and variant) to one running transcoder, the time from just before the intent's put to the
// transcoder's "publication started" event for it (its start_publication answered).
func BenchmarkReconcileLatency(b *testing.B) {
	const intents, service, source = 50, "bench-rl", "bench-rl-door"
	e := newEnv(b, source)
	ev := newRecorder[transcode.Event]()
	startTranscoder(b, e.stated, "rl-1", service, 5*time.Second, ev)
	ctx := bounded(b)
	put := func(variant string) (time.Time, time.Time) {
		b.Helper()
		key := intentKey(source, variant)
		mark := ev.mark()
		t0 := time.Now()
		if _, err := e.coord.PutIntent(ctx, "service/"+service, key, publishIntent(source, variant, coordinator.RecordingDisabled)); err != nil {
			b.Fatal(err)
		}
		started, _ := ev.waitFor(b, mark, "publication started for "+key, isEvent("publication started", "rl-1", key))
		return t0, started.At
	}
	put("rl-warmup-720p") // the transcoder is running and has its capabilities
	var samples []time.Duration
	n := 0
	for b.Loop() {
		for range intents {
			t0, at := put(fmt.Sprintf("rl%03d-720p", n))
			samples = append(samples, at.Sub(t0))
			n++
		}
	}
	b.Logf("%d intents: put -> start_publication p50 %v, p95 %v, max %v", len(samples),
		percentile(samples, 50), percentile(samples, 95), percentile(samples, 100))
	b.ReportMetric(ms(percentile(samples, 50)), "reconcile-p50-ms")
	b.ReportMetric(ms(percentile(samples, 95)), "reconcile-p95-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
