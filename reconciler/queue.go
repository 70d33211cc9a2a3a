package reconciler

import (
	"container/heap"
	"maps"
	"slices"
	"sync"
	"time"
)

// queue is the controller's workqueue, after client-go's: a FIFO of keys with three guarantees.
//
//   - Dedup: a key added while it waits is not added again (it is reconciled once).
//   - One at a time per key: a key handed out by get is "processing" until done; an add meanwhile
//     marks it dirty, and done puts it back at the tail, so it is reconciled again after, never
//     concurrently.
//   - Delays: addAfter schedules an add (the earliest deadline per key wins), and addRateLimited
//     schedules one after the key's backoff, baseBackoff * 2^failures capped at maxBackoff, failures counting the
//     rate-limited adds since the last forget. A get that hands a key out drops its schedule: the
//     key is being reconciled now, earlier than asked (an add came first), and what that Reconcile
//     returns decides (client-go's delaying queue would run it once more at the old deadline).
//
// After shutdown, get hands out nothing more (waiting keys are dropped, not drained) and adds are
// ignored; done still works for keys that were in flight. The delay loop runs between start and
// shutdown; adds scheduled before start wait for it.
type queue struct {
	baseBackoff, maxBackoff time.Duration

	mu         sync.Mutex
	cond       *sync.Cond // signalled when items grows or on shutdown
	items      []string   // ready keys, FIFO
	dirty      map[string]struct{}
	processing map[string]struct{}
	failures   map[string]int
	waiting    waitHeap
	waitingBy  map[string]*waitItem
	closed     bool
	started    bool
	// readyAt holds when each key in items became ready, and waited is told, at get, how long the key
	// waited there; both only when waited is set (the controller's Metrics).
	readyAt map[string]time.Time
	waited  func(time.Duration)

	wake     chan struct{} // one token: the earliest deadline changed
	stop     chan struct{} // closed by shutdown
	loopDone chan struct{} // closed when the delay loop returns
}

// newQueue returns a queue; waited, when not nil, is told at every get how long the key waited ready.
func newQueue(baseBackoff, maxBackoff time.Duration, waited func(time.Duration)) *queue {
	q := &queue{
		baseBackoff: baseBackoff, maxBackoff: maxBackoff, waited: waited, readyAt: map[string]time.Time{},
		dirty: map[string]struct{}{}, processing: map[string]struct{}{}, failures: map[string]int{},
		waitingBy: map[string]*waitItem{},
		wake:      make(chan struct{}, 1), stop: make(chan struct{}), loopDone: make(chan struct{}),
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// start starts the delay loop. It is a no-op after shutdown or a first start.
func (q *queue) start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.started || q.closed {
		return
	}
	q.started = true
	go q.delayLoop()
}

// add queues key unless it is queued already or the queue is shut down.
func (q *queue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *queue) addLocked(key string) {
	if q.closed {
		return
	}
	if _, ok := q.dirty[key]; ok {
		return
	}
	q.dirty[key] = struct{}{}
	if _, ok := q.processing[key]; ok {
		return // done re-queues it
	}
	q.pushLocked(key)
}

// pushLocked appends key to the ready keys.
func (q *queue) pushLocked(key string) {
	q.items = append(q.items, key)
	if q.waited != nil {
		q.readyAt[key] = time.Now()
	}
	q.cond.Signal()
}

// get blocks until a key is ready and hands it out, marking it processing and dropping its scheduled
// add, if any; the caller must call done with it. ok is false once the queue is shut down.
func (q *queue) get() (key string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key = q.items[0]
	q.items[0] = ""
	q.items = q.items[1:]
	q.processing[key] = struct{}{}
	delete(q.dirty, key)
	if q.waited != nil {
		q.waited(time.Since(q.readyAt[key]))
		delete(q.readyAt, key)
	}
	// The Reconcile that begins now supersedes a scheduled add of key (a RequeueAfter, a backoff):
	// its own outcome decides what comes next, so the old schedule must not run it once more.
	if it, ok := q.waitingBy[key]; ok {
		heap.Remove(&q.waiting, it.index)
		delete(q.waitingBy, key)
	}
	return key, true
}

// done ends the processing of key; a key added meanwhile goes back to the tail.
func (q *queue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if _, ok := q.dirty[key]; ok && !q.closed {
		q.pushLocked(key)
	}
}

// addAfter adds key once d has passed (at once when d <= 0). A key already scheduled keeps the
// earlier of its two deadlines.
func (q *queue) addAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if d <= 0 {
		q.addLocked(key)
		return
	}
	at := time.Now().Add(d)
	if it, ok := q.waitingBy[key]; ok {
		if !at.Before(it.at) {
			return
		}
		it.at = at
		heap.Fix(&q.waiting, it.index)
	} else {
		it := &waitItem{key: key, at: at}
		heap.Push(&q.waiting, it)
		q.waitingBy[key] = it
	}
	if q.waiting[0].key == key {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// addRateLimited adds key after its backoff and counts one more failure. It returns the backoff.
func (q *queue) addRateLimited(key string) time.Duration {
	q.mu.Lock()
	n := q.failures[key]
	q.failures[key] = n + 1
	q.mu.Unlock()
	d := backoff(q.baseBackoff, q.maxBackoff, n)
	q.addAfter(key, d)
	return d
}

// forget resets key's failure count: its next rate-limited add waits base again.
func (q *queue) forget(key string) {
	q.mu.Lock()
	delete(q.failures, key)
	q.mu.Unlock()
}

// numFailures returns key's failure count.
func (q *queue) numFailures(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failures[key]
}

// inFlight returns the keys handed out and not yet done, sorted.
func (q *queue) inFlight() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Sorted(maps.Keys(q.processing))
}

// len returns the number of keys ready to be handed out.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// sizes returns the numbers of keys ready, scheduled for later and handed out.
func (q *queue) sizes() (ready, scheduled, processing int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items), len(q.waiting), len(q.processing)
}

// shutdown stops handing out keys, drops the waiting and scheduled ones, wakes every get, and waits
// for the delay loop. Keys in flight may still be passed to done. It is idempotent.
func (q *queue) shutdown() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.loopDone
		return
	}
	q.closed = true
	q.items = nil
	clear(q.readyAt)
	q.waiting = nil
	clear(q.waitingBy)
	started := q.started
	q.cond.Broadcast()
	close(q.stop)
	q.mu.Unlock()
	if !started {
		close(q.loopDone)
	}
	<-q.loopDone
}

// backoff is base * 2^failures, capped at limit (and never overflowing).
func backoff(base, limit time.Duration, failures int) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for range failures {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// delayLoop moves scheduled keys whose deadline passed into the queue.
func (q *queue) delayLoop() {
	defer close(q.loopDone)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		q.mu.Lock()
		now := time.Now()
		for len(q.waiting) > 0 && !q.waiting[0].at.After(now) {
			it := heap.Pop(&q.waiting).(*waitItem)
			delete(q.waitingBy, it.key)
			q.addLocked(it.key)
		}
		var next <-chan time.Time
		if len(q.waiting) > 0 {
			t.Reset(q.waiting[0].at.Sub(now))
			next = t.C
		} else {
			t.Stop()
		}
		q.mu.Unlock()
		select {
		case <-q.stop:
			return
		case <-q.wake:
		case <-next:
		}
	}
}

// waitItem is one scheduled add.
type waitItem struct {
	key   string
	at    time.Time
	index int
}

// waitHeap orders scheduled adds by deadline.
type waitHeap []*waitItem

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *waitHeap) Push(x any) {
	it := x.(*waitItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *waitHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return it
}
