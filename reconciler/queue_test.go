package reconciler

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// getWithin gets a key from q, failing the test when none comes within testTimeout (the queue is then
// shut down so that the blocked get returns).
func getWithin(t *testing.T, q *queue) string {
	t.Helper()
	type got struct {
		key string
		ok  bool
	}
	ch := make(chan got, 1)
	go func() {
		k, ok := q.get()
		ch <- got{k, ok}
	}()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case g := <-ch:
		if !g.ok {
			t.Fatal("get: queue shut down")
		}
		return g.key
	case <-timer.C:
		q.shutdown()
		<-ch
		t.Fatal("get: timed out")
		return ""
	}
}

func TestQueueDedupFIFO(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second, nil)
	defer q.shutdown()
	for _, k := range []string{"a", "b", "a", "c", "b", "a"} {
		q.add(k)
	}
	if n := q.len(); n != 3 {
		t.Fatalf("len after adding a, b, a, c, b, a = %d, want 3", n)
	}
	var got []string
	for range 3 {
		k := getWithin(t, q)
		got = append(got, k)
		q.done(k)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("handed out %v, want [a b c]", got)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("len after draining = %d, want 0", n)
	}
}

func TestQueueAddWhileProcessing(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second, nil)
	defer q.shutdown()
	q.add("a")
	if k := getWithin(t, q); k != "a" {
		t.Fatalf("got %q, want a", k)
	}
	q.add("a")
	q.add("a")
	q.add("b")
	// a is processing: only b may be handed out now.
	if k := getWithin(t, q); k != "b" {
		t.Fatalf("got %q while a is processing, want b", k)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("len = %d while a is processing and dirty, want 0", n)
	}
	q.done("a")
	if n := q.len(); n != 1 {
		t.Fatalf("len after done(a) = %d, want 1 (a again, once)", n)
	}
	if k := getWithin(t, q); k != "a" {
		t.Fatalf("got %q after done(a), want a", k)
	}
	q.done("a")
	q.done("b")
	if n := q.len(); n != 0 {
		t.Fatalf("len = %d, want 0", n)
	}
}

// TestQueueNoConcurrentSameKey hammers the queue from many goroutines and checks that no key is ever
// processed by two workers at once and that every add is followed by a processing that saw it.
func TestQueueNoConcurrentSameKey(t *testing.T) {
	const (
		workers = 8
		adders  = 16
		adds    = 500
		nkeys   = 5
	)
	q := newQueue(time.Millisecond, time.Second, nil)
	q.start()
	keys := make([]string, nkeys)
	index := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		index[keys[i]] = i
	}
	var (
		inflight   [nkeys]atomic.Int32
		version    [nkeys]atomic.Int64 // bumped before each add
		violations atomic.Int64
		processed  atomic.Int64
	)
	type seen struct{ key, version int64 }
	seenCh := make(chan seen, 64)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				k, ok := q.get()
				if !ok {
					return
				}
				i := index[k]
				if inflight[i].Add(1) != 1 {
					violations.Add(1)
				}
				v := version[i].Load()
				for range 10 {
					runtime.Gosched() // give a second worker the chance to violate
				}
				processed.Add(1)
				inflight[i].Add(-1)
				q.done(k)
				select {
				case seenCh <- seen{int64(i), v}:
				case <-quit:
				}
			}
		})
	}
	var addWG sync.WaitGroup
	for a := range adders {
		addWG.Go(func() {
			for j := range adds {
				i := (a + j) % nkeys
				version[i].Add(1)
				q.add(keys[i])
			}
		})
	}
	addersDone := make(chan struct{})
	go func() {
		addWG.Wait()
		close(addersDone)
	}()

	// Read what the workers saw until, after the adders finished, every key was processed at its final
	// version.
	var last [nkeys]int64
	caughtUp := func() bool {
		for i := range nkeys {
			if last[i] != version[i].Load() {
				return false
			}
		}
		return true
	}
	done := addersDone
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for finished := false; !finished; {
		select {
		case s := <-seenCh:
			last[s.key] = max(last[s.key], s.version)
		case <-done:
			done = nil
		case <-timer.C:
			t.Errorf("timed out: last processed versions %v, want %d adds per key", last, adders*adds/nkeys)
			finished = true
		}
		if done == nil && caughtUp() {
			finished = true
		}
	}
	close(quit)
	q.shutdown()
	wg.Wait()
	<-addersDone
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d times a key was processed by two workers at once", v)
	}
	total := int64(adders * adds)
	if p := processed.Load(); p < nkeys || p > total {
		t.Fatalf("processed %d times, want between %d and %d", p, nkeys, total)
	}
	t.Logf("%d adds, %d processings", total, processed.Load())
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		base, limit time.Duration
		failures    int
		want        time.Duration
	}{
		{10 * ms, time.Second, 0, 10 * ms},
		{10 * ms, time.Second, 1, 20 * ms},
		{10 * ms, time.Second, 2, 40 * ms},
		{10 * ms, time.Second, 6, 640 * ms},
		{10 * ms, time.Second, 7, time.Second},
		{10 * ms, time.Second, 1000, time.Second},
		{time.Hour, time.Duration(math.MaxInt64), 1000, time.Duration(math.MaxInt64)},
		{50 * ms, 50 * ms, 0, 50 * ms},
		{50 * ms, 50 * ms, 3, 50 * ms},
		{0, time.Second, 5, 0},
	} {
		if got := backoff(tc.base, tc.limit, tc.failures); got != tc.want {
			t.Errorf("backoff(%v, %v, %d) = %v, want %v", tc.base, tc.limit, tc.failures, got, tc.want)
		}
	}
}

func TestQueueRateLimitGrowsAndResets(t *testing.T) {
	// Not started: scheduled adds wait, so nothing races the counts.
	q := newQueue(time.Hour, 8*time.Hour, nil)
	defer q.shutdown()
	var got []time.Duration
	for range 5 {
		got = append(got, q.addRateLimited("a"))
	}
	want := []time.Duration{time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 8 * time.Hour}
	if !slices.Equal(got, want) {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
	if n := q.numFailures("a"); n != 5 {
		t.Fatalf("failures of a = %d, want 5", n)
	}
	if d := q.addRateLimited("b"); d != time.Hour {
		t.Fatalf("first backoff of b = %v, want 1h: failures are per key", d)
	}
	q.forget("a")
	if n := q.numFailures("a"); n != 0 {
		t.Fatalf("failures of a after forget = %d, want 0", n)
	}
	if d := q.addRateLimited("a"); d != time.Hour {
		t.Fatalf("backoff of a after forget = %v, want 1h", d)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("len = %d: a rate-limited add was handed out before its backoff", n)
	}
}

func TestQueueAddAfter(t *testing.T) {
	// Not started yet: scheduled adds wait for the delay loop, so a "soon" that comes due while this
	// goroutine is descheduled cannot race the count.
	q := newQueue(time.Millisecond, time.Second, nil)
	defer q.shutdown()

	const delay = 50 * time.Millisecond
	t0 := time.Now()
	q.addAfter("late", delay)
	q.addAfter("soon", time.Millisecond)
	q.addAfter("now", 0)
	if n := q.len(); n != 1 {
		t.Fatalf("len = %d right after the adds, want 1 (only the undelayed one)", n)
	}
	q.start()
	var got []string
	for range 3 {
		k := getWithin(t, q)
		got = append(got, k)
		if k == "late" {
			if el := time.Since(t0); el < delay {
				t.Fatalf("late handed out after %v, before its delay %v", el, delay)
			}
		}
		q.done(k)
	}
	if !slices.Equal(got, []string{"now", "soon", "late"}) {
		t.Fatalf("handed out %v, want [now soon late]", got)
	}

	// The earlier deadline wins, both ways round.
	q.addAfter("x", time.Hour)
	q.addAfter("x", time.Millisecond)
	q.addAfter("y", time.Millisecond)
	q.addAfter("y", time.Hour)
	got = got[:0]
	for range 2 {
		k := getWithin(t, q)
		got = append(got, k)
		q.done(k)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("handed out %v, want x and y (earliest deadlines)", got)
	}

}

// awaitScheduled waits until the delay loop has moved every scheduled add of q into the queue.
func awaitScheduled(t *testing.T, q *queue) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		q.mu.Lock()
		n := len(q.waitingBy)
		q.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scheduled adds still waiting after %v", n, testTimeout)
		}
		time.Sleep(time.Millisecond) // the delay loop signals nothing: poll, bounded
	}
}

// A delayed add that comes due while its key is still queued dedups with it; one made while the key
// is processing (its Reconcile's own RequeueAfter) that comes due before done has it reconciled once
// more, after done; one made before a get hands the key out is dropped by that get. Each case
// controls when the add comes due (the delay loop starts only then), so none depends on how fast a
// get is scheduled.
func TestQueueAddAfterOfAQueuedOrProcessingKey(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		q := newQueue(time.Millisecond, time.Second, nil)
		defer q.shutdown()
		q.add("z")
		q.addAfter("z", time.Millisecond)
		q.start()
		awaitScheduled(t, q)
		if n := q.len(); n != 1 {
			t.Fatalf("len = %d after the delayed add of a queued key came due, want 1", n)
		}
		k := getWithin(t, q)
		q.done(k)
		if n := q.len(); k != "z" || n != 0 {
			t.Fatalf("got %q, then len %d; want z once", k, n)
		}
	})
	t.Run("processing", func(t *testing.T) {
		q := newQueue(time.Millisecond, time.Second, nil)
		defer q.shutdown()
		q.add("z")
		k := getWithin(t, q)
		q.addAfter("z", time.Millisecond) // z is processing when its delayed add comes due
		q.start()
		awaitScheduled(t, q)
		if n := q.len(); n != 0 {
			t.Fatalf("len = %d: a key was handed out again while processing", n)
		}
		q.done(k)
		k2 := getWithin(t, q)
		q.done(k2)
		if k != "z" || k2 != "z" {
			t.Fatalf("got %q then %q, want z twice", k, k2)
		}
	})
	t.Run("superseded", func(t *testing.T) {
		q := newQueue(time.Millisecond, time.Second, nil)
		defer q.shutdown()
		q.addAfter("z", time.Hour)
		q.addAfter("y", time.Hour)
		q.add("z") // an event before the deadline
		k := getWithin(t, q)
		q.mu.Lock()
		_, scheduled := q.waitingBy["z"]
		n := len(q.waiting)
		q.mu.Unlock()
		if k != "z" || scheduled || n != 1 {
			t.Fatalf("got %q; z still scheduled %v, %d scheduled; want z handed out, its schedule dropped, y's kept", k, scheduled, n)
		}
		q.done(k)
	})
}

func TestQueueShutdown(t *testing.T) {
	q := newQueue(time.Millisecond, time.Second, nil)
	q.start()
	q.add("a")
	q.add("b")
	q.addAfter("later", time.Hour)
	if k := getWithin(t, q); k != "a" {
		t.Fatalf("got %q, want a", k)
	}

	// Blocked getters (b is taken by one of them or stays queued) all return on shutdown.
	const getters = 4
	results := make(chan bool, getters)
	for range getters {
		go func() {
			k, ok := q.get()
			if ok {
				q.done(k)
			}
			results <- ok
		}()
	}
	q.shutdown()
	handed := 0
	for range getters {
		if recv(t, results, "a blocked get to return after shutdown") {
			handed++
		}
	}
	if handed > 1 {
		t.Fatalf("%d gets succeeded, want at most 1 (b)", handed)
	}

	// After shutdown: nothing is handed out, adds are ignored, done of an in-flight key works.
	q.add("c")
	q.addAfter("d", time.Millisecond)
	q.done("a")
	q.add("a")
	if k, ok := q.get(); ok {
		t.Fatalf("get after shutdown handed out %q", k)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("len after shutdown = %d, want 0", n)
	}
	q.shutdown() // idempotent

	// A queue that never started shuts down too.
	newQueue(time.Millisecond, time.Second, nil).shutdown()
}
